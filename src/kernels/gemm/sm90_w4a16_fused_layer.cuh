// sm90_w4a16_fused_layer.cuh - the whole MoE layer of a small batch in one persistent launch
// (family w4a16_fused, sm_90+: the bulk copy engine and mbarrier transaction counts).
//
// Why. At one to a few tokens the layer moves the weights of ~9 experts (glm5: 191 MB at T = 1)
// and nothing else, so it should take their bytes over the read bandwidth. The stream-K path
// (routing launch, FC1, FC2, slot-sum launch) streams at ~90% of that while it streams, but a
// globaltimer trace of glm5 T = 1 (docs/PERFORMANCE.md) put ~28 us of its 74 around the streaming:
// the routing with DRAM idle, each GEMM's ramp and tail (a static partition cannot know which SM
// ends last: the SMs' own finishing times spread by 1-1.6 us, the last ~3-4 us after the median),
// the FC1 -> FC2 boundary and the slot-sum launch. Here:
//   - Work is handed out as it runs: a global ticket counter, drawn by running CTAs only, numbers
//     the items (group, row block, K chunk) of FC1, then those of FC2 (the last group's in half
//     chunks, fused_params.h), then the finalize items of each FC2 row block. A CTA that ends an
//     item draws the next, so the GEMMs' tails are one item long.
//   - No boundary between the GEMMs: an FC2 item waits only for its own group's FC1 items
//     (fc1_done), which the ticket order put long before it; the last FC1 items overlap the
//     first FC2 ones.
//   - The routing runs in every CTA (one warp per token, route_token.cuh: the same bits in every
//     CTA) while its producer already streams the shared expert's FC1 items, the first tickets,
//     which need no routing.
//   - The slot sum is the finalize items, after FC2's items of their row block.
// The pieces are fixed in advance - items of fixed (group, row block, K chunk), partial sums
// summed in K-chunk order by whichever CTA arrives last, the finalize in slot order - so the
// output's bits do not depend on which CTA took which item.
//
// Deadlock freedom: an item waits only for items of lower tickets, and tickets are drawn only
// by running CTAs, each of which has issued every copy of its earlier items before it waits
// (its consumers finish them without waiting on anything). A CTA that starts late - another
// kernel held its SM - finds the items taken and leaves; nothing waits for a CTA that is not
// resident.
//
// CTA: warp 0 is the producer (lane 0 draws tickets, waits for the items' inputs, writes the item
// ring and issues the stages' bulk copies); warp 1 the epilogue warp (every global round trip of
// an item's end: arrivals, the FC1 reduction, the releases); warps 2..kWarps-1 are consumers
// (route the batch, then per stage dequantize and multiply, per item store its result and go
// on). A stage is one K group of the
// item's rows: weights and block scales as one bulk copy each (the prepacked layout makes a
// row block at one K group contiguous) and the batch's B rows as one bulk copy each (FC1: the
// hidden rows; FC2: the act rows of the tokens that chose the group). The MMA loop is the
// decode family's (sm80_w4a16_grouped_gemm.cuh): swap-AB mma.sync m16n8k16, weights
// dequantized in registers, the batch's 8 tokens as the MMA's 8 columns.
//
// Epilogues. FC1 item (a, rb, kc): with one K chunk, the consumers apply SwiGLU into act; else
// they store its fp32 partial tile to fc1_part and the epilogue warp arrives on (a, rb) (acq_rel):
// the last to arrive sums the chunks in order and applies SwiGLU. Either way the CTA that wrote
// act raises fc1_done[a] (release). FC2 item: the consumers store its partial tile times the
// token's routing weight and the group's global scale to fc2_part, the epilogue warp raises
// fc2_done[rb]. Finalize item rb: each output value is the sum over the token's slots and K
// chunks in a fixed order (for T <= 4 the slots dealt over 2-8 lanes, each lane's in order, the
// lanes then combined by a butterfly): deterministic, though not the other families' order.
// Columns of tokens a group does not serve are computed and never stored (their B rows are not
// copied: whatever the MMA makes of them stays in their own columns).
//
// Shared memory (dynamic, fused_params.h fused_smem_layout): kStages stages of
//   [kRowTiles x 2048 B weights][kRowTiles x 256 B scales][8 rows x 528 B of B]
// (B rows 528 B apart: the 8 token rows of a fragment load fall on distinct banks), then the
// mbarriers, the item ring, the routing's tables. No static shared memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "fp4moe/tactic.h"
#include "kernels/common/dequant_nvfp4.cuh"
#include "kernels/common/mma_half_chunk.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/sm90_ptx.cuh"
#include "kernels/gemm/fused_params.h"
#include "kernels/gemm/fused_tickets.h"
#include "kernels/gemm/grouped_units.cuh"
#include "kernels/moe/route_token.cuh"

