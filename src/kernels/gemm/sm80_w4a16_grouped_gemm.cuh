// sm80_w4a16_grouped_gemm.cuh - the decode-regime grouped GEMM (family w4a16_mma).
//
// NVFP4 weights are dequantized to BF16 in registers and multiplied on the BF16 tensor cores
// with mma.sync m16n8k16 (sm_80+: Ampere, Ada, Hopper, Blackwell sm_100/sm_120 alike), fp32
// accumulation. A and B are swapped: weight rows are the MMA's M side (16 per MMA tile), the
// expert's tokens its N side (8 per MMA tile), so 1-64 tokens per expert waste nothing.
//
// Work. A "unit" is one output tile: (expert, row block of kRows rows, token tile of kTokens
// tokens), in expert order, row block, then token tile innermost (token tiles of one row block
// read the same weights: consecutive units hit L2). Each unit needs KG = K / 256 iterations.
// Stream-K: the U * KG iterations of all units are cut into gridDim.x equal contiguous ranges,
// one per CTA (all CTAs resident), so every SM streams the same number of weight bytes however
// few experts are active. A unit cut by a range boundary is finished by the last of its CTAs
// to arrive: each writes its fp32 partial tile, and the last sums them in CTA order (fixed by
// the partition, so the result is bitwise reproducible). The per-expert token counts live on
// the device only: every CTA derives the unit prefix from expert_offsets in its prologue.
//
// Pipeline: kStages stages of one K group each, continuous across unit boundaries: the loader
// runs kStages - 1 iterations ahead of the MMAs over the CTA's whole range, so a unit's epilogue
// runs while the next unit's data arrives. Tokens are gathered by cp.async (Marlin-style, every
// thread a 16-byte piece, swizzled). The weights and scales of a stage are two contiguous runs
// (prepack_layout.h): on sm_90+ one thread moves each with one bulk copy (cp.async.bulk,
// completing on the stage's mbarrier); before sm_90, cp.async by every thread. Decode is bound
// by instruction issue as much as by DRAM (a 32-bit word of weights costs 8 bit operations to
// dequantize, dequant_nvfp4.cuh, plus its block scales' multiplies and its share of the MMA), and per-thread copies of the weights cost a quarter more instructions per
// stage than the MMAs' dequantization leaves room for.
//
// Warps: kWarpsRow x kWarpsTok; warp (wr, wt) owns row tiles [wr * kRpw, ...) and token n8
// tiles [wt * kNt, ...) of the CTA tile. Token tiles of 32 and 64 are split over 2 warps.
//
// Shared memory map (dynamic; S = kStageBytes):
//   [s*S,                 + kRowTiles*2048)  weights of stage s: [rowtile][chunk][lane][16 B]
//   [s*S + kWeightBytes,  + kRowTiles*256)   block scales:       [rowtile][lane][8 B]
//   [s*S + kW + kS,       + kTokens*512)     tokens:             [token][256 K bf16], 16-byte
//                                            units XOR-swizzled by (token & 7) within 128 B
//   [kStages*S, + 64)                        the stages' mbarriers (8 B each; used on sm_90+)
//   [kStages*S + 64, ...)                    unit prefix per expert, scan warp sums, stream-K
//                                            flag (W4a16Traits)
// No static shared memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "fp4moe/tactic.h"
#include "kernels/common/compiled_arch.cuh"
#include "kernels/common/dequant_nvfp4.cuh"
#include "kernels/common/fragment_order.h"
#include "kernels/common/mma_half_chunk.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/gemm/grouped_units.cuh"
#include "kernels/gemm/w4a16_params.h"

