// sm80_w4a16_gemv.cuh - the small-batch grouped GEMM (family w4a16_gemv): a whole batch of
// T <= 8 tokens is the N side of one mma.sync m16n8k16 tile.
//
// Why a family of its own. At T = 1..4 the layer moves 5-200 MB of weights, and the stream-K
// family (sm80_w4a16_grouped_gemm.cuh) spent most of a single-token layer in chains of latency
// rather than in moving bytes (docs/PERFORMANCE.md: glm5-tp8 T = 1 at 37 us against a 5 us
// floor): a routing launch, each CTA's unit prefix over every group, stream-K fix-ups whose
// last CTA waits for the others, and a slot-sum launch. Here the batch's tokens themselves are
// the MMA's 8 columns, whichever experts they chose, which removes all four:
//   - FC1 routes the batch in every CTA (one warp per token, route_token.cuh; the same bits in
//     every CTA) while its tokens' hidden rows land in shared memory: no routing launch, no
//     permutation. FC1's CTA 0 publishes the routing (topk_ids / topk_weights) for FC2 and the
//     caller.
//   - Work is (group, row tiles) with the whole K in one CTA: the CTA's warps split K and sum
//     their partial tiles in shared memory in warp order - no cross-CTA fix-up, reproducible.
//   - FC2's CTA owns output rows for every group the batch chose: each group's partial tile is
//     scaled per column by that token's routing weight (zero where the token did not choose
//     the group) and summed in a fixed order (each warp its contiguous run of (group, K
//     group) items, then the warps' sums in warp order) - the finalize is the epilogue, no
//     slot-sum launch, deterministic.
// Columns of tokens that did not choose a group cost MMA issue slots only: at these sizes the
// tensor cores are idle anyway, the bytes of weights are what counts.
//
// Measured (H200, docs/HEURISTIC.md): glm5-tp8 (16 MB + 8 MB of weights at T = 1) 24.5 us a
// layer against 38 us for the stream-K family, and ahead up to T = 3; slower from T = 4, and on
// glm5 (I = 2048) at every T (84 against 75.5 us at T = 1): each lane's loads and dequantization
// move the bytes at well under the rate of the stream-K family's copy-engine stages. At T = 1 a
// CTA is a chain (docs/PERFORMANCE.md has a trace of it): the routing (~2.8 us), the tables, the
// first weights, then ~1.7 us per K group a warp computes - so the heuristic's tactic has six
// warps, three CTAs per SM, all blocks resident and 4 K groups per warp. The heuristic takes the
// family where it wins: narrow experts, T <= 3.
//
// Weights stream straight into registers: the prepacked layout (prepack_layout.h) gives each
// lane 16 contiguous bytes per (row tile, K group, 64-K chunk), so a warp's load of one chunk is
// 512 contiguous bytes, and kDepth K groups per warp are in flight at once (ld.global.nc,
// no L1 allocation: each byte is read once). No shared-memory staging of weights, no barriers
// in the mainloop.
//
// Shared memory (dynamic, W4a16GemvTraits::layout): the batch's routing per (token, slot), the
// bitmap and ascending list of active groups, per (active group, column) the slot and (FC2) the
// weight, the warps' partial tiles (two buffers), and B: FC1 the T hidden rows, FC2 the T x slots
// act rows, each padded with zeros to whole K groups (the prepacked weights are zero past K)
// and 16 bytes more so that the 8 token rows of one B-fragment load fall on distinct banks.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "fp4moe/tactic.h"
#include "kernels/common/dequant_nvfp4.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/gemm/gemv_shapes.h"
#include "kernels/gemm/grouped_units.cuh"
#include "kernels/gemm/w4a16_params.h"
#include "kernels/moe/route_token.cuh"

namespace fp4moe::kernels {

template <Tactic kT>
struct W4a16GemvTraits {
  static constexpr int kRowTiles = kT.tile_rows / 16;  // row tiles per block (every warp computes all)
  static constexpr int kDepth = kT.stages;             // K groups in flight per warp, in registers
  static constexpr int kWarps = kT.warps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr bool kSwiglu = kT.epilogue == Epilogue::kSwiglu;