namespace fp4moe::kernels {

template <Tactic kT>
struct W4a16FusedTraits {
  static constexpr int kRows = kT.tile_rows;               // weight rows per item
  static constexpr int kRowTiles = kRows / 16;
  static constexpr int kItemKGroups = kT.tile_k / 256;     // K groups per item (one stage each)
  static constexpr int kStages = kT.stages;
  static constexpr int kWarps = kT.warps;                  // producer, epilogue warp, consumers
  static constexpr int kConsumerWarps = kWarps - 2;
  static constexpr int kFirstConsumerWarp = 2;
  static constexpr int kConsumers = kConsumerWarps * 32;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRpw = kRowTiles / kConsumerWarps;  // row tiles per consumer warp
  static constexpr int kWeightBytes = kRowTiles * 2048;
  static constexpr int kScaleBytes = kRowTiles * 256;
  static constexpr int kTokenOffset = kWeightBytes + kScaleBytes;
  static constexpr int kStageBytes = fused_stage_bytes(kRows);

  static_assert(kT.family == Family::kW4a16Fused, "w4a16_fused kernel instantiated for another family");
  static_assert(kT.tile_tokens == kFusedTokens, "the batch is one n8 MMA tile");
  static_assert(kT.tile_k % 256 == 0 && kItemKGroups >= 1, "an item is whole prepacked K groups");
  static_assert(kT.split_k == 1, "items split K themselves; the tactic carries split-K 1");
  static_assert(kRows % 16 == 0 && kRowTiles % kConsumerWarps == 0 && kRpw >= 1,
                "every consumer warp owns the same whole row tiles of an item");
  static_assert(kConsumerWarps >= 1 && kWarps <= 16, "a producer warp, an epilogue warp and 1..14 consumer warps");
  static_assert(kStages >= 2 && kStages <= 8, "2..8 stages");
  static_assert(kStageBytes % 16 == 0 && kTokenOffset % 16 == 0, "bulk copies land on 16-byte boundaries");
  static_assert(kT.epilogue == Epilogue::kSwiglu || kT.epilogue == Epilogue::kFinalize,
                "one kernel runs both GEMMs; it is listed under FC1's and FC2's epilogue");