namespace fp4moe::kernels {

// Everything the kernel derives from its tactic, with the reasons as static_asserts. The
// resource model (src/plan/resource_model.cc) computes the same bytes; a GPU test compares.
template <Tactic kT>
struct W4a16Traits {
  static constexpr int kRows = kT.tile_rows;
  static constexpr int kTokens = kT.tile_tokens;
  static constexpr int kStages = kT.stages;
  static constexpr int kWarps = kT.warps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowTiles = kRows / 16;
  static constexpr int kTokenTiles = kTokens / 8;
  // Token tiles of 32 or more are split over two warps (halves the B reads per warp).
  static constexpr int kWarpsTok = (kTokens >= 32 && kWarps >= 2) ? 2 : 1;
  static constexpr int kWarpsRow = kWarps / kWarpsTok;
  static constexpr int kRpw = kRowTiles / kWarpsRow;  // row tiles per warp
  static constexpr int kNt = kTokenTiles / kWarpsTok;  // n8 tiles per warp
  static constexpr int kFrag = kRpw * kNt * 4;         // accumulators per thread
  static constexpr int kKGroup = 256;
  static constexpr int kWeightBytes = kRowTiles * 2048;
  static constexpr int kScaleBytes = kRowTiles * 256;
  static constexpr int kTokenBytes = kTokens * kKGroup * 2;
  static constexpr int kStageBytes = kWeightBytes + kScaleBytes + kTokenBytes;
  static constexpr int kTokenChunks = kTokens * (kKGroup * 2 / 16);  // 16-byte units per stage
  static constexpr int kTileFloats = kRows * kTokens;                // one partial tile

  static_assert(kT.family == Family::kW4a16Mma, "w4a16_mma kernel instantiated for another family");
  static_assert(kT.tile_k == kKGroup, "one pipeline stage holds one prepacked K group of 256");
  static_assert(kT.split_k == 1, "w4a16_mma schedules stream-K; its tactics carry split-K 1");
  static_assert(kRows % 16 == 0, "rows come in MMA tiles of 16");
  static_assert(kTokens % 8 == 0 && kTokens >= 8 && kTokens <= 64, "token tile: n8 MMA tiles, 8..64");
  static_assert(kRowTiles % kWarpsRow == 0 && kRpw >= 1, "every warp owns the same row tiles");
  static_assert(kTokenTiles % kWarpsTok == 0, "every warp owns the same token tiles");
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  static_assert(kTokenChunks % kThreads == 0, "token copies split evenly over the threads");
  static_assert(kRowTiles * 128 % kThreads == 0, "weight copies split evenly over the threads");
  static_assert(kRowTiles * 16 <= kThreads, "one thread per 16-byte scale copy");
  static_assert(kStageBytes % 128 == 0, "stages stay 128-byte aligned");
  static_assert(kFrag % 4 == 0, "partials move as float4");
  static_assert(kStages <= 8, "the mbarrier area holds 8 stages");
  static constexpr int kBarrierBytes = 64;  // 8 mbarriers: the stages' weight copies (sm_90+)

  // Beyond the stages (all in the dynamic allocation; the kernel declares no static shared
  // memory, so that the resource model can state its exact request): the mbarriers, then the
  // scheduler's unit prefix, 4 * (experts + 1) B, the scan's warp sums and the stream-K "last
  // arrival" flag, 4 * (warps + 1) B.
  static constexpr int prefix_bytes(int experts) { return ((4 * (experts + 1) + 15) / 16) * 16; }
  static constexpr int kSchedulerScratch = ((4 * (kWarps + 1) + 15) / 16) * 16;
  static constexpr int dynamic_smem_bytes(int experts) {
    return kStages * kStageBytes + kBarrierBytes + prefix_bytes(experts) + kSchedulerScratch;
  }