  static_assert(kT.family == Family::kW4a16Gemv, "w4a16_gemv kernel instantiated for another family");
  static_assert(kT.tile_k == 256, "one item is one prepacked K group of 256");
  static_assert(kT.split_k == 1, "the warps of a CTA split K; its tactics carry split-K 1");
  static_assert(kT.tile_tokens == 8, "the batch is one n8 MMA tile");
  static_assert(kT.tile_rows % 16 == 0 && kRowTiles >= 1, "rows come in MMA tiles of 16");
  static_assert(kRowTiles <= kWarps, "warp r finishes row tile r of a block");
  static_assert(kDepth >= 1 && kDepth <= 8, "1..8 K groups in flight per warp");
  static_assert(kT.epilogue == Epilogue::kSwiglu || kT.epilogue == Epilogue::kFinalize,
                "w4a16_gemv is FC1 (swiglu, routing) or FC2 (finalize)");

  __host__ __device__ static constexpr int align16(int b) { return (b + 15) / 16 * 16; }
  // Row pitch of staged B in bytes: whole K groups, + 16 (bank offset between token rows).
  __host__ __device__ static constexpr int x_pitch(int k) { return (k + 255) / 256 * 512 + 16; }
  __host__ __device__ static constexpr int staged_rows(const W4a16SmemShape& s) {
    return kSwiglu ? s.tokens : s.tokens * s.slots;
  }
  __host__ __device__ static constexpr int max_active(const W4a16SmemShape& s) {
    return s.experts < s.tokens * s.slots ? s.experts : s.tokens * s.slots;
  }
  struct Layout {
    int pair_ids, pair_w, bitmap, active, col_slot, col_w, count, red, x, total;
  };
  __host__ __device__ static constexpr Layout layout(const W4a16SmemShape& s) {
    Layout l{};
    int o = 0;
    const int pairs = s.tokens * s.slots, act = max_active(s);
    l.pair_ids = o, o += align16(4 * pairs);             // group of (token, slot)
    l.pair_w = o, o += align16(4 * pairs);               // routing weight of (token, slot)
    l.bitmap = o, o += align16(4 * ((s.experts + 31) / 32));
    l.active = o, o += align16(4 * act);                 // active groups, ascending
    l.col_slot = o, o += align16(8 * act);               // [active][column] slot or -1 (int8)
    l.col_w = o, o += kSwiglu ? 0 : align16(32 * act);   // FC2: [active][column] weight (fp32)
    l.count = o, o += 16;                                // the number of active groups; FC2: routing published
    l.red = o, o += 2 * kWarps * kRowTiles * 512;        // partial tiles, two buffers
    l.x = o, o += staged_rows(s) * x_pitch(s.k);         // B
    l.total = o;
    return l;
  }
  static constexpr int dynamic_smem_bytes(const W4a16SmemShape& s) { return layout(s).total; }
  // Blocks of one launch at most (FC1: every active group x row blocks; FC2: row blocks).
  static constexpr int max_blocks(const W4a16SmemShape& s, int rowtiles) {
    const int row_blocks = (rowtiles + kRowTiles - 1) / kRowTiles;
    return kSwiglu ? max_active(s) * row_blocks : row_blocks;
  }
};

// FC1 routes with kGemvPerLane experts per lane (gemv_shapes.h): 256 routed experts at most.

namespace gemv {

// One K group of a warp's weights: per row tile, 4 chunks x 16 B and 8 scale bytes per lane.
template <int kRowTiles>
struct Stage {
  uint4 w[kRowTiles][4];
  uint2 s[kRowTiles];
  float gs;  // FC2: the group's global (down) scale, loaded with its weights
};

// ld.global.nc.L1::no_allocate: weights are read once; keep L1 for the staged tokens' lines.
__device__ __forceinline__ uint4 ld_stream_v4(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_stream_v2(const uint8_t* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

}  // namespace gemv

// CTAs per SM the registers must allow. Every warp keeps its own K groups in flight, so warps per
// SM are the bytes in flight per SM: at most 128 registers (16 warps per SM) for 4 and 8 warps;
// 6-warp CTAs take three per SM (96 registers: 5 warps on some of the SM's 4 register files),
// so that all of glm5-tp8's single-token FC1 blocks (9 groups x 32 row tiles) are resident at
// once, each warp with 4 of the 24 K groups. (Three K groups in flight spill at 96.)
constexpr int gemv_min_ctas_per_sm(int warps) { return warps == 6 ? 3 : 16 / warps; }

template <unsigned long long kCode>
__global__ void __launch_bounds__(decode_tactic(kCode).warps * 32, gemv_min_ctas_per_sm(decode_tactic(kCode).warps))
    w4a16_gemv_kernel(const W4a16GemmParams p) {
  constexpr Tactic kT = decode_tactic(kCode);
  using Tr = W4a16GemvTraits<kT>;
  constexpr int kRT = Tr::kRowTiles, kDepth = Tr::kDepth, kWarps = Tr::kWarps, kThreads = Tr::kThreads;
  constexpr bool kSwiglu = Tr::kSwiglu;

  extern __shared__ __align__(16) uint8_t smem[];
  w4a16::sm_clock_enter(p.sm_clock);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // MMA fragment coordinates
  const RoutingParams& rp = p.routing;
  const int T = p.tokens, E = rp.experts, K_top = rp.top_k, slots = p.slots;
  const int groups = p.num_experts;
  const auto L = Tr::layout(W4a16SmemShape{groups, T, p.k, slots});
  int* pair_ids = reinterpret_cast<int*>(smem + L.pair_ids);
  float* pair_w = reinterpret_cast<float*>(smem + L.pair_w);
  unsigned* bitmap = reinterpret_cast<unsigned*>(smem + L.bitmap);
  int* active = reinterpret_cast<int*>(smem + L.active);
  int8_t* col_slot = reinterpret_cast<int8_t*>(smem + L.col_slot);
  float* col_w = reinterpret_cast<float*>(smem + L.col_w);
  int* count = reinterpret_cast<int*>(smem + L.count);
  uint8_t* xs = smem + L.x;
  const int pitch = Tr::x_pitch(p.k);
  const int KG = p.kgroups;
  const int row_blocks = (p.rowtiles + kRT - 1) / kRT;
  const int64_t expert_wbytes = static_cast<int64_t>(p.rowtiles) * KG * 2048;
  const int64_t expert_sbytes = static_cast<int64_t>(p.rowtiles) * KG * 256;
  // This CTA's share of `blocks` blocks (block blockIdx.x + i * gridDim.x).
  auto blocks_of_cta = [&](int blocks) {
    return static_cast<int>(blockIdx.x) < blocks ? (blocks - 1 - static_cast<int>(blockIdx.x)) / gridDim.x + 1 : 0;
  };

  // B into shared memory by cp.async (zero past K), by threads [t0, kThreads): FC1 the batch's
  // hidden rows (a layer input: they land while the routing below runs), FC2 the act rows of
  // every (token, slot) (FC1's output: after griddepcontrol.wait).
  auto stage_b = [&](int t0) {
    const int rows = kSwiglu ? T : T * slots, pieces = KG * 32;  // 16-byte pieces per row
    // Piece i = r * pieces + c, (r, c) stepped without dividing.
    int r = 0, c = tid - t0;
    while (c >= pieces) c -= pieces, ++r;
    for (; r < rows;) {
      const bool valid = c * 8 < p.k;
      ptx::cp_async_16(xs + r * pitch + c * 16, valid ? p.x + r * p.x_stride + c * 8 : p.x, valid);
      for (c += kThreads - t0; c >= pieces;) c -= pieces, ++r;
    }
    ptx::cp_async_commit();
  };
  // FC1: the warps that route (one per token) start on it at once - the logits' loads begin the
  // kernel's critical path - and the others stage B; with a token for every warp, B follows the
  // routing.
  const int routing_warps = T < kWarps ? T : kWarps;
  // The active-group bitmap is cleared first, so that each (token, slot) can set its bit as soon
  // as it is known (one CTA barrier less after the routing).
  for (int i = tid; i < (groups + 31) / 32; i += kThreads) bitmap[i] = 0;
  __syncthreads();
  if constexpr (kSwiglu)
    if (warp >= routing_warps) stage_b(routing_warps * 32);

  // ---- 1. the batch's routing: group and weight of every (token, slot) -----------------------
  // FC1 routes (one warp per token, the same bits in every CTA) and its CTA 0 publishes the
  // routing; FC2 reads it once FC1 is complete, and prefetches its weights as soon as CTA 0
  // raises routing_ready. (FC2 routing for itself before the wait instead measured slower -
  // glm5-tp8 T = 1 30.8 against 28.7 us, H200 - with instruction fetch already the kernels'
  // largest stall in ncu.)
  if constexpr (kSwiglu) {
    for (int tok = warp; tok < T; tok += kWarps) {
      int id;
      float w;
      routing_device::route_token<kGemvPerLane, /*kSorted=*/true>(rp, tok, lane, id, w);
      routing_device::keep_routed_pair(rp, K_top, slots, tok, lane, id, w, pair_ids, pair_w, bitmap);
    }
    if (routing_warps == kWarps) stage_b(0);
  } else {
    if (p.routing_ready) {
      // FC1's CTA 0 publishes the routing before its GEMM and this grid's CTAs become resident
      // as FC1's call griddepcontrol.launch_dependents: request this CTA's weights (every
      // chosen group at its row blocks, K groups whole) into L2 now, so that after the wait
      // they come from L2 while FC1 still runs. Only a hint: a bounded wait, and a stale or
      // missing flag costs nothing but the prefetch.
      if (tid == 0) {
        constexpr int kMaxPolls = 2048;
        int polls = 0;
        unsigned ready = 0;
        for (;;) {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(ready) : "l"(p.routing_ready) : "memory");
          if (ready != 0 || ++polls == kMaxPolls) break;
          __nanosleep(32);
        }
        count[1] = static_cast<int>(ready);
        if (atomicAdd(p.routing_ready + 1, 1u) == gridDim.x - 1) {  // the last CTA to look
          p.routing_ready[1] = 0;
          p.routing_ready[0] = 0;
        }
      }
      __syncthreads();
      if (count[1] != 0) {
        const int pairs = T * K_top + (rp.shared_expert ? T : 0);
        const int my_blocks = blocks_of_cta(row_blocks);  // FC2's blocks are its row blocks
        for (int i = tid; i < pairs * my_blocks * KG; i += kThreads) {
          const int pair = i % pairs, rest = i / pairs, bi = rest % my_blocks, kg = rest / my_blocks;
          // (clamped to a routed expert: a flag left raised by an earlier call would let stale
          // ids through here; E itself is the shared expert, past the weights where there is none)
          const int e = pair < T * K_top ? min(max(rp.topk_ids[pair], 0), E - 1) : E;
          const int rt0 = (blockIdx.x + bi * gridDim.x) * kRT, rts = min(kRT, p.rowtiles - rt0);
          const int64_t tile = static_cast<int64_t>(kg) * p.rowtiles + rt0;
          w4a16::prefetch_l2(p.weights + e * expert_wbytes + tile * 2048, rts * 2048);
          w4a16::prefetch_l2(p.scales + e * expert_sbytes + tile * 256, rts * 256);
        }
      }
    }
    w4a16::griddep_wait();  // FC1's routing and act are complete and visible
    for (int i = tid; i < T * K_top; i += kThreads) {
      const int tok = i / K_top, s2 = i - tok * K_top, id = rp.topk_ids[i];
      pair_ids[tok * slots + s2] = id;
      pair_w[tok * slots + s2] = rp.topk_weights[i];
      atomicOr(&bitmap[id >> 5], 1u << (id & 31));
    }
    stage_b(0);
  }
  // FC2's CTAs may become resident now; they wait for this grid's completion to read.
  if constexpr (kSwiglu) w4a16::griddep_launch_dependents();
  if (rp.shared_expert) {
    for (int tok = tid; tok < T; tok += kThreads) {
      pair_ids[tok * slots + K_top] = E;
      pair_w[tok * slots + K_top] = 1.0f;
    }
    if (tid == 0) atomicOr(&bitmap[E >> 5], 1u << (E & 31));
  }
  __syncthreads();  // the pairs and the bitmap are complete
  // FC1's CTA 0 tells FC2 that the routing is out (FC2 prefetches its weights on it). Release:
  // every thread's stores of the routing are ordered before the barrier above.
  if (kSwiglu && p.routing_ready && blockIdx.x == 0 && tid == 0) {
    __threadfence();
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p.routing_ready), "r"(1u) : "memory");
  }
  // ---- 2. active groups in ascending order (FC2 sums them in this order: reproducible) -------
  if (warp == 0) {
    int n = 0;
    for (int base = 0; base < groups; base += 32) {
      const bool on = (bitmap[base >> 5] >> lane) & 1u;
      const unsigned ballot = __ballot_sync(0xffffffffu, on);
      if (on) active[n + __popc(ballot & ((1u << lane) - 1u))] = base + lane;
      n += __popc(ballot);
    }
    if (lane == 0) *count = n;
  }
  __syncthreads();  // the active groups are known: the weights' loads may start
  const int A = *count;