  static constexpr FusedSmemLayout layout(const W4a16SmemShape& s) { return fused_smem_layout(kRows, kStages, s); }
  static constexpr int dynamic_smem_bytes(const W4a16SmemShape& s) { return layout(s).total; }
};

#ifndef FP4MOE_FUSED_TRACE
#define FP4MOE_FUSED_TRACE 0
#endif

// A trace record's first word (fused_params.h, kFusedTraceItems).
__device__ __forceinline__ unsigned long long fused_trace_code(const fused::Item& it) {
  return static_cast<unsigned long long>(it.kind | it.a << 8 | it.rb << 16 | it.kc << 24) |
         static_cast<unsigned long long>(it.nkg) << 32;
}

// The last FC1 K chunk of (a, rb) to arrive, in the epilogue warp: the chunks' partial tiles
// summed in chunk order (the same bits whichever CTA arrives last), SwiGLU, act. Lane l takes the
// block's act columns l, l + 32, ...; per column and token, its gate and up rows' chunks are all
// loaded before any is added.
template <typename Tr>
__device__ void fused_fc1_reduce(const W4a16FusedParams& p, const fused::Item& it, const FusedGrid& G, int lane,
                                 int T, int slots, int slot_of_shared, const int8_t* col_slot) {
  constexpr int kRows = Tr::kRows, kCols = kRows / 2, kBatch = 8;
  const int64_t chunk = static_cast<int64_t>(kRows) * T;  // floats per K chunk: [row][token]
  const float* part =
      p.ws.fc1_part + (static_cast<int64_t>(it.a) * G.rb1 + it.rb) * fused_fc1_part_chunks(G) * chunk;
  const float ka = __ldg(p.fc1.scale_a + it.e) * kDequantEpilogueFactor;
  const float kb = __ldg(p.fc1.scale_b + it.e) * kDequantEpilogueFactor;
  const int act_cols = p.fc1.rows / 2;
  for (int c = lane; c < kCols; c += 32) {
    const int col = it.rb * kCols + c;  // row tile q = c / 8 holds act columns 8q..8q+7
    if (col >= act_cols) continue;
    const int gate_row = 16 * (c / 8) + c % 8, up_row = gate_row + 8;
    for (int n = 0; n < T; ++n) {
      const int s = slot_of_shared >= 0 ? slot_of_shared : col_slot[it.a * kFusedTokens + n];
      if (s < 0) continue;
      float gate = 0.0f, up = 0.0f;
      for (int k0 = 0; k0 < it.nkc; k0 += kBatch) {
        float gv[kBatch], uv[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          gv[k] = uv[k] = 0.0f;
          if (k0 + k < it.nkc) {
            gv[k] = __ldcg(part + (k0 + k) * chunk + gate_row * T + n);
            uv[k] = __ldcg(part + (k0 + k) * chunk + up_row * T + n);
          }
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
          if (k0 + k < it.nkc) gate += gv[k], up += uv[k];
      }
      p.act[(static_cast<int64_t>(n) * slots + s) * p.act_stride + col] =
          w4a16::to_bf16_bits(w4a16::silu(gate * ka) * (up * kb));
    }
  }
}

// CTAs per SM the registers must allow: the stages are the bytes in flight, so an SM holds as
// many CTAs as its shared memory takes (3 of 3 stages of 128 rows on an H200: ~204 KB), and
// the registers must not be what stops a third (at most 112 a thread for 6 warps).
constexpr int fused_min_ctas_per_sm(int warps) { return warps <= 6 ? 3 : 2; }

template <unsigned long long kCode>
__global__ void __launch_bounds__(decode_tactic(kCode).warps * 32, fused_min_ctas_per_sm(decode_tactic(kCode).warps))
    w4a16_fused_layer_kernel(const W4a16FusedParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr Tactic kT = decode_tactic(kCode);
  using Tr = W4a16FusedTraits<kT>;
  constexpr int kStages = Tr::kStages, kRowTiles = Tr::kRowTiles, kRpw = Tr::kRpw, kRows = Tr::kRows;
  constexpr int kConsumerWarps = Tr::kConsumerWarps;
  using fused::Item;

  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const RoutingParams& rp = p.routing;
  const int T = p.tokens, E = rp.experts, K_top = rp.top_k, slots = p.slots, groups = p.groups;
  const bool shared = rp.shared_expert;
  const FusedSmemLayout L = Tr::layout(W4a16SmemShape{groups, T, 0, slots});
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + L.barriers);  // stage's bytes landed
  uint64_t* const empty = full + kStages;                                  // stage consumed
  uint64_t* const item_full = empty + kStages;                             // item entry written
  uint64_t* const item_empty = item_full + kFusedItemSlots;                // item done, its slot free
  uint64_t* const item_stored = item_empty + kFusedItemSlots;              // the consumers' stores of it are out
  uint64_t* const routed = item_stored + kFusedItemSlots;                  // the CTA's routing tables are built
  Item* const items = reinterpret_cast<Item*>(smem + L.items);
  int* const active_count = reinterpret_cast<int*>(smem + L.active_count);  // the batch's active groups
  int* const pair_ids = reinterpret_cast<int*>(smem + L.pair_ids);
  float* const pair_w = reinterpret_cast<float*>(smem + L.pair_w);
  int* const pair_a = reinterpret_cast<int*>(smem + L.pair_a);
  unsigned* const bitmap = reinterpret_cast<unsigned*>(smem + L.bitmap);
  int* const active = reinterpret_cast<int*>(smem + L.active);
  int8_t* const col_slot = reinterpret_cast<int8_t*>(smem + L.col_slot);

  const FusedGrid G = fused_grid(kRows, Tr::kItemKGroups, p.fc1.rowtiles, p.fc1.kgroups, p.fc2.rowtiles, p.fc2.kgroups);
  const FusedCounters C = fused_counters(fused_max_active(groups, kFusedTokens, slots), G);
  int* const ctr = p.ws.counters;
  const int rows_pad2 = p.fc2.rowtiles * 16;
  for (int i = tid; i < (groups + 31) / 32; i += Tr::kThreads) bitmap[i] = 0;
  // Columns a group does not serve keep -1; the routing writes the others.
  for (int i = tid; i < kFusedTokens * fused_max_active(groups, kFusedTokens, slots); i += Tr::kThreads) col_slot[i] = -1;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::sm90::mbarrier_init(&full[s], 1);
      ptx::sm90::mbarrier_init(&empty[s], Tr::kConsumers);  // every consumer thread (below)
    }
    for (int i = 0; i < kFusedItemSlots; ++i) {
      ptx::sm90::mbarrier_init(&item_full[i], 1);
      ptx::sm90::mbarrier_init(&item_empty[i], kConsumerWarps + 1);  // and the epilogue warp
      ptx::sm90::mbarrier_init(&item_stored[i], kConsumerWarps);
    }
    ptx::sm90::mbarrier_init(routed, Tr::kConsumers);  // every consumer thread, after its table writes
    ptx::sm90::fence_mbarrier_init();
  }
  __syncthreads();
  w4a16::sm_clock_enter(p.sm_clock[0]);
  w4a16::sm_clock_enter(p.sm_clock[1]);
#if FP4MOE_FUSED_TRACE
  unsigned long long* const trace = p.trace ? p.trace + blockIdx.x * kFusedTraceWordsPerCta : nullptr;
  if (trace && tid == 0) trace[0] = w4a16::global_timer_ns();
  int traced = 0;
