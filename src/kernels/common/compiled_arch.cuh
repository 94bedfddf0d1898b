// compiled_arch.cuh - limits of the GPU architecture that a device compilation pass targets, for
// choices that device code must make as compile-time constants (launch bounds). The host pass,
// which ignores launch bounds, sees Hopper's. The figures are the CUDA programming guide's
// shared memory per SM by compute capability (hw/gpu_table.cc's smem_per_sm where it lists the GPU).
#pragma once

namespace fp4moe::kernels {

// Shared memory of one Hopper SM (sm_90), in bytes: the wgmma family's, compiled for it alone.
inline constexpr int kHopperSmemPerSm = 233472;

// Shared memory the driver reserves for each resident CTA (sm_80 and later).
inline constexpr int kSmemReservedPerCta = 1024;

// Shared memory of one SM of the architecture this pass compiles for, in bytes.
constexpr int compiled_arch_smem_per_sm() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870)
  return 167936;  // A100, Orin: 164 KB
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
  return 102400;  // the other Ampere and Ada GPUs, Blackwell sm_120 / sm_121: 100 KB
#else
  return kHopperSmemPerSm;  // Hopper, Blackwell sm_100 / sm_103: 228 KB
#endif
}

// Whether two CTAs of `dynamic_smem_bytes` each are resident together on an SM of
// `smem_per_sm` bytes (the launch bounds ask registers for as many CTAs as can be resident).
constexpr bool two_ctas_fit(int dynamic_smem_bytes, int smem_per_sm) {
  return 2 * (dynamic_smem_bytes + kSmemReservedPerCta) <= smem_per_sm;
}

}  // namespace fp4moe::kernels
