// Builds the registry entries of one w4a16_fused tactic (included by src/kernels/inst/fused_layer.cu
// only): one kernel, listed under both epilogues. The launch checks what the family needs of its
// call: a batch of 1..8 tokens, an in-kernel routing of at most 256 experts, every buffer.
#pragma once

#include <utility>

#include "fp4moe/error.h"
#include "kernels/common/launch.h"
#include "kernels/gemm/fused_shapes.h"
#include "kernels/gemm/sm90_w4a16_fused_layer.cuh"
#include "kernels/gemm/w4a16_registry.h"

namespace fp4moe::kernels {

template <Tactic kT>
void launch_w4a16_fused(const W4a16FusedParams& p, int grid, int smem, cudaStream_t stream) {
  constexpr auto kKernel = &w4a16_fused_layer_kernel<encode_tactic(kT)>;
  FP4MOE_CHECK(p.tokens >= 1 && p.tokens <= kFusedTokens, "w4a16_fused: a batch of ", p.tokens,
               " tokens; the family takes 1..", kFusedTokens);
  FP4MOE_CHECK(p.routing.experts >= 1 && p.routing.experts <= kFusedMaxRoutedExperts, "w4a16_fused: ",
               p.routing.experts, " routed experts; its in-kernel routing takes 1..", kFusedMaxRoutedExperts);
  FP4MOE_CHECK(p.routing.logits && p.routing.topk_ids && p.routing.topk_weights && p.slots >= p.routing.top_k &&
                   p.groups == p.routing.experts + (p.routing.shared_expert ? 1 : 0),
               "w4a16_fused: no router logits or routing outputs, or slots / groups inconsistent with the routing");
  FP4MOE_CHECK(p.hidden && p.act && p.out && p.ws.counters && p.ws.fc2_part && p.fc1.weights && p.fc2.weights &&
                   p.fc1.scale_a && p.fc1.scale_b && p.fc2.scale_a,
               "w4a16_fused: a null weight, scale, activation, output or workspace pointer");
  const FusedGrid g = fused_grid(kT.tile_rows, kT.tile_k / 256, p.fc1.rowtiles, p.fc1.kgroups, p.fc2.rowtiles,
                                 p.fc2.kgroups);
  FP4MOE_CHECK(fused_fc1_part_chunks(g) == 1 || p.ws.fc1_part, "w4a16_fused: FC1 splits K into ",
               fused_fc1_part_chunks(g), " chunks but has no partials");
  launch_kernel(kKernel, dim3(grid), dim3(kT.warps * 32), smem, /*pdl=*/false, stream, p);
}

template <Tactic kT>
W4a16Kernel make_w4a16_fused_kernel() {
  static_assert(decode_tactic(encode_tactic(kT)) == kT, "tactic does not survive its encoding");
  // The FC1-listed tactic's kernel serves both entries: one instantiation.
  constexpr Tactic kCanonical{kT.family, kT.tile_rows, kT.tile_tokens, kT.tile_k, kT.stages, kT.warps, 1,
                              Epilogue::kSwiglu, false};
  using Tr = W4a16FusedTraits<kCanonical>;
  W4a16Kernel k;
  k.tactic = kT;
  k.function = reinterpret_cast<const void*>(&w4a16_fused_layer_kernel<encode_tactic(kCanonical)>);
  k.dynamic_smem_bytes = [](const W4a16SmemShape& s) { return Tr::dynamic_smem_bytes(s); };
  k.tile_floats = 0;  // partials of its own (W4a16FusedParams::ws)
  k.launch = nullptr;  // the whole layer: launch_fused
  k.launch_fused = &launch_w4a16_fused<kCanonical>;
  return k;
}

// Every shape's FC1 entry, then every shape's FC2 entry (one kernel each pair).
template <std::size_t... kI>
std::vector<W4a16Kernel> make_w4a16_fused_kernels(std::index_sequence<kI...>) {
  return {make_w4a16_fused_kernel<shape_tactic(kFusedShapes[kI], Epilogue::kSwiglu)>()...,
          make_w4a16_fused_kernel<shape_tactic(kFusedShapes[kI], Epilogue::kFinalize)>()...};
}
inline std::vector<W4a16Kernel> make_w4a16_fused_kernels() {
  return make_w4a16_fused_kernels(std::make_index_sequence<kFusedShapes.size()>{});
}

}  // namespace fp4moe::kernels
