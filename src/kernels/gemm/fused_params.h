// fused_params.h - the launch parameters of the w4a16_fused family (the whole MoE layer of a
// small batch in one persistent launch, sm90_w4a16_fused_layer.cuh), its shared-memory layout and
// its workspace layout. No CUDA headers: the layer, the resource model and the kernel share
// these functions, so that the bytes the model states are the bytes the kernel asks for.
#pragma once

#include <cstdint>

#include "kernels/gemm/w4a16_params.h"
#include "kernels/moe/routing_params.h"

#if defined(__CUDACC__)
#define FP4MOE_FUSED_HD __host__ __device__
#else
#define FP4MOE_FUSED_HD
#endif

namespace fp4moe::kernels {

// One GEMM of the layer as the fused kernel reads it (prepacked, prepack_layout.h).
struct FusedGemm {
  const uint8_t* weights = nullptr;  // [group][kgroup][rowtile] x 2048 B
  const uint8_t* scales = nullptr;   // [group][kgroup][rowtile] x 256 B
  int rowtiles = 0;                  // per group: ceil(rows / 16)
  int kgroups = 0;                   // per group: ceil(K / 256)
  int rows = 0;                      // real output rows (FC1: 2 I interleaved; FC2: H)
  int k = 0;                         // real K (a multiple of 16)
  const float* scale_a = nullptr;    // per group: FC1 gate / FC2 down global scale
  const float* scale_b = nullptr;    // per group: FC1 up global scale (FC2: unused)
};

// Device counters and partial sums of one launch. The counters are zero between launches: the
// last CTA to leave resets the ones the items do not reset themselves (fused_counters).
struct FusedWorkspace {
  int* counters = nullptr;   // [ticket, CTAs left, fc1_done[A], fc2_done[RB2], fc1_arrivals[A x RB1]]
  float* fc1_part = nullptr;  // [a][rb][kc][row of the block][token]: FC1's K chunks, summed by the last
  float* fc2_part = nullptr;  // [a][kc][row][token]: FC2's K chunks, weighted, summed by the finalize
};

struct W4a16FusedParams {
  FusedGemm fc1, fc2;
  // The batch's routing, done in every CTA (route_token.cuh); CTA 0 stores routing.topk_ids and
  // topk_weights for the caller. routing.shared_expert: group `routing.experts` is the shared one.
  RoutingParams routing;
  int tokens = 0;   // the batch, 1..8
  int slots = 0;    // per token: top-k (+1 with a shared expert)
  int groups = 0;   // routed experts (+1)
  const uint16_t* hidden = nullptr;  // [token][hidden_stride] bf16
  int64_t hidden_stride = 0;
  uint16_t* act = nullptr;           // [token * slots + slot][act_stride] bf16 (FC1's output)
  int64_t act_stride = 0;
  uint16_t* out = nullptr;           // [token][fc2.rows] bf16
  FusedWorkspace ws;
  unsigned long long* sm_clock[2] = {nullptr, nullptr};  // as W4a16GemmParams::sm_clock, FC1's and FC2's
  // Scratch builds with FP4MOE_FUSED_TRACE=1 only: per CTA, %globaltimer stamps of its start, its
  // routing and its items (kFusedTrace*, below); ignored otherwise.
  unsigned long long* trace = nullptr;
};

// The trace's layout: per CTA a header of two records [start, routed, end, the consumers' items]
// [the epilogue warp's items, the producer's items, 0, 0] and three tables of kFusedTraceItems
// records of 4 words, one record per item in the CTA's order.
// Every record begins with [kind | a << 8 | rb << 16 | kc << 24 | nkg << 32] (nkg: the item's K
// groups, so that the reader needs no copy of the grid's rules), then
//   consumers:     item entry read, first stage's data, stores out
//   epilogue warp: the consumers' stores seen, an FC1 chunk's arrival returned (bit 63: it was the
//                  last), fc1_done / fc2_done released (0: not by this item)
//   producer lane: ticket decoded, its inputs acquired (fc1_done / fc2_done), its ring slot free
inline constexpr int kFusedTraceItems = 64;
inline constexpr int kFusedTraceWordsPerCta = 4 * (2 + 3 * kFusedTraceItems);

// The family's fixed geometry.
inline constexpr int kFusedTokens = 8;                   // the batch is one n8 MMA tile
inline constexpr int kFusedTokenPitch = 512 + 16;        // B row: one K group of bf16, + 16 B (banks)
inline constexpr int kFusedItemSlots = 4;                // items the producer may run ahead
inline constexpr int kFusedItemBytes = 32;               // one entry of the item ring
inline constexpr int kFusedMaxRoutedExperts = 256;       // route_token with 8 experts a lane

// Active groups of a batch: the shared expert and at most top-k distinct experts per token.
FP4MOE_FUSED_HD constexpr int fused_max_active(int groups, int tokens, int slots) {
  return groups < tokens * slots ? groups : tokens * slots;
}

FP4MOE_FUSED_HD constexpr int fused_align16(int b) { return (b + 15) / 16 * 16; }

// Dynamic shared memory, in the kernel's order.
struct FusedSmemLayout {
  int stage_bytes;  // one K group: weights, block scales, the batch's B rows; the stages start at 0
  int barriers;     // full + empty per stage; full, empty, stored per item slot; the routing's: 8 B each
  int items;        // the item ring
  int active_count; // the number of active groups
  int pair_ids;     // [token][slot] group
  int pair_w;       // [token][slot] routing weight
  int pair_a;       // [token][slot] index of the group among the active ones
  int bitmap;       // routed experts chosen by the batch
  int active;       // active groups: the shared expert first, then ascending
  int col_slot;     // [active][column] the column's slot in that group, -1 if none (int8)
  int total;
};
FP4MOE_FUSED_HD constexpr int fused_stage_bytes(int rows) {
  return rows / 16 * (2048 + 256) + kFusedTokens * kFusedTokenPitch;
}
FP4MOE_FUSED_HD constexpr int fused_barrier_count(int stages) { return 2 * stages + 3 * kFusedItemSlots + 1; }
FP4MOE_FUSED_HD constexpr FusedSmemLayout fused_smem_layout(int rows, int stages, const W4a16SmemShape& s) {
  FusedSmemLayout l{};
  const int pairs = kFusedTokens * s.slots, act = fused_max_active(s.experts, kFusedTokens, s.slots);
  l.stage_bytes = fused_stage_bytes(rows);
  int o = stages * l.stage_bytes;
  l.barriers = o, o += fused_align16(8 * fused_barrier_count(stages));
  l.items = o, o += kFusedItemSlots * kFusedItemBytes;
  l.active_count = o, o += 16;
  l.pair_ids = o, o += fused_align16(4 * pairs);
  l.pair_w = o, o += fused_align16(4 * pairs);
  l.pair_a = o, o += fused_align16(4 * pairs);
  l.bitmap = o, o += fused_align16(4 * ((s.experts + 31) / 32));
  l.active = o, o += fused_align16(4 * act);
  l.col_slot = o, o += fused_align16(kFusedTokens * act);
  l.total = o;
  return l;
}

// The work of one launch: items of (group, row block, K chunk) per GEMM, then the finalize items
// of kFusedFinalizeRows output rows each. An item's K chunk is the tactic's tile_k for the routed
// experts' FC1 and half of it, at most kFusedSharedFc1KGroups K groups, for the shared expert's
// FC1: the shared expert's FC1 items are the first tickets, drawn before the routing is known, and
// that small there are enough of them for every CTA to stream while it routes (glm5: 384 for 396
// CTAs on an H200 whatever tile_k; in halves of k2048 192, and T = 1 took 69.1-69.2 us against
// 66.5-66.7 with the cap; k3072 T = 2 105.8-106.2 against 103.3-103.7). FC2's items are the last,
// and the launch ends about one item after the tickets run out: the last kFusedFc2NarrowGroups
// active groups' items are of half the tactic's tile_k, at most kFusedFc2NarrowKGroups K groups
// (kg2 K groups, kc2 chunks a row block: glm5 T = 1 192 items), the other groups' of twice that
// (kc2w chunks, chunk c covering half chunks 2c and 2c + 1; its partial tile stored as half chunk
// 2c's; glm5 T = 1 768 items). All of FC2 in halves streamed at ~3.2 TB/s in a trace of glm5 T =
// 1, in wholes at ~3.7 but with a longer tail; one narrow group measured 2 us faster than all
// halves, 0.7 than two narrow groups, level at T = 2 (H200, docs/PERFORMANCE.md "FC2's items:
// whole K chunks but the last group's"). The FC2 cap of 4 K groups against none: level to 0.5%
// faster at T = 1..8 (k6144 T = 4 178.5-178.8 us against 179.2-179.4), against 2: 2-5% faster
// from T = 4 (docs/HEURISTIC.md, "The fused family").
inline constexpr int kFusedFinalizeRows = 16;
inline constexpr int kFusedFc2NarrowGroups = 1;
inline constexpr int kFusedSharedFc1KGroups = 2;
inline constexpr int kFusedFc2NarrowKGroups = 4;
struct FusedGrid {
  int kg1, kg1s, kg2;  // K groups per item: routed FC1, the shared expert's FC1, FC2's narrow items
  int rb1, kc1, kc1s;  // FC1: row blocks, K chunks of a routed expert's and of the shared expert's
  int rb2, kc2, kc2w;  // FC2: row blocks, half K chunks (narrow items), whole ones (wide items)
  int fin;             // finalize items
};
FP4MOE_FUSED_HD constexpr FusedGrid fused_grid(int rows, int item_kgroups, int rowtiles1, int kgroups1,
                                                  int rowtiles2, int kgroups2) {
  const int rt = rows / 16, half = item_kgroups > 1 ? item_kgroups / 2 : 1;
  FusedGrid g{};
  g.kg1 = item_kgroups;
  g.kg1s = half < kFusedSharedFc1KGroups ? half : kFusedSharedFc1KGroups;
  g.kg2 = half < kFusedFc2NarrowKGroups ? half : kFusedFc2NarrowKGroups;
  g.rb1 = (rowtiles1 + rt - 1) / rt;
  g.kc1 = (kgroups1 + g.kg1 - 1) / g.kg1;
  g.kc1s = (kgroups1 + g.kg1s - 1) / g.kg1s;
  g.rb2 = (rowtiles2 + rt - 1) / rt;
  g.kc2 = (kgroups2 + g.kg2 - 1) / g.kg2;
  g.kc2w = (g.kc2 + 1) / 2;
  g.fin = (rowtiles2 * 16 + kFusedFinalizeRows - 1) / kFusedFinalizeRows;
  return g;
}

// FC2 with A active groups: the first of the narrow groups; the items of one row block (what its
// finalize waits for).
FP4MOE_FUSED_HD constexpr int fused_fc2_first_narrow(int active) {
  return active > kFusedFc2NarrowGroups ? active - kFusedFc2NarrowGroups : 0;
}
FP4MOE_FUSED_HD constexpr int fused_fc2_items_per_rb(const FusedGrid& g, int active) {
  const int wide = fused_fc2_first_narrow(active);
  return wide * g.kc2w + (active - wide) * g.kc2;
}

// Counters: ticket, CTAs left, fc1_done per active group, fc2_done per FC2 row block, FC1 arrivals
// per (active group, row block).
struct FusedCounters {
  int ticket, exits, fc1_done, fc2_done, fc1_arrivals, total;  // offsets into FusedWorkspace::counters
};
FP4MOE_FUSED_HD constexpr FusedCounters fused_counters(int max_active, const FusedGrid& g) {
  FusedCounters c{};
  c.ticket = 0;
  c.exits = 1;
  c.fc1_done = 2;
  c.fc2_done = c.fc1_done + max_active;
  c.fc1_arrivals = c.fc2_done + g.rb2;
  c.total = c.fc1_arrivals + max_active * g.rb1;
  return c;
}

// Partial sums, in floats, for a batch of `tokens` (columns stored: the batch's). FC1's are laid
// out [group][row block][K chunk][row][token] with room for the shared expert's K chunks (kc1s).
FP4MOE_FUSED_HD constexpr int fused_fc1_part_chunks(const FusedGrid& g) { return g.kc1s > g.kc1 ? g.kc1s : g.kc1; }
FP4MOE_FUSED_HD constexpr int64_t fused_fc1_part_floats(int max_active, const FusedGrid& g, int rows, int tokens) {
  return fused_fc1_part_chunks(g) > 1 ? int64_t{max_active} * g.rb1 * fused_fc1_part_chunks(g) * rows * tokens : 0;
}
FP4MOE_FUSED_HD constexpr int64_t fused_fc2_part_floats(int max_active, const FusedGrid& g, int rowtiles2, int tokens) {
  return int64_t{max_active} * g.kc2 * rowtiles2 * 16 * tokens;
}

}  // namespace fp4moe::kernels