  // The CTAs an SM that the launch bounds budget registers for: two where two of these pipelines
  // fit the shared memory of an SM of the architecture being compiled (at 8 warps, 128 registers
  // a thread), else one. A second CTA that can never be resident only halves the registers: at
  // 128, on sm_120a (100 KB an SM: one CTA of these), m256n16:s2:w8 spilled 16-48 B and
  // m128n64:s3:w8 156-160 B; on sm_90a m128n64:s3:w8 at 157-158 instead of 128 runs the glm5
  // layer 1.6-3.3% faster (H200, docs/PERFORMANCE.md "Blackwell").
  static constexpr int kMinCtasPerSm = two_ctas_fit(dynamic_smem_bytes(1), compiled_arch_smem_per_sm()) ? 2 : 1;
};


// kCode = encode_tactic(tactic) (see the NOTES in fp4moe/tactic.h).
// Registers for two CTAs per SM where two fit its shared memory (W4a16Traits::kMinCtasPerSm).
template <unsigned long long kCode>
__global__ void __launch_bounds__(decode_tactic(kCode).warps * 32, W4a16Traits<decode_tactic(kCode)>::kMinCtasPerSm)
    w4a16_grouped_gemm_kernel(const W4a16GemmParams p) {
  constexpr Tactic kT = decode_tactic(kCode);
  using Tr = W4a16Traits<kT>;
  constexpr int kTokens = Tr::kTokens, kStages = Tr::kStages;
  constexpr int kThreads = Tr::kThreads, kRowTiles = Tr::kRowTiles;
  constexpr int kRpw = Tr::kRpw, kNt = Tr::kNt, kWarpsRow = Tr::kWarpsRow;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kBulk = true;  // weights and scales by the bulk copy engine
#else
  constexpr bool kBulk = false;
#endif
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * Tr::kStageBytes);  // weights landed
  int* prefix = reinterpret_cast<int*>(smem + kStages * Tr::kStageBytes + Tr::kBarrierBytes);
  int* warp_sums = reinterpret_cast<int*>(smem + kStages * Tr::kStageBytes + Tr::kBarrierBytes +
                                          Tr::prefix_bytes(p.num_experts));
  int& unit_last = warp_sums[kT.warps];  // stream-K: this CTA completes the unit

  w4a16::sm_clock_enter(p.sm_clock);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // MMA fragment coordinates
  const int warp_row = warp % kWarpsRow, warp_tok = warp / kWarpsRow;
  const int row_blocks = (p.rowtiles + kRowTiles - 1) / kRowTiles;
  const int64_t expert_wbytes = static_cast<int64_t>(p.rowtiles) * p.kgroups * 2048;
  const int64_t expert_sbytes = static_cast<int64_t>(p.rowtiles) * p.kgroups * 256;
  const int rows_pad = p.rowtiles * 16;

  if constexpr (kBulk) {
    if (tid == 0) {
      for (int s = 0; s < kStages; ++s) w4a16::mbarrier_init(&full[s], 1);
      w4a16::fence_mbarrier_init();
    }  // visible to all threads after unit_prefix's barriers
  }
  // FC1 waits for the routing here. FC2 (offsets_ready) needs only FC1's act: the routing
  // finished before FC1 began, so its prologue and an L2 prefetch of its first weights run
  // while FC1 ends, and it waits below.
  if (!p.offsets_ready) w4a16::griddep_wait();
  w4a16::unit_prefix<kThreads>(prefix, p.expert_offsets, p.num_experts, kTokens, row_blocks,
                               warp_sums);
  w4a16::griddep_launch_dependents();
  const int KG = p.kgroups;
  // W iterations over G CTAs; with fewer iterations than CTAs only the first W CTAs work
  // (each then takes one), so that every CTA of the partition holds at least one iteration.
  const int64_t W = static_cast<int64_t>(prefix[p.num_experts]) * KG;
  const int64_t G = min(static_cast<int64_t>(gridDim.x), W);
  if (blockIdx.x >= G) return;
  const int64_t it_begin = w4a16::range_begin(blockIdx.x, W, G);
  const int64_t it_end = w4a16::range_begin(blockIdx.x + 1, W, G);
  const int first_unit = static_cast<int>(it_begin / KG);
  const int first_kg = static_cast<int>(it_begin % KG);
  const int64_t iterations = it_end - it_begin;
  // sm_90+: a unit's weights (scales) at K group kg are one run of 2048 (256) B per row tile,
  // from block_weights(uu) + kg * w_kg_stride (block_scales, s_kg_stride); row tiles past the
  // matrix are left out of the run.
  const int64_t w_kg_stride = static_cast<int64_t>(p.rowtiles) * 2048;
  const int64_t s_kg_stride = static_cast<int64_t>(p.rowtiles) * 256;
  auto block_weights = [&](const w4a16::Unit& uu) {
    return p.weights + uu.e * expert_wbytes + static_cast<int64_t>(uu.rb) * kRowTiles * 2048;
  };
  auto block_scales = [&](const w4a16::Unit& uu) {
    return p.scales + uu.e * expert_sbytes + static_cast<int64_t>(uu.rb) * kRowTiles * 256;
  };
  auto block_rowtiles = [&](const w4a16::Unit& uu) {
    return static_cast<uint32_t>(min(kRowTiles, p.rowtiles - uu.rb * kRowTiles));
  };
  if (p.offsets_ready) {
    if (kBulk && tid == 0) {
      // The weights and scales of the first kStages - 1 iterations into L2 (cp.async.bulk.prefetch).
      w4a16::UnitCursor<kTokens> pc;
      pc.seek(p, prefix, first_unit);
      int kg = first_kg;
      for (int64_t i = 0; i < min(static_cast<int64_t>(kStages - 1), iterations); ++i) {
        const w4a16::Unit uu = pc.unit();
        const uint32_t rts = block_rowtiles(uu);
        w4a16::prefetch_l2(block_weights(uu) + kg * w_kg_stride, rts * 2048);
        w4a16::prefetch_l2(block_scales(uu) + kg * s_kg_stride, rts * 256);
        if (++kg == KG) {
          kg = 0;
          pc.next(p, prefix);
        }
      }
    }
    w4a16::griddep_wait();  // FC1's act is complete and visible
  }