  // ---- 3. blocks: (active group, row block) for FC1, row blocks of the output for FC2 --------
  const int blocks = kSwiglu ? A * row_blocks : row_blocks;
  const int my_blocks = blocks_of_cta(blocks);
  // A block's items (one K group each): FC1 the group's K groups; FC2 (group, K group) for every
  // active group, group-major. Warp w takes items [w * n / W, (w + 1) * n / W) of every block.
  const int items = kSwiglu ? KG : A * KG;
  const int my_begin = warp * items / kWarps, my_count = (warp + 1) * items / kWarps - my_begin;
  // Lane-constant B offset: token row g, K = 64c + 16t + 8h -> byte 128c + 32t + 16h of a K group.
  const uint8_t* fc1_b = (kSwiglu && g < T) ? xs + g * pitch + t * 32 : nullptr;
  // A position in the warp's stream of items: block bi (of this CTA's), item i (of the warp's
  // my_count in each block), the item's active group a and K group kg, and the block's first row
  // tile. Advanced by counting: a division per block at most, none per item (the integer
  // divisions this replaced, several per item, were long dependent chains in the mainloop).
  const int a_first = kSwiglu ? 0 : my_begin / KG, kg_first = kSwiglu ? my_begin : my_begin % KG;
  struct ItemPos {
    int bi, i, a, kg, rt0;
  };
  auto enter_block = [&](ItemPos& c) {
    const int blk = blockIdx.x + c.bi * gridDim.x;
    const int a = kSwiglu ? blk / row_blocks : 0;
    c.a = kSwiglu ? a : a_first;
    c.kg = kg_first;
    c.rt0 = (blk - a * row_blocks) * kRT;  // FC2: a = 0, the block is the row block
  };
  auto advance = [&](ItemPos& c) {
    if (++c.i == my_count) {
      c.i = 0;
      ++c.bi;
      enter_block(c);
    } else if (kSwiglu) {
      ++c.kg;  // FC1: the block's group, its next K group
    } else if (++c.kg == KG) {
      c.kg = 0;  // FC2: the next group's first K group
      ++c.a;
    }
  };

