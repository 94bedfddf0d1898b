#include "kernels/gemm/w4a16_registry.h"

#include <mutex>

namespace fp4moe::kernels {

std::span<const W4a16Kernel> w4a16_kernels() {
  static const std::vector<W4a16Kernel> all = [] {
    std::vector<W4a16Kernel> v = w4a16_swiglu_kernels();
    for (auto& k : w4a16_finalize_kernels()) v.push_back(k);
    for (auto& k : w4a16_none_kernels()) v.push_back(k);
    for (auto& k : w4a16_wgmma_swiglu_kernels()) v.push_back(k);
    for (auto& k : w4a16_wgmma_finalize_kernels()) v.push_back(k);
    for (auto& k : w4a16_gemv_swiglu_kernels()) v.push_back(k);
    for (auto& k : w4a16_gemv_finalize_kernels()) v.push_back(k);
    for (auto& k : w4a16_fused_kernels()) v.push_back(k);
    return v;
  }();
  return all;
}

const W4a16Kernel* find_w4a16_kernel(const Tactic& t) {
  for (const W4a16Kernel& k : w4a16_kernels())
    if (k.tactic == t) return &k;
  return nullptr;
}

cudaError_t raise_dynamic_smem_limit(const W4a16Kernel& k, int bytes) {
  static std::mutex limit_mutex;
  const std::lock_guard<std::mutex> lock(limit_mutex);
  cudaFuncAttributes attr{};
  cudaError_t e = cudaFuncGetAttributes(&attr, k.function);
  if (e == cudaSuccess && attr.maxDynamicSharedSizeBytes < bytes)
    e = cudaFuncSetAttribute(k.function, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

}  // namespace fp4moe::kernels