#endif

  if (warp == 0) {
    // ==== producer (lane 0) ==================================================================
    if (lane == 0) {
      int A = -1;  // the batch's active groups, once this CTA's routing tables are built
      int slot = 0, islot = 0;
      uint32_t phase = 0, iphase = 0;
      // The group whose FC1 this CTA has seen complete, the FC2 row block whose items it has seen
      // complete: a CTA's FC2 items come in ascending groups, its finalize items in ascending
      // rows, so one acquire per group (row block) serves the items after it.
      int fc1_seen = -1, fc2_seen = -1;
      int t = atomicAdd(ctr + C.ticket, 1);
#if FP4MOE_FUSED_TRACE
      int ptraced = 0;
#endif
      for (;;) {
        // The next ticket is drawn as the item's last copies are issued: early enough that its
        // round trip hides behind them, late enough that a CTA holds no item it cannot start
        // soon while others have none left (drawn at the item's start, the launch's tail at
        // glm5 T = 1 was two items long).
        int t_next = -1;
        if (!(shared && t < G.rb1 * G.kc1s) && A < 0) {
          ptx::sm90::mbarrier_wait(routed, 0);
          A = *active_count;
        }
        Item it = fused::decode_ticket(t, A, shared, G);
        const bool gemm = it.kind <= fused::kItemFc2;
        const FusedGemm& g = it.kind == fused::kItemFc1 ? p.fc1 : p.fc2;
        if (gemm) {
          it.e = A < 0 ? E : active[it.a];  // before the routing only the shared expert (a = 0)
          fused::set_item_kgroups(it, A, shared, G, g.kgroups);
        }
        // The item's inputs: FC2 reads act of its group (all of FC1's row blocks of it), the
        // finalize every FC2 item of its row block. Both were released by their writers; the
        // copy engine reads act after the acquire and the proxy fence.
#if FP4MOE_FUSED_TRACE
        unsigned long long* prec =
            trace && ptraced < kFusedTraceItems ? trace + 4 * (2 + 2 * kFusedTraceItems + ptraced++) : nullptr;
        if (prec) prec[0] = fused_trace_code(it), prec[1] = w4a16::global_timer_ns();
#endif
        if (it.kind == fused::kItemFc2 && it.a != fc1_seen) {
          while (ptx::ld_acquire_gpu(ctr + C.fc1_done + it.a) < G.rb1) __nanosleep(64);
          ptx::sm90::fence_proxy_async_global();
          fc1_seen = it.a;
        } else if (it.kind == fused::kItemFinalize && it.rb * kFusedFinalizeRows / kRows != fc2_seen) {
          fc2_seen = it.rb * kFusedFinalizeRows / kRows;
          const int fc2_items = fused_fc2_items_per_rb(G, A);
          while (ptx::ld_acquire_gpu(ctr + C.fc2_done + fc2_seen) < fc2_items) __nanosleep(64);
        }
#if FP4MOE_FUSED_TRACE
        if (prec) prec[2] = w4a16::global_timer_ns();
#endif
        ptx::sm90::mbarrier_wait(&item_empty[islot], iphase ^ 1);
#if FP4MOE_FUSED_TRACE
        if (prec) prec[3] = w4a16::global_timer_ns();
#endif
        items[islot] = it;
        ptx::sm90::mbarrier_arrive(&item_full[islot]);
        if (++islot == kFusedItemSlots) islot = 0, iphase ^= 1;
        if (it.kind == fused::kItemEnd) break;
        if (!gemm) {
          t = atomicAdd(ctr + C.ticket, 1);
          continue;
        }
        const int rt0 = it.rb * kRowTiles;
        const uint32_t rts = static_cast<uint32_t>(min(kRowTiles, g.rowtiles - rt0));
        const int64_t group_tiles = static_cast<int64_t>(g.rowtiles) * g.kgroups;
        const uint8_t* wsrc = g.weights + (it.e * group_tiles + rt0) * 2048;
        const uint8_t* ssrc = g.scales + (it.e * group_tiles + rt0) * 256;
        // B rows: FC1 every token's hidden row; FC2 the act row of each token the group serves.
        const uint16_t* bsrc[kFusedTokens];
#pragma unroll
        for (int n = 0; n < kFusedTokens; ++n) {
          bsrc[n] = nullptr;
          if (n < T) {
            if (it.kind == fused::kItemFc1) {
              bsrc[n] = p.hidden + n * p.hidden_stride;
            } else {
              const int s = col_slot[it.a * kFusedTokens + n];
              if (s >= 0) bsrc[n] = p.act + (static_cast<int64_t>(n) * slots + s) * p.act_stride;
            }
          }
        }
        for (int j = 0; j < it.nkg; ++j) {
          const int kg = it.kg0 + j;
          if (j == max(0, it.nkg - 2)) t_next = atomicAdd(ctr + C.ticket, 1);
          ptx::sm90::mbarrier_wait(&empty[slot], phase ^ 1);
          uint8_t* st = smem + slot * Tr::kStageBytes;
          // A B row's bytes at this K group (a multiple of 32: K is a multiple of 16); past K
          // zeros, stored here (the weights there are zero, but stale bytes may not be finite).
          const uint32_t kbytes = static_cast<uint32_t>(min(256, g.k - kg * 256) * 2);
          uint32_t tx = rts * (2048 + 256);
#pragma unroll
          for (int n = 0; n < kFusedTokens; ++n) {
            if (!bsrc[n]) continue;
            tx += kbytes;
            for (uint32_t o = kbytes; o < 512; o += 16)
              *reinterpret_cast<uint4*>(st + Tr::kTokenOffset + n * kFusedTokenPitch + o) = make_uint4(0, 0, 0, 0);
          }
          ptx::sm90::mbarrier_arrive_expect_tx(&full[slot], tx);
          ptx::sm90::bulk_copy_g2s(st, wsrc + kg * static_cast<int64_t>(g.rowtiles) * 2048, rts * 2048, &full[slot]);
          ptx::sm90::bulk_copy_g2s(st + Tr::kWeightBytes, ssrc + kg * static_cast<int64_t>(g.rowtiles) * 256, rts * 256,
                                   &full[slot]);
#pragma unroll
          for (int n = 0; n < kFusedTokens; ++n)
            if (bsrc[n])
              ptx::sm90::bulk_copy_g2s(st + Tr::kTokenOffset + n * kFusedTokenPitch, bsrc[n] + kg * 256, kbytes,
                                       &full[slot]);
          if (++slot == kStages) slot = 0, phase ^= 1;
        }
        t = t_next;
      }
#if FP4MOE_FUSED_TRACE
      if (trace) trace[5] = static_cast<unsigned long long>(ptraced);
#endif
    }
    __syncwarp();
  } else if (warp == 1) {
    // ==== epilogue warp ======================================================================
    // Every round trip to global memory an item's end needs - the acq_rel arrival of an FC1 K
    // chunk, the last chunk's reduction and SwiGLU, the release of fc1_done / fc2_done - once
    // the consumers' stores of the item are out (item_stored): the consumers go on to the next
    // item's stages meanwhile. (With the consumers waiting for them, items of half the size
    // took glm5 T = 1 from 74 to 103 us, H200.) Its gpu-scope fences cost a stream of copies
    // alone ~15 us at glm5 T = 1 (tools/bulk_stream.cu), but not this layer, where the MMA loop
    // holds the stream as much: the partials handed over as flagged words polled by their
    // readers, with no fence at all, measured 2 us slower (docs/PERFORMANCE.md, "Fences and the
    // stream").
    ptx::sm90::mbarrier_wait(routed, 0);  // the tables its reductions read (col_slot)
    int islot = 0;
    uint32_t iphase = 0;
#if FP4MOE_FUSED_TRACE
    int etraced = 0;
#endif
    for (;;) {
      ptx::sm90::mbarrier_wait(&item_full[islot], iphase);
      const Item it = items[islot];
      if (it.kind == fused::kItemEnd) break;
      ptx::sm90::mbarrier_wait(&item_stored[islot], iphase);
#if FP4MOE_FUSED_TRACE
      unsigned long long* erec =
          trace && lane == 0 && etraced < kFusedTraceItems ? trace + 4 * (2 + kFusedTraceItems + etraced++) : nullptr;
      if (erec) erec[0] = fused_trace_code(it), erec[1] = w4a16::global_timer_ns(), erec[2] = erec[3] = 0;
#endif
      if (it.kind == fused::kItemFc1) {
        bool complete = it.nkc == 1;  // with one K chunk the consumers stored act themselves
        if (!complete) {
          int last = 0;
          if (lane == 0) {
            int* arrivals = ctr + C.fc1_arrivals + it.a * G.rb1 + it.rb;
            last = ptx::atomic_add_acq_rel_gpu(arrivals, 1) == it.nkc - 1;
#if FP4MOE_FUSED_TRACE
            if (erec) erec[2] = w4a16::global_timer_ns() | (last ? 1ull << 63 : 0ull);
#endif
            if (last) *arrivals = 0;  // ready for the next launch
          }
          if (__shfl_sync(0xffffffffu, last, 0)) {
            // A shuffle carries the value, not the memory order: the warp barrier puts lane 0's
            // acquire before every lane's loads of the other chunks' partials.
            __syncwarp();
            __threadfence();
            fused_fc1_reduce<Tr>(p, it, G, lane, T, slots, shared && it.a == 0 ? K_top : -1, col_slot);
            complete = true;
          }
        }
        __syncwarp();  // the warp's act stores before lane 0's release
        if (complete && lane == 0) ptx::red_release_gpu_add(ctr + C.fc1_done + it.a, 1);
#if FP4MOE_FUSED_TRACE
        if (erec && complete) erec[3] = w4a16::global_timer_ns();
#endif
      } else if (it.kind == fused::kItemFc2) {
        if (lane == 0) ptx::red_release_gpu_add(ctr + C.fc2_done + it.rb, 1);
#if FP4MOE_FUSED_TRACE
        if (erec) erec[3] = w4a16::global_timer_ns();
#endif
      }
      __syncwarp();
      if (lane == 0) ptx::sm90::mbarrier_arrive(&item_empty[islot]);
      if (++islot == kFusedItemSlots) islot = 0, iphase ^= 1;
    }
#if FP4MOE_FUSED_TRACE
    if (trace && lane == 0) trace[4] = static_cast<unsigned long long>(etraced);
#endif
  } else {
    // ==== consumers ==========================================================================
    const int cw = warp - Tr::kFirstConsumerWarp, ctid = tid - Tr::kFirstConsumerWarp * 32;
    const int g = lane >> 2, t = lane & 3;  // MMA fragment coordinates
    auto consumer_sync = [&] { ptx::named_barrier_sync(1, Tr::kConsumers); };

    // ---- the batch's routing, in every CTA, before any item ----------------------------------
    // (The epilogue warp routing token 0 while the consumers started on the shared expert's
    // items measured slower: beside the computing warps its dependent chain took ~10 us instead
    // of ~4.7, glm5 T = 1 on the H200.)
    for (int tok = cw; tok < T; tok += kConsumerWarps) {
      int id;
      float w;
      routing_device::route_token<8, /*kSorted=*/true>(rp, tok, lane, id, w);
      routing_device::keep_routed_pair(rp, K_top, slots, tok, lane, id, w, pair_ids, pair_w, bitmap);
      if (shared && lane == 0) {
        pair_ids[tok * slots + K_top] = E;
        pair_w[tok * slots + K_top] = 1.0f;
      }
    }
    consumer_sync();
    // The tables from the bitmap, every entry by itself: the active groups are the shared
    // expert first (its items are the first tickets), then the chosen routed experts ascending,
    // so a routed expert's index among them is its rank in the bitmap (popcounts); per pair its
    // group, per (active group, column) the column's slot. (One warp listing the groups, then
    // a search per entry, was two CTA barriers and two loops longer in the routing's chain.)
    {
      auto rank = [&](int e) {  // routed expert e chosen: its index among the active groups
        int r = shared ? 1 : 0;
        for (int w = 0; w < (e >> 5); ++w) r += __popc(bitmap[w]);
        return r + __popc(bitmap[e >> 5] & ((1u << (e & 31)) - 1u));
      };
      for (int e = ctid; e < E; e += Tr::kConsumers)
        if ((bitmap[e >> 5] >> (e & 31)) & 1u) active[rank(e)] = e;
      if (ctid == 0) {
        int A = shared ? 1 : 0;
        for (int w = 0; w < (E + 31) / 32; ++w) A += __popc(bitmap[w]);
        if (shared) active[0] = E;
        *active_count = A;
      }
      for (int i = ctid; i < T * slots; i += Tr::kConsumers) {
        const int e = pair_ids[i], n = i / slots;
        const int a = e == E ? 0 : rank(e);  // group E: the shared expert's slot
        pair_a[i] = a;
        col_slot[a * kFusedTokens + n] = static_cast<int8_t>(i - n * slots);
      }
    }
    consumer_sync();
    // Every consumer thread arrives after its own table writes, so that each write is released
    // to the producer and the epilogue warp by its writer (compute-sanitizer's racecheck does not
    // follow the named barrier into one lane's arrival: it reported the producer's reads of
    // col_slot as races).
    ptx::sm90::mbarrier_arrive(routed);
#if FP4MOE_FUSED_TRACE
    if (trace && ctid == 0) trace[1] = w4a16::global_timer_ns();
#endif
    // Lane-constant offsets into a stage: this warp's row tiles' weights and scales; B token row
    // g, K 64c + 16t + 8h -> byte 128c + 32t + 16h of the row (prepack_layout.h's k order).
    const int rt_warp = cw * kRpw;
    const int a_lane = rt_warp * 2048 + lane * 16;
    const int s_lane = Tr::kWeightBytes + rt_warp * 256 + lane * 8;
    const int b_lane = Tr::kTokenOffset + g * kFusedTokenPitch + t * 32;
    int slot = 0, islot = 0;
    uint32_t phase = 0, iphase = 0;
    for (;;) {
      ptx::sm90::mbarrier_wait(&item_full[islot], iphase);
      const Item it = items[islot];
      if (it.kind == fused::kItemEnd) break;
#if FP4MOE_FUSED_TRACE
      unsigned long long* rec = trace && ctid == 0 && traced < kFusedTraceItems ? trace + 4 * (2 + traced) : nullptr;
      if (rec) rec[0] = fused_trace_code(it), rec[1] = rec[2] = w4a16::global_timer_ns();
#endif
      if (it.kind == fused::kItemFinalize) {
        // out[token][row] = the sum over the token's slots of FC2's weighted K chunks, for this
        // item's kFusedFinalizeRows rows. Each value is summed by L lanes (L = 8 / T rounded to a
        // power of two: all of the item's values in one pass), lane j taking slots j, j + L, ...,
        // each slot's K chunks in order (a wide group's in its even half chunks), with its loads
        // issued kPerLane at a time before any add, then a butterfly over the L lanes: a fixed
        // order whichever CTA takes the item. (At T = 8 with 8 lanes a value, eight passes one
        // after another took ~20 us an item, glm5 on the H200. Lanes that took parts j, j + L, ...
        // of the slot-major list spent a division and a shared load on every address: 1.44 us an
        // item at glm5 T = 1, the launch's last microseconds.) (The tables are the ones the
        // producer acquired before it drew any ticket past the shared expert's.)
        constexpr int kPerLane = 12;
        const int lanes = T == 1 ? 8 : T == 2 ? 4 : T <= 4 ? 2 : 1;
        const int rows = p.fc2.rows, kc2 = G.kc2, j = ctid % lanes;
        const int first_narrow = fused_fc2_first_narrow(*active_count);
        const int64_t chunk_floats = static_cast<int64_t>(rows_pad2) * T;  // one (group, K chunk)'s rows
        for (int v0 = 0; v0 < kFusedFinalizeRows * T; v0 += Tr::kConsumers / lanes) {
          const int v = v0 + ctid / lanes;
          const int row = it.rb * kFusedFinalizeRows + v / T, n = v - (v / T) * T;
          const bool live = v < kFusedFinalizeRows * T && row < rows;
          const float* value = p.ws.fc2_part + static_cast<int64_t>(row) * T + n;  // group 0, K chunk 0
          float sum = 0.0f;
          int s = j, kc = 0, kstep = 1;
          const float* chunk0 = value;
          auto start_slot = [&] {  // slot s's group: its first chunk, its step between chunks
            const int a = pair_a[n * slots + s];
            chunk0 = value + a * kc2 * chunk_floats;
            kstep = fused::fc2_chunk_step(a, first_narrow);
          };
          if (s < slots) start_slot();
          while (live && s < slots) {
            float x[kPerLane];
#pragma unroll
            for (int q = 0; q < kPerLane; ++q) {
              x[q] = 0.0f;
              if (s < slots) {
                x[q] = __ldcg(chunk0 + kc * chunk_floats);
                kc += kstep;
                if (kc >= kc2) {
                  kc = 0;
                  s += lanes;
                  if (s < slots) start_slot();
                }
              }
            }
#pragma unroll
            for (int q = 0; q < kPerLane; ++q) sum += x[q];
          }
          for (int d = 1; d < lanes; d <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
          if (live && j == 0) p.out[static_cast<int64_t>(n) * rows + row] = w4a16::to_bf16_bits(sum);
        }
      } else {
        const bool fc1 = it.kind == fused::kItemFc1;
        // The group's global scales, loaded now: their latency hides behind the item's MMAs.
        const FusedGemm& gm = fc1 ? p.fc1 : p.fc2;
        const float ka = __ldg(gm.scale_a + it.e) * kDequantEpilogueFactor;
        const float kb = fc1 ? __ldg(gm.scale_b + it.e) * kDequantEpilogueFactor : 0.0f;
        float acc[kRpw][1][4];  // one n8 tile: the batch
#pragma unroll
        for (int r = 0; r < kRpw; ++r)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[r][0][i] = 0.0f;
        for (int j = 0; j < it.nkg; ++j) {
          ptx::sm90::mbarrier_wait(&full[slot], phase);
#if FP4MOE_FUSED_TRACE
          if (rec && j == 0) rec[2] = w4a16::global_timer_ns();
#endif
          const uint8_t* st = smem + slot * Tr::kStageBytes;
          uint2 sc8[kRpw];  // this lane's 8 scale bytes per row tile: chunk c -> bytes 2c, 2c+1
#pragma unroll
          for (int r = 0; r < kRpw; ++r) sc8[r] = ptx::ld_shared_v2(st + s_lane + r * 256);
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            uint4 aw[kRpw];  // 16 B per lane per row tile: one word per MMA k-step of this chunk
            uint32_t sc[kRpw];
#pragma unroll
            for (int r = 0; r < kRpw; ++r) {
              aw[r] = ptx::ld_shared_v4(st + a_lane + r * 2048 + c * 512);
              sc[r] = chunk_scales(sc8[r], c);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              // B: token g, K 64c + 16t + 8h + [0, 8): x, y feed MMA step 2h, z, w step 2h + 1.
              const uint4 b[1] = {ptx::ld_shared_v4(st + b_lane + c * 128 + h * 16)};
              mma_half_chunk(acc, aw, sc, b, h);
            }
          }
          // Every consumer thread releases its own reads of the stage. (One lane's arrival after
          // __syncwarp is as good a release under the PTX model, but compute-sanitizer's racecheck
          // does not follow it: where an item outruns the ring - glm5's FC1 items, H 1024 in
          // gpu_check.sh - it reported the next bulk copy into the slot as racing lanes 1-31's
          // reads. 128 arrivals a stage instead of 4 cost ~0.3 us at glm5 T = 1 and 2, H200.)
          ptx::sm90::mbarrier_arrive(&empty[slot]);
          if (++slot == kStages) slot = 0, phase ^= 1;
        }
        // acc[r][0][i]: block row 16 (rt_warp + r) + g (+8 for i >= 2), token n = 2t + (i & 1).
        if (fc1 && it.nkc > 1) {
          // This chunk's partial tile; the epilogue warp of the last chunk to arrive sums them.
          float* part = p.ws.fc1_part +
                        ((static_cast<int64_t>(it.a) * G.rb1 + it.rb) * fused_fc1_part_chunks(G) + it.kc) * kRows * T;
#pragma unroll
          for (int r = 0; r < kRpw; ++r)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int row = 16 * (rt_warp + r) + g + 8 * (i >> 1), n = 2 * t + (i & 1);
              if (n < T) part[row * T + n] = acc[r][0][i];
            }
        } else if (fc1) {
          // Row tile q holds gate rows 8q..8q+7 (tile rows 0-7) and up rows 8q..8q+7 (8-15):
          // acc[..][0][0..1] gate, acc[..][0][2..3] the matching up, act column 8q + g. Every token
          // takes the shared expert, in slot K_top (its item may come before the tables).
          const int act_cols = p.fc1.rows / 2;
          const bool shared_item = shared && it.a == 0;
#pragma unroll
          for (int r = 0; r < kRpw; ++r) {
            const int col = (it.rb * kRowTiles + rt_warp + r) * 8 + g;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              const int n = 2 * t + i;
              if (n >= T || col >= act_cols) continue;
              const int s = shared_item ? K_top : col_slot[it.a * kFusedTokens + n];
              if (s >= 0)
                p.act[(static_cast<int64_t>(n) * slots + s) * p.act_stride + col] =
                    w4a16::to_bf16_bits(w4a16::silu(acc[r][0][i] * ka) * (acc[r][0][i + 2] * kb));
            }
          }
        } else {
          // FC2: weighted by the token's routing weight, to its (group, K chunk) partial rows.
          float* part = p.ws.fc2_part + (static_cast<int64_t>(it.a) * G.kc2 + it.kc) * rows_pad2 * T;
#pragma unroll
          for (int r = 0; r < kRpw; ++r)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int row = (it.rb * kRowTiles + rt_warp + r) * 16 + g + 8 * (i >> 1), n = 2 * t + (i & 1);
              if (n >= T || row >= p.fc2.rows) continue;
              const int s = col_slot[it.a * kFusedTokens + n];
              if (s >= 0) part[static_cast<int64_t>(row) * T + n] = acc[r][0][i] * (pair_w[n * slots + s] * ka);
            }
        }
      }
