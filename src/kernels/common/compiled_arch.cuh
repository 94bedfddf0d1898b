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

// Shared memory of one SM of an architecture, in bytes, by its __CUDA_ARCH__ value (900 for
// sm_90 and sm_90a). A host-side test holds it to hw/gpu_table.cc for every GPU listed there.
constexpr int arch_smem_per_sm(int cuda_arch) {
  if (cuda_arch == 800 || cuda_arch == 870) return 167936;  // A100, Orin: 164 KB
  // The other Ampere and Ada GPUs, Blackwell sm_120 / sm_121: 100 KB.
  if (cuda_arch == 860 || cuda_arch == 890 || cuda_arch >= 1200) return 102400;
  return kHopperSmemPerSm;  // Hopper, Blackwell sm_100 / sm_103: 228 KB
}

// Shared memory of one SM of the architecture this pass compiles for, in bytes.
constexpr int compiled_arch_smem_per_sm() {
#if defined(__CUDA_ARCH__)
  return arch_smem_per_sm(__CUDA_ARCH__);
#else
  return kHopperSmemPerSm;
#endif
}

// Whether two CTAs of `dynamic_smem_bytes` each are resident together on an SM of
// `smem_per_sm` bytes (the launch bounds ask registers for as many CTAs as can be resident).
constexpr bool two_ctas_fit(int dynamic_smem_bytes, int smem_per_sm) {
  return 2 * (dynamic_smem_bytes + kSmemReservedPerCta) <= smem_per_sm;
}

}  // namespace fp4moe::kernels
