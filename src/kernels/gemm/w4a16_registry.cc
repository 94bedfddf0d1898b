#include "kernels/gemm/w4a16_registry.h"

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

}  // namespace fp4moe::kernels