  // ---- loader: the next (unit, K group) of this CTA's range into a stage slot -------------
  // Incremental counters: no 64-bit division in the loop.
  w4a16::UnitCursor<kTokens> lcur;  // the unit being loaded
  lcur.seek(p, prefix, first_unit);
  int l_kg = first_kg;
  int64_t l_left = iterations;
  bool l_entered = false;  // enter_unit has run for lcur's unit
  // Per-thread copy assignments (fixed for the whole kernel): weight copy i moves 16 bytes of
  // row tile (tid >> 7) + i * kWStep, token copy i 16 bytes of token (tid >> 5) + i * kTStep.
  constexpr int kWCopies = kRowTiles * 128 / kThreads, kWStep = kThreads / 128;
  constexpr int kTCopies = Tr::kTokenChunks / kThreads, kTStep = kThreads / 32;
  static_assert(kThreads % 128 == 0, "weight copies: whole row tiles per pass");
  const int w_within = tid & 127, w_rt0 = tid >> 7;
  const int t_unit = tid & 31, t_n0 = tid >> 5;
  // Per-unit sources (recomputed when the loader enters a unit). Weights and scales are K-group
  // major (prepack_layout.h): the CTA's row tiles at K group kg are one contiguous run, so a
  // thread's copies sit at compile-time offsets from one base that advances by a fixed stride.
  const uint8_t* w_src = nullptr;  // copy 0's source at K group 0
  uint32_t w_valid = 0;            // bit i: copy i's row tile exists
  const uint8_t* s_src = nullptr;
  bool s_valid = false;
  // Token copy i: its source (token row + this thread's 8 elements at K group 0; row 0 for tokens
  // past the unit's, which copy nothing) and its destination in a stage, fixed: the swizzled
  // unit (t_unit & ~7) | ((t_unit ^ n) & 7).
  const uint16_t* t_src[kTCopies];
  uint32_t t_valid = 0;
  uint32_t t_dst[kTCopies];
#pragma unroll
  for (int i = 0; i < kTCopies; ++i) {
    const int n = t_n0 + i * kTStep;
    t_dst[i] = Tr::kWeightBytes + Tr::kScaleBytes + n * 512 + ((t_unit & ~7) | ((t_unit ^ n) & 7)) * 16;
  }
  const bool k_tail = p.k % 256 != 0;  // the last K group is partial: its columns past K copy nothing
  uint32_t bulk_rowtiles = 0;  // sm_90+: the unit's row tiles inside the matrix (a prefix of the block)
  auto enter_unit = [&](const w4a16::Unit& uu) {
    if constexpr (kBulk) {
      // One run per stage. Row tiles past the matrix are not copied; the MMAs read stale bytes
      // there, whose output rows are never stored.
      w_src = block_weights(uu);
      s_src = block_scales(uu);
      bulk_rowtiles = block_rowtiles(uu);
    } else {
      const int grt0 = uu.rb * kRowTiles + w_rt0;
      w_src = p.weights + uu.e * expert_wbytes + static_cast<int64_t>(grt0) * 2048 + w_within * 16;
      w_valid = 0;
#pragma unroll
      for (int i = 0; i < kWCopies; ++i) w_valid |= (grt0 + i * kWStep < p.rowtiles ? 1u : 0u) << i;
      const int srt = uu.rb * kRowTiles + (tid >> 4);
      s_valid = tid < kRowTiles * 16 && srt < p.rowtiles;
      s_src = p.scales + uu.e * expert_sbytes + static_cast<int64_t>(s_valid ? srt : 0) * 256 + (tid & 15) * 16;
    }
    t_valid = 0;
#pragma unroll
    for (int i = 0; i < kTCopies; ++i) {
      const int n = t_n0 + i * kTStep;
      const bool v = n < uu.ntok;
      const int64_t xr = !v ? 0 : p.gather ? __ldg(p.gather + uu.tok0 + n) : uu.tok0 + n;
      t_src[i] = p.x + xr * p.x_stride + t_unit * 8;
      t_valid |= (v ? 1u : 0u) << i;
    }
  };
  auto load_next = [&](int slot) {
    if (l_left > 0) {
      const int kg = l_kg;
      if (!l_entered) {
        enter_unit(lcur.unit());
        l_entered = true;
      }
      uint8_t* st = smem + slot * Tr::kStageBytes;
      if constexpr (kBulk) {
        if (tid == 0) {
          w4a16::mbarrier_arrive_expect_tx(&full[slot], bulk_rowtiles * (2048 + 256));
          w4a16::bulk_copy_g2s(st, w_src + kg * w_kg_stride, bulk_rowtiles * 2048, &full[slot]);
          w4a16::bulk_copy_g2s(st + Tr::kWeightBytes, s_src + kg * s_kg_stride, bulk_rowtiles * 256, &full[slot]);
        }
      } else {
        // Weights: kRowTiles x 2048 B, contiguous per row tile; rows past the matrix: zeros.
        const uint8_t* wk = w_src + kg * w_kg_stride;
#pragma unroll
        for (int i = 0; i < kWCopies; ++i) {
          const bool v = (w_valid >> i) & 1u;
          ptx::cp_async_16(st + (w_rt0 + i * kWStep) * 2048 + w_within * 16,
                           v ? wk + i * kWStep * 2048 : p.weights, v);
        }
        // Scales: kRowTiles x 256 B, one 16-byte copy per thread of the first kRowTiles * 16.
        if (tid < kRowTiles * 16)
          ptx::cp_async_16(st + Tr::kWeightBytes + tid * 16, s_src + kg * s_kg_stride, s_valid);
      }
      // Tokens: kTokens rows x 32 units of 16 B (8 bf16), swizzled by (token & 7); past the
      // expert's tokens or past K: zeros (a zero-byte copy; its source stays inside x).
      const bool k_ok = !k_tail || kg * 256 + t_unit * 8 < p.k;
#pragma unroll
      for (int i = 0; i < kTCopies; ++i) {
        const bool v = ((t_valid >> i) & 1u) && k_ok;
        ptx::cp_async_16(st + t_dst[i], k_ok ? t_src[i] + kg * 256 : p.x, v);
      }
      --l_left;
      if (++l_kg == KG) {
        l_kg = 0;
        // The expert's next row block over the same (its only) token tile: the same token rows,
        // the weights and scales one row block on - not enter_unit's ~60 instructions a warp,
        // which at one K group a unit (glm5-tp8's FC2) come with every stage.
        const bool next_rows = kBulk && lcur.tiles == 1 && lcur.u + 1 < lcur.end;
        lcur.next(p, prefix);
        if (next_rows) {
          w_src += kRowTiles * 2048;
          s_src += kRowTiles * 256;
          bulk_rowtiles = block_rowtiles(lcur.unit());
        } else {
          l_entered = false;
        }
      }
    }
    ptx::cp_async_commit();  // possibly empty: keeps the group count in step
  };