  // Loads of one item (row tiles past the matrix: zero scales, so zero values, no load).
  auto issue = [&](gemv::Stage<kRT>& S, const ItemPos& c) {
    const int e = active[c.a], rt0 = c.rt0;
    const int64_t tile = static_cast<int64_t>(c.kg) * p.rowtiles + rt0;
    const uint8_t* wb = p.weights + e * expert_wbytes + tile * 2048 + lane * 16;
    const uint8_t* sb = p.scales + e * expert_sbytes + tile * 256 + lane * 8;
    if constexpr (!kSwiglu) S.gs = __ldg(p.scale_a + e) * kDequantEpilogueFactor;
#pragma unroll
    for (int r = 0; r < kRT; ++r) {
      if (rt0 + r < p.rowtiles) {
#pragma unroll
        for (int c = 0; c < 4; ++c) S.w[r][c] = gemv::ld_stream_v4(wb + r * 2048 + c * 512);
        S.s[r] = gemv::ld_stream_v2(sb + r * 256);
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) S.w[r][c] = make_uint4(0, 0, 0, 0);
        S.s[r] = make_uint2(0, 0);
      }
    }
  };

  float acc[kRT][4];
#pragma unroll
  for (int r = 0; r < kRT; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[r][i] = 0.0f;

  // The MMAs of one item into `tile` (B from `brow`, its K group's bytes; nullptr: zeros). The
  // odd MMA steps accumulate apart and join at the item's end: two dependent chains of 8 MMAs
  // instead of one of 16 (with one row tile a warp has no other MMA to issue meanwhile).
  auto mma_item = [&](const gemv::Stage<kRT>& S, const uint8_t* brow, float (&tile)[kRT][4]) {
    float odd[kRT][4] = {};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      uint32_t sc[kRT];  // rows g, g+8: the scale pair of this chunk
#pragma unroll
      for (int r = 0; r < kRT; ++r) sc[r] = chunk_scales(S.s[r], c);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // B: x.y = MMA step 2h (K +0..3 of this lane's 8), z.w = step 2h + 1; zero columns
        // where the token did not choose the group.
        const uint4 bv = brow ? ptx::ld_shared_v4(brow + c * 128 + h * 16) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int r = 0; r < kRT; ++r) {
          // Steps 2h and 2h + 1 come from one word pair (dequant_nvfp4.cuh).
          uint32_t a0[4], a1[4];
          dequant_a_fragment_half(S.w[r][c], h, sc[r], a0, a1);
          ptx::mma_bf16_m16n8k16(tile[r], a0, bv.x, bv.y);
          ptx::mma_bf16_m16n8k16(odd[r], a1, bv.z, bv.w);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRT; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) tile[r][i] += odd[r][i];
  };
  // One item: FC1 accumulates into acc; FC2 into a per-item tile that is then added to acc
  // scaled per column (token) by its weight for this group.
  auto compute = [&](const gemv::Stage<kRT>& S, const ItemPos& c) {
    const int kg = c.kg;
    if constexpr (kSwiglu) {
      mma_item(S, fc1_b ? fc1_b + kg * 512 : nullptr, acc);
    } else {
      const int a = c.a;
      const int s = col_slot[a * 8 + g];  // -1 past the batch or where token g skipped a
      float part[kRT][4] = {};
      mma_item(S, s >= 0 ? xs + (g * slots + s) * pitch + t * 32 + kg * 512 : nullptr, part);
      // part[r][j]: column 2t + (j & 1)
      const float w0 = col_w[a * 8 + 2 * t] * S.gs, w1 = col_w[a * 8 + 2 * t + 1] * S.gs;
#pragma unroll
      for (int r = 0; r < kRT; ++r) {
        acc[r][0] += w0 * part[r][0];
        acc[r][1] += w1 * part[r][1];
        acc[r][2] += w0 * part[r][2];
        acc[r][3] += w1 * part[r][3];
      }
    }
  };

  // The end of block bi: the warps' partial tiles summed in warp order (two buffers, one CTA
  // barrier), warp r finishes row tile r; acc restarts at zero.
  int red_buf = 0;
  // FC1's global scales (gate, up) of a block's group: loaded when its first item is computed,
  // so that the load's latency hides behind the block's MMAs, not in front of its epilogue.
  float blk_ka = 0.0f, blk_kb = 0.0f;
  auto load_block_scales = [&](const ItemPos& c) {
    if constexpr (kSwiglu) {
      const int e = active[c.a];
      blk_ka = __ldg(p.scale_a + e) * kDequantEpilogueFactor;
      blk_kb = __ldg(p.scale_b + e) * kDequantEpilogueFactor;
    }
  };
  auto block_end = [&](const ItemPos& c) {
    float4* red = reinterpret_cast<float4*>(smem + L.red) + red_buf * kWarps * kRT * 32;
#pragma unroll
    for (int r = 0; r < kRT; ++r) {
      red[(warp * kRT + r) * 32 + lane] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][i] = 0.0f;
    }
    __syncthreads();  // also: the other buffer's readers (the block before) are done
    red_buf ^= 1;
    const int rt = c.rt0 + warp;
    if (warp >= kRT || rt >= p.rowtiles) return;
    float4 sum = red[warp * 32 + lane];
    for (int w = 1; w < kWarps; ++w) {
      const float4 v = red[(w * kRT + warp) * 32 + lane];
      sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
    }
    const float v[4] = {sum.x, sum.y, sum.z, sum.w};  // rows g, g, g+8, g+8 x columns 2t, 2t+1
    if constexpr (kSwiglu) {
      // Row tile q: gate rows 8q..8q+7 (tile rows 0-7), up rows 8q..8q+7 (8-15): act column 8q + g.
      const int a = c.a;
      const float ka = blk_ka, kb = blk_kb;
      const int col = rt * 8 + g;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int n = 2 * t + i, s = col_slot[a * 8 + n];
        if (s >= 0 && col < p.act_cols)
          p.act_out[static_cast<int64_t>(n * slots + s) * p.act_stride + col] =
              w4a16::to_bf16_bits(w4a16::silu(v[i] * ka) * (v[i + 2] * kb));
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int n = 2 * t + (i & 1), row = rt * 16 + g + (i >> 1) * 8;
        if (n < T && row < p.rows) p.out[static_cast<int64_t>(n) * p.rows + row] = w4a16::to_bf16_bits(v[i]);
      }
    }
  };

  // The warp's items of all its blocks as one stream, kDepth K groups in flight across block
  // ends (stage j holds items j, j + kDepth, ...: static register names). Every warp passes
  // every block end's barrier, those with no items too.
  auto wait_b = [&] {
    ptx::cp_async_wait<0>();
    __syncthreads();  // every thread's B copies
  };
  ItemPos lc{0, 0, 0, 0, 0};  // the next item to load
  enter_block(lc);
  // The first kDepth items' weights are requested as soon as the groups are known, before the
  // per-column tables are built and B is complete.
  const int total = my_blocks * my_count;
  gemv::Stage<kRT> st[kDepth];
