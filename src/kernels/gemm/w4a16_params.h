// Launch parameters of the w4a16 grouped GEMM families (host and device visible).
//
// One launch computes, for every expert e with n_e > 0 permuted rows,
//   out^T[rows, n_e] = W_e[rows, K] . X_e^T[K, n_e]       (swap-AB: weight rows on the MMA's M)
// where X_e's rows are gathered (FC1: hidden[token(p)]) or contiguous (FC2: act[p]), and the
// epilogue turns the fp32 accumulators into the family's output (none / swiglu / finalize).
#pragma once

#include <cstdint>

#include "kernels/moe/routing_params.h"

namespace fp4moe::kernels {

// What a kernel's dynamic shared memory depends on besides its tactic: the groups of the grouped
// GEMM (the stream-K families' unit prefix) and, for the w4a16_gemv family, which stages its
// whole batch, the batch's tokens, the GEMM's K and the slots per token.
struct W4a16SmemShape {
  int experts = 257;  // groups, the shared expert included
  int tokens = 8;     // the batch (w4a16_gemv: at most its tile_tokens)
  int k = 6144;       // the GEMM's K
  int slots = 9;      // slots per token (top-k, +1 with a shared expert)
};

struct W4a16GemmParams {
  // ---- weights, prepacked (src/kernels/moe/prepack_layout.h): [expert][kgroup][rowtile] --
  const uint8_t* weights = nullptr;  // 2048 B per (rowtile of 16 rows, kgroup of 256 K)
  const uint8_t* scales = nullptr;   // 256 B per (rowtile, kgroup)
  int rowtiles = 0;                  // per expert: ceil(rows / 16)
  int kgroups = 0;                   // per expert: ceil(K / 256)
  int rows = 0;                      // real output rows (FC1: 2 * I interleaved; FC2: H)
  int k = 0;                         // real K (a multiple of 16)
  // ---- grouping: permuted rows [offsets[e], offsets[e+1]) belong to expert e ---------------
  int num_experts = 0;               // groups, the shared expert included
  const int* expert_offsets = nullptr;  // [num_experts + 1], on the device
  // The offsets are complete when the kernel starts (FC2 after FC1: only x is produced by the
  // launch this one follows); the decode family then runs its prologue before
  // griddepcontrol.wait
  bool offsets_ready = false;
  // ---- B operand: bf16 rows of K elements --------------------------------------------------
  // The decode family reads them in natural order; the prefill family in fragment order
  // (kernels/common/fragment_order.h), rows padded to fragment_order_pitch(k).
  const uint16_t* x = nullptr;       // bf16 bits
  int64_t x_stride = 0;              // elements between rows
  int64_t x_rows = 0;                // rows of x (the prefill family's tensor map extent)
  const int* gather = nullptr;       // permuted row -> x row; nullptr = identity
  // ---- epilogue ----------------------------------------------------------------------------
  const float* scale_a = nullptr;    // per expert: FC1 gate / FC2 down / none: the global scale
  const float* scale_b = nullptr;    // per expert: FC1 up global scale
  // stream-K fix-up: partial tiles [2 * gridDim.x][tile] and arrivals per unit (zero between
  // launches: the last arrival resets its counter)
  float* partials = nullptr;
  int* unit_counters = nullptr;
  // none: raw fp32 output [permuted row][rowtiles * 16]
  float* raw_out = nullptr;
  // swiglu: act[permuted row][act_cols] bf16, act_cols = I, rows act_stride elements apart;
  // in fragment order (for a prefill-family FC2) when act_fragment_order is set
  uint16_t* act_out = nullptr;
  int act_cols = 0;
  int64_t act_stride = 0;
  bool act_fragment_order = false;
  // finalize: out[token][rows] bf16 = sum over the token's slots of weight * row
  const float* row_weight = nullptr;   // [permuted row]
  const int* row_token = nullptr;      // [permuted row] -> token
  const int* pair_row = nullptr;       // [token][slot] -> permuted row
  int slots = 0;                       // slots per token (top-k, +1 with a shared expert)
  // rows [permuted row][rows] in bf16, unweighted (the routing weights are applied in phase 2);
  // bf16 halves the bytes written in phase 1 and read back in phase 2 (at glm5 T = 16384 they
  // were 3.2 GB each way in fp32)
  uint16_t* rows_out = nullptr;
  // prefill family: [count, generation] of the barrier between the finalize's phase 1 (the
  // rows) and phase 2 (slot sums), count zero between launches; the decode family leaves phase 2
  // to the next launch (kernels/moe/finalize_slots.h)
  unsigned* grid_barrier = nullptr;
  int* unit_ticket = nullptr;          // prefill family: the unit scheduler's counter (zero between launches)
  uint16_t* out = nullptr;             // [token][rows] bf16
  // ---- w4a16_gemv family: the whole batch (tokens <= tile_tokens) is the MMA's N ------------
  // FC1 routes the batch itself in every CTA (routing.logits, the mode, ...) and CTA 0 stores
  // routing.topk_ids / topk_weights, which FC2 reads; x is hidden (FC1, rows of k) or act (FC2,
  // [token][slot] rows of act_stride); act_out is written in the same [token][slot] order.
  int tokens = 0;
  RoutingParams routing;
  // [0]: FC1's CTA 0 has published the routing (1); [1]: FC2's CTAs that have looked (the last
  // resets both to zero for the next launch). FC2 waits for [0] - never for long: FC1 sets it
  // before its GEMM - to request its weights into L2 while FC1 runs. Optional (nullptr: none).
  unsigned* routing_ready = nullptr;
  // ---- clock accounting (optional, nullptr: off) ------------------------------------------
  // [SM cycles, nanoseconds, launches]: thread 0 of CTA 0 adds the clock64 and %globaltimer
  // differences between its entry and its exit (w4a16::sm_clock_enter / sm_clock_exit), so that
  // every launch, graph replays too, adds its interval; cycles over nanoseconds is the clock the
  // SMs ran at.
  unsigned long long* sm_clock = nullptr;
};

}  // namespace fp4moe::kernels
