// routing.cuh - GPU routing (the two modes of the reference) and the permutation that groups
// (token, slot) pairs by expert. No host synchronization: counts and offsets stay on the device.
//
// Outputs (P = T * slots permuted rows; slots = top_k + 1 with a shared expert, whose pairs
// (t, top_k) go to the last group E, one row per token, weight 1):
//   topk_ids [T][k], topk_weights [T][k]       the routing, in rank order
//   expert_offsets [E + 2]                     rows [offsets[e], offsets[e+1]) belong to group e
//   row_token [P], row_weight [P]              permuted row -> token, routing weight
//   pair_row [T][slots]                        (token, slot) -> permuted row
// Rows inside one expert's range are its pairs in token order, on every run: the row a pair
// takes decides its token tile, and the decode family's stream-K cuts differ between tiles, so
// rows in atomic arrival order changed output bits from run to run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fp4moe/moe.h"
#include "kernels/moe/routing_params.h"

namespace fp4moe::kernels {

// The routing fields of `cfg` (mode, top-k, groups, normalization, scaling) for `tokens` tokens
// over `experts` routed experts; the caller adds the buffers, the bias and the shared expert.
inline RoutingParams routing_params_for(const RoutingConfig& cfg, int experts, int64_t tokens) {
  RoutingParams p;
  p.tokens = static_cast<int>(tokens);
  p.experts = experts;
  p.top_k = cfg.top_k;
  p.mode = cfg.mode == RoutingMode::kSoftmaxTopK ? 0 : 1;
  p.n_group = cfg.n_group;
  p.topk_group = cfg.topk_group;
  p.norm_topk_prob = cfg.norm_topk_prob;
  p.routed_scaling_factor = cfg.routed_scaling_factor;
  return p;
}
// The same for a layer's config: its routing over its routed experts.
inline RoutingParams routing_params_for(const MoeConfig& cfg, int64_t tokens) {
  return routing_params_for(cfg.routing, cfg.num_experts, tokens);
}

// Largest supported expert count (one warp holds a token's scores, 32 per lane).
inline constexpr int kMaxRoutedExperts = 1024;
// Up to this many tokens one CTA (a warp per token) routes and permutes in a single launch;
// beyond, two launches of a grid-wide count and scatter cost less than a warp routing several
// tokens in turn (H200: at T = 64 the single CTA takes 23 us, the two launches 13 us).
inline constexpr int kSingleCtaRoutingTokens = 32;

// The multi-CTA path cuts the batch into at most this many chunks of consecutive tokens: one
// CTA routes a chunk and counts its pairs per group, one CTA places them.
inline constexpr int kMaxRouteChunks = 128;
// Ints of RoutingParams::chunk_counts for `experts` routed experts (and a shared expert).
inline constexpr int routing_scratch_ints(int experts) { return kMaxRouteChunks * (experts + 1); }

// Launches the routing and permutation (1 kernel for T <= kSingleCtaRoutingTokens, else 2
// kernels). The permutation is deterministic: an expert's rows are its (token, slot) pairs in
// token order, whatever order the threads ran in (the GEMMs' token tiles, and with them the
// decode family's stream-K cuts, follow the rows: rows placed by atomic arrival made the output's
// bits vary between runs). pdl (sm_90+): the second kernel is a programmatic dependent launch of
// the first, its CTAs resident while the first routes (its launch off the layer's critical path).
// Checks the launch errors; never synchronizes.
void launch_routing(const RoutingParams& p, cudaStream_t stream, bool pdl);

// The routing's own limits (one warp routes a token: top_k <= 32 lanes, n_group <= 32 lanes,
// experts <= kMaxRoutedExperts); an Error naming the one broken. Checked by launch_routing and,
// for the small-batch family, which routes inside FC1 without it, by the layer at creation.
void check_routing_shape(int experts, int top_k, int n_group, int topk_group);

}  // namespace fp4moe::kernels