#pragma unroll
  for (int j = 0; j < kDepth; ++j)
    if (j < total) issue(st[j], lc), advance(lc);
  // Per (active group, column): the token's slot (-1: the token did not choose the group) and,
  // for FC2, its routing weight.
  for (int i = tid; i < A * 8; i += kThreads) {
    const int a = i >> 3, n = i & 7;
    int slot = -1;
    if (n < T)
      for (int s = 0; s < slots; ++s)
        if (pair_ids[n * slots + s] == active[a]) slot = s;
    col_slot[i] = static_cast<int8_t>(slot);
    if constexpr (!kSwiglu) col_w[i] = slot < 0 ? 0.0f : pair_w[n * slots + slot];  // x the group's scale per item
  }
  if (my_count == 0) {
    wait_b();  // also: the tables are complete
    for (; lc.bi < my_blocks; ++lc.bi) {
      enter_block(lc);
      load_block_scales(lc);
      block_end(lc);
    }
    w4a16::sm_clock_exit(p.sm_clock);
    return;
  }
  wait_b();  // also: the tables are complete
  ItemPos cc{0, 0, 0, 0, 0};  // the item computed next
  enter_block(cc);
  for (int f0 = 0; f0 < total; f0 += kDepth) {
#pragma unroll
    for (int j = 0; j < kDepth; ++j) {
      if (f0 + j < total) {
        if (cc.i == 0) load_block_scales(cc);
        compute(st[j], cc);
        if (f0 + j + kDepth < total) {
          issue(st[j], lc);
          advance(lc);
        }
        if (cc.i + 1 == my_count) block_end(cc);
        advance(cc);
      }
    }
  }
  w4a16::sm_clock_exit(p.sm_clock);
}

}  // namespace fp4moe::kernels
