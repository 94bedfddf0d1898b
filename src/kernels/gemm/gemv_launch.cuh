// Builds a registry entry for one w4a16_gemv tactic (included by the src/kernels/inst files
// only). The launch checks what the family needs of its call: a batch that fits its token tile,
// FC1's router logits, routing outputs (FC2 reads them) and act, FC2's output.
#pragma once

#include <utility>

#include "kernels/common/launch.h"
#include "kernels/gemm/gemv_shapes.h"
#include "kernels/gemm/sm80_w4a16_gemv.cuh"
#include "kernels/gemm/w4a16_registry.h"

namespace fp4moe::kernels {

template <Tactic kT>
W4a16Kernel make_w4a16_gemv_kernel() {
  static_assert(decode_tactic(encode_tactic(kT)) == kT, "tactic does not survive its encoding");
  using Tr = W4a16GemvTraits<kT>;
  constexpr auto kKernel = &w4a16_gemv_kernel<encode_tactic(kT)>;
  W4a16Kernel k;
  k.tactic = kT;
  k.function = reinterpret_cast<const void*>(kKernel);
  k.dynamic_smem_bytes = [](const W4a16SmemShape& s) { return Tr::dynamic_smem_bytes(s); };
  k.max_blocks = [](const W4a16SmemShape& s, int rowtiles) { return Tr::max_blocks(s, rowtiles); };
  k.tile_floats = 0;  // no cross-CTA partials
  k.launch = [](const W4a16GemmParams& p, int grid, int smem, bool pdl, cudaStream_t stream) {
    FP4MOE_CHECK(p.tokens >= 1 && p.tokens <= kT.tile_tokens, "w4a16_gemv: a batch of ", p.tokens,
                 " tokens; the family takes 1..", kT.tile_tokens);
    FP4MOE_CHECK(p.routing.experts >= 1 && p.routing.experts <= kGemvMaxRoutedExperts, "w4a16_gemv: ",
                 p.routing.experts, " routed experts; its in-kernel routing takes 1..", kGemvMaxRoutedExperts);
    FP4MOE_CHECK(p.routing.topk_ids && p.routing.topk_weights && p.slots >= p.routing.top_k,
                 "w4a16_gemv: no routing buffers (topk_ids, topk_weights) or slots < top_k");
    if constexpr (kT.epilogue == Epilogue::kSwiglu)
      FP4MOE_CHECK(p.routing.logits && p.act_out && p.scale_a && p.scale_b,
                   "w4a16_gemv swiglu: no router logits, act buffer or global scales");
    else
      FP4MOE_CHECK(p.out && p.scale_a, "w4a16_gemv finalize: no output or global scales");
    launch_kernel(kKernel, dim3(grid), dim3(kT.warps * 32), smem, pdl, stream, p);
  };
  return k;
}

// A kernel of epilogue kEp for every shape of kGemvShapes, in its order.
template <Epilogue kEp, std::size_t... kI>
std::vector<W4a16Kernel> make_w4a16_gemv_kernels(std::index_sequence<kI...>) {
  return {make_w4a16_gemv_kernel<shape_tactic(kGemvShapes[kI], kEp)>()...};
}
template <Epilogue kEp>
std::vector<W4a16Kernel> make_w4a16_gemv_kernels() {
  return make_w4a16_gemv_kernels<kEp>(std::make_index_sequence<kGemvShapes.size()>{});
}

}  // namespace fp4moe::kernels