  float acc[kRpw][kNt][4];
  auto zero_acc = [&] {
#pragma unroll
    for (int r = 0; r < kRpw; ++r)
#pragma unroll
      for (int j = 0; j < kNt; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[r][j][i] = 0.0f;
  };
  zero_acc();

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load_next(s);

  // Lane-constant shared-memory offsets, so that every load of the MMA loop is base + an
  // immediate. B: token n = 8 * (warp n8 tile) + g, 16-byte unit 8c + 2t + h of the row, stored
  // at unit 8c + ((2t + h) ^ g) (the swizzle: (unit ^ n) & 7 = (2t + h) ^ g since 8 | 8c, 8 | 8j).
  const int a_lane = (warp_row * kRpw) * 2048 + lane * 16;
  const int s_lane = Tr::kWeightBytes + (warp_row * kRpw) * 256 + lane * 8;
  const int b_lane0 = Tr::kWeightBytes + Tr::kScaleBytes + (warp_tok * kNt * 8 + g) * 512 + ((2 * t) ^ g) * 16;
  const int b_lane1 = Tr::kWeightBytes + Tr::kScaleBytes + (warp_tok * kNt * 8 + g) * 512 + ((2 * t + 1) ^ g) * 16;

  w4a16::UnitCursor<kTokens> ccur;  // the unit being computed
  ccur.seek(p, prefix, first_unit);
  int c_kg = first_kg;
  int k_e = -1;  // the expert whose global scales ka, kb hold
  float ka = 0.0f, kb = 0.0f;
  bool seg_from_unit_start = first_kg == 0;  // this CTA holds the current unit from its start
  int slot = 0;                              // stage slot of the iteration being computed
  uint32_t phase = 0;                        // sm_90+: bit s = parity of stage s's next completion
  for (int64_t left = iterations; left > 0; --left) {
    ptx::cp_async_wait<kStages - 2>();  // this thread's copies of this iteration have landed
    if constexpr (kBulk) {
      // ... and the stage's weights: one warp waits on the mbarrier (the others would spin,
      // taking issue slots from the MMAs); the barrier below passes the acquire on to all.
      if (warp == 0) w4a16::mbarrier_wait(&full[slot], (phase >> slot) & 1u);
      phase ^= 1u << slot;
    }
    __syncthreads();  // RAW: all threads' copies of it; WAR: the slot refilled next is consumed
    load_next(slot == 0 ? kStages - 1 : slot - 1);  // the slot consumed one iteration ago

    // ---- MMAs of one K group --------------------------------------------------------------
    {
      const uint8_t* st = smem + slot * Tr::kStageBytes;
      const uint8_t* wst = st + a_lane;
      uint2 sc8[kRpw];  // this lane's 8 scale bytes per row tile: chunk c -> bytes 2c, 2c+1
#pragma unroll
      for (int r = 0; r < kRpw; ++r) sc8[r] = ptx::ld_shared_v2(st + s_lane + r * 256);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        // A: 16 B per lane per row tile = 4 words, one per MMA k-step of this 64-K chunk.
        uint4 aw[kRpw];
        uint32_t sc[kRpw];  // rows g, g+8: the scale pair of this chunk (ue5m3_pair_to_bf16x2_scaled)
#pragma unroll
        for (int r = 0; r < kRpw; ++r) {
          aw[r] = ptx::ld_shared_v4(wst + r * 2048 + c * 512);
          sc[r] = chunk_scales(sc8[r], c);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // B: token g of n-tile j, K = 64c + 16t + 8h + [0, 8): MMA steps 2h and 2h+1.
          //   b[j].x,y: step 2h (k +0..3), b[j].z,w: step 2h+1 (k +4..7)
          const uint8_t* bst = st + (h == 0 ? b_lane0 : b_lane1) + c * 128;
          uint4 b[kNt];
#pragma unroll
          for (int j = 0; j < kNt; ++j) b[j] = ptx::ld_shared_v4(bst + j * 8 * 512);
          mma_half_chunk(acc, aw, sc, b, h);
        }
      }
    }
    slot = slot + 1 == kStages ? 0 : slot + 1;

    // ---- epilogue at the end of a unit (or of this CTA's range) ----------------------------
    const bool unit_end = c_kg + 1 == KG;
    c_kg = unit_end ? 0 : c_kg + 1;
    if (!unit_end && left != 1) continue;
    const int u = ccur.u;
    const w4a16::Unit cu = ccur.unit();
    if (unit_end) ccur.next(p, prefix);
    const int64_t unit_first = static_cast<int64_t>(u) * KG;
    const bool complete = seg_from_unit_start && unit_end;
    seg_from_unit_start = true;  // the next unit, if any, starts with this CTA's next iteration
    const int rt_base = cu.rb * kRowTiles + warp_row * kRpw;  // this warp's first global row tile

    if (!complete) {
      // Stream-K fix-up. Slot 2c holds CTA c's first (cut) unit, 2c+1 its last.
      float* mine = p.partials +
                    (static_cast<int64_t>(2 * blockIdx.x + (u == first_unit ? 0 : 1)) * Tr::kTileFloats +
                     tid * Tr::kFrag);
#pragma unroll
      for (int r = 0; r < kRpw; ++r)
#pragma unroll
        for (int j = 0; j < kNt; ++j)
          reinterpret_cast<float4*>(mine)[r * kNt + j] =
              make_float4(acc[r][j][0], acc[r][j][1], acc[r][j][2], acc[r][j][3]);
      // Release: the barrier orders every thread's partial before thread 0's arrival, whose
      // release makes them visible GPU-wide; its acquire, in the last CTA, makes the others'
      // partials visible before the barrier below (the CUTLASS semaphore pattern). One
      // acq_rel atomic instead of two __threadfence (MEMBAR.SC.GPU: at glm5-tp8, T = 1, 10% of
      // FC1's warp samples sat at the barrier behind that fence).
      __syncthreads();
      const int c_first = w4a16::cta_of(unit_first, W, G);
      const int c_last = w4a16::cta_of(unit_first + KG - 1, W, G);
      if (tid == 0) {
        const bool last = ptx::atomic_add_acq_rel_gpu(p.unit_counters + u, 1) == c_last - c_first;
        if (last) p.unit_counters[u] = 0;  // ready for the next launch
        unit_last = last;
      }
      __syncthreads();
      if (!unit_last) {
        zero_acc();
        continue;  // uniform across the CTA
      }
      zero_acc();
      // The partials in CTA order (bitwise reproducible), kBatch CTAs' loads in flight at once:
      // one at a time, a unit cut over 7 CTAs (glm5-tp8, T = 1) waited 7 L2 round trips.
      constexpr int kQuads = kRpw * kNt;  // float4 per thread per partial
      constexpr int kBatch = kQuads <= 2 ? 4 : kQuads <= 4 ? 2 : 1;
      for (int c0 = c_first; c0 <= c_last; c0 += kBatch) {
        float4 v[kBatch][kQuads];
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
          const int c = c0 + q;
          if (c > c_last) break;
          const int first_of_c = static_cast<int>(w4a16::range_begin(c, W, G) / KG);
          const float4* src = reinterpret_cast<const float4*>(
              p.partials + (static_cast<int64_t>(2 * c + (u == first_of_c ? 0 : 1)) * Tr::kTileFloats +
                            tid * Tr::kFrag));
#pragma unroll
          for (int i = 0; i < kQuads; ++i) v[q][i] = ptx::ld_cg(src + i);
        }
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
          if (c0 + q > c_last) break;
#pragma unroll
          for (int r = 0; r < kRpw; ++r)
#pragma unroll
            for (int j = 0; j < kNt; ++j) {
              const float4 x = v[q][r * kNt + j];
              acc[r][j][0] += x.x;
              acc[r][j][1] += x.y;
              acc[r][j][2] += x.z;
              acc[r][j][3] += x.w;
            }
        }
      }
    }

    // acc[r][j][i]: row = 16 * (rt_base + r) + g (+8 for i >= 2),
    //               token n = 8 * (warp_tok * kNt + j) + 2t + (i & 1).
    if (cu.e != k_e) {  // the global scales, loaded once per expert
      k_e = cu.e;
      ka = p.scale_a ? p.scale_a[k_e] * kDequantEpilogueFactor : kDequantEpilogueFactor;
      if constexpr (kT.epilogue == Epilogue::kSwiglu) kb = p.scale_b[k_e] * kDequantEpilogueFactor;
    }
    if constexpr (kT.epilogue == Epilogue::kSwiglu) {
      // Row tile q holds gate rows 8q..8q+7 (tile rows 0-7) and up rows 8q..8q+7 (8-15):
      // acc[..][0..1] is gate, acc[..][2..3] the matching up, for act column 8q + g.
#pragma unroll
      for (int r = 0; r < kRpw; ++r) {
        const int col = (rt_base + r) * 8 + g;
        const int64_t pos = p.act_fragment_order ? fragment_order_position(col) : col;
#pragma unroll
        for (int j = 0; j < kNt; ++j)
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int n = (warp_tok * kNt + j) * 8 + 2 * t + i;
            if (n < cu.ntok && col < p.act_cols) {
              const float gate = acc[r][j][i] * ka, up = acc[r][j][i + 2] * kb;
              p.act_out[static_cast<int64_t>(cu.tok0 + n) * p.act_stride + pos] =
                  w4a16::to_bf16_bits(w4a16::silu(gate) * up);
            }
          }
      }
    } else if constexpr (kT.epilogue == Epilogue::kNone) {
#pragma unroll
      for (int r = 0; r < kRpw; ++r)
#pragma unroll
        for (int j = 0; j < kNt; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int n = (warp_tok * kNt + j) * 8 + 2 * t + (i & 1);
            const int row = (rt_base + r) * 16 + g + (i >> 1) * 8;
            if (n < cu.ntok && row < p.rows)
              p.raw_out[static_cast<int64_t>(cu.tok0 + n) * rows_pad + row] = acc[r][j][i] * ka;
          }
    } else {
      // Finalize, phase 1: rows to rows_out[permuted row][row] (bf16); phase 2, the weighted sum
      // of each token's slots, is the next launch (kernels/moe/finalize_slots.h). Counting
      // arrivals per (token, row block) after every unit here instead, the CTA completing a token
      // summing it, cost 3 CTA barriers, a fence and an atomic round trip per unit: FC2 took
      // 287 / 618 / 931 us at T = 16 / 64 / 256 (glm5, H200) against 247 / 540 / 733 us in two
      // phases.
      // Each 8 x 8 block (8 rows, 8 tokens) is transposed across the warp (movmatrix, as in the
      // prefill family), after which lane (g, t) holds rows 2t, 2t + 1 (lo) and 8 + 2t, + 1 (hi)
      // of its row tile for token 8 j' + g: two 32-bit stores per block and lane under one
      // predicate, where a 16-bit store per value, each with its own row and token test and
      // 64-bit address, took ~100 instructions a warp per unit - and at glm5-tp8's K = 256 every
      // K group ends a unit. rows is a multiple of 16: a row tile is inside the matrix or wholly
      // past it. movmatrix needs every lane of the warp: only the stores are predicated.
#pragma unroll
      for (int j = 0; j < kNt; ++j) {
        const int n = (warp_tok * kNt + j) * 8 + g;  // this lane's token after the transposition
        uint16_t* dst = p.rows_out + static_cast<int64_t>(cu.tok0 + n) * p.rows + rt_base * 16 + 2 * t;
#pragma unroll
        for (int r = 0; r < kRpw; ++r) {
          const uint32_t lo = ptx::movmatrix_trans(w4a16::pack_bf16x2(acc[r][j][0] * ka, acc[r][j][1] * ka));
          const uint32_t hi = ptx::movmatrix_trans(w4a16::pack_bf16x2(acc[r][j][2] * ka, acc[r][j][3] * ka));
          if (n < cu.ntok && (rt_base + r) * 16 < p.rows) {
            reinterpret_cast<uint32_t*>(dst + r * 16)[0] = lo;
            reinterpret_cast<uint32_t*>(dst + r * 16 + 8)[0] = hi;
          }
        }
      }
    }
    zero_acc();
  }
  ptx::cp_async_wait<0>();  // nothing may be in flight when the CTA exits
  w4a16::sm_clock_exit(p.sm_clock);
}

}  // namespace fp4moe::kernels