#if FP4MOE_FUSED_TRACE
      if (rec) rec[3] = w4a16::global_timer_ns(), ++traced;
#endif
      // The item's stores are out (the epilogue warp releases them), then its slot is free.
      __syncwarp();
      if (lane == 0) {
        ptx::sm90::mbarrier_arrive(&item_stored[islot]);
        ptx::sm90::mbarrier_arrive(&item_empty[islot]);
      }
      if (++islot == kFusedItemSlots) islot = 0, iphase ^= 1;
    }
  }

  // ==== leaving: the last CTA resets the counters the items do not reset themselves ===========
#if FP4MOE_FUSED_TRACE
  if (trace && tid == Tr::kFirstConsumerWarp * 32) trace[3] = static_cast<unsigned long long>(traced);
#endif
  __syncthreads();
#if FP4MOE_FUSED_TRACE
  if (trace && tid == 0) trace[2] = w4a16::global_timer_ns();
#endif
  if (tid == 0) {
    const int left = ptx::atomic_add_acq_rel_gpu(ctr + C.exits, 1);
    if (left == static_cast<int>(gridDim.x) - 1) {
      const int A = *active_count;
      ctr[C.ticket] = 0;
      for (int a = 0; a < A; ++a) ctr[C.fc1_done + a] = 0;
      for (int rb = 0; rb < G.rb2; ++rb) ctr[C.fc2_done + rb] = 0;
      ctr[C.exits] = 0;
    }
  }
  w4a16::sm_clock_exit(p.sm_clock[0]);
  w4a16::sm_clock_exit(p.sm_clock[1]);
#else
  __trap();  // sm_90+ only: the resource model refuses it elsewhere, and the layer never launches it
#endif
}

}  // namespace fp4moe::kernels
