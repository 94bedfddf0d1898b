// Compiled once per architecture, for it alone (tests/CMakeLists.txt; FP4MOE_PROBE_TARGET = 80 or
// 90a): a kernel whose only machine code is that architecture's, for build_support_test.
#define FP4MOE_PROBE_CAT2(a, b) a##b
#define FP4MOE_PROBE_CAT(a, b) FP4MOE_PROBE_CAT2(a, b)
#define FP4MOE_PROBE_KERNEL FP4MOE_PROBE_CAT(arch_probe_kernel_, FP4MOE_PROBE_TARGET)
#define FP4MOE_PROBE_ADDRESS FP4MOE_PROBE_CAT(arch_probe_, FP4MOE_PROBE_TARGET)

namespace fp4moe::test {

__global__ void FP4MOE_PROBE_KERNEL(int* out) {
  if (out) *out = 1;
}

// The kernel's host address, for cudaFuncGetAttributes.
const void* FP4MOE_PROBE_ADDRESS() { return reinterpret_cast<const void*>(&FP4MOE_PROBE_KERNEL); }

}  // namespace fp4moe::test
