// sm80_w4a16_grouped_gemm.cuh - the decode-regime grouped GEMM (family w4a16_mma).
//
// NVFP4 weights are dequantized to BF16 in registers and multiplied on the BF16 tensor cores
// with mma.sync m16n8k16 (sm_80+: Ampere, Ada, Hopper, Blackwell sm_100/sm_120 alike), fp32
// accumulation. A and B are swapped: weight rows are the MMA's M side (16 per MMA tile), the
// expert's tokens its N side (8 per MMA tile), so 1-64 tokens per expert waste nothing.
//
// Work: a persistent grid walks "units" (expert, row block, K split, token tile), ordered so
// that units adjacent in the walk share weights (token tiles innermost): when an expert holds
// more tokens than a tile, the CTAs of its token tiles run side by side and the weights come
// from DRAM once. The per-expert token counts live on the device only: every CTA derives the
// unit prefix from expert_offsets in its prologue (no host round trip, graph-capturable).
//
// CTA = kWarps warps stacked along the rows; warp w owns row tiles [w*kRowTilesPerWarp, ...)
// and all tokens. Pipeline: kStages stages of one K group (256 K) each, filled by cp.async,
// Marlin-style: wait for stage i, barrier, refill the stage consumed one step earlier, compute.
//
// Shared memory map (dynamic; S = kStageBytes):
//   [s*S,                 + kRowTiles*2048)  weights of stage s: [rowtile][chunk][lane][16 B]
//   [s*S + kWeightBytes,  + kRowTiles*256)   block scales:       [rowtile][lane][8 B]
//   [s*S + kW + kS,       + kTokens*512)     tokens:             [token][256 K bf16], 16-byte
//                                            units XOR-swizzled by (token & 7) within 128 B
//   [kStages*S, + 4*(E+1))                   unit prefix per expert (scheduler)
// Static: token row pointers of the current unit, epilogue flags.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "fp4moe/tactic.h"
#include "kernels/common/dequant_nvfp4.cuh"
#include "kernels/common/ptx.cuh"
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
  static constexpr int kRowTilesPerWarp = kRowTiles / kWarps;
  static constexpr int kTokenTiles = kTokens / 8;
  static constexpr int kKGroup = 256;
  static constexpr int kWeightBytes = kRowTiles * 2048;
  static constexpr int kScaleBytes = kRowTiles * 256;
  static constexpr int kTokenBytes = kTokens * kKGroup * 2;
  static constexpr int kStageBytes = kWeightBytes + kScaleBytes + kTokenBytes;
  static constexpr int kTokenChunks = kTokens * (kKGroup * 2 / 16);  // 16-byte units per stage
  static constexpr int kTokenChunksPerThread = kTokenChunks / kThreads;

  static_assert(kT.family == Family::kW4a16Mma, "w4a16_mma kernel instantiated for another family");
  static_assert(kT.tile_k == kKGroup, "one pipeline stage holds one prepacked K group of 256");
  static_assert(kRows % 16 == 0, "rows come in MMA tiles of 16");
  static_assert(kRowTiles % kWarps == 0, "every warp owns the same number of row tiles");
  static_assert(kTokens % 8 == 0 && kTokens >= 8 && kTokens <= 64, "token tile: n8 MMA tiles, 8..64");
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  static_assert(kTokenChunks % kThreads == 0, "token copies split evenly over the threads");
  static_assert(kRowTiles * 128 % kThreads == 0, "weight copies split evenly over the threads");
  static_assert(kRowTiles * 16 <= kThreads, "one thread per 16-byte scale copy");
  static_assert(kStageBytes % 128 == 0, "stages stay 128-byte aligned");
  static_assert(kT.epilogue != Epilogue::kSwiglu || kRows % 16 == 0,
                "SwiGLU pairs gate rows 0-7 with up rows 8-15 of every MMA tile");

  // Dynamic shared memory for `experts` groups.
  static constexpr int dynamic_smem_bytes(int experts) {
    return kStages * kStageBytes + ((4 * (experts + 1) + 127) / 128) * 128;
  }
};

namespace w4a16 {

// Exclusive prefix of per-expert unit counts into prefix[0..experts] (prefix[experts] = total).
// One pass: each thread sums a contiguous chunk, a warp-level scan combines the chunk sums.
template <int kThreads>
__device__ void unit_prefix(int* prefix, const int* offsets, int experts, int tokens_per_tile,
                            int units_per_tile, int* warp_sums) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per_thread = (experts + kThreads - 1) / kThreads;
  const int begin = min(tid * per_thread, experts), end = min(begin + per_thread, experts);
  int local = 0;
  for (int e = begin; e < end; ++e) {
    const int n = offsets[e + 1] - offsets[e];
    local += (n + tokens_per_tile - 1) / tokens_per_tile * units_per_tile;
  }
  int incl = local;  // inclusive scan across the warp
  for (int d = 1; d < 32; d <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();  // RAW: warp totals
  int warp_base = 0;
  for (int w = 0; w < warp; ++w) warp_base += warp_sums[w];
  int run = warp_base + incl - local;  // exclusive start of this thread's chunk
  for (int e = begin; e < end; ++e) {
    prefix[e] = run;
    const int n = offsets[e + 1] - offsets[e];
    run += (n + tokens_per_tile - 1) / tokens_per_tile * units_per_tile;
  }
  if (tid == kThreads - 1) prefix[experts] = run;
  __syncthreads();  // RAW: the prefix is read by every thread
}

// The expert whose unit range holds u: the last e with prefix[e] <= u (prefix is sorted).
__device__ __forceinline__ int find_expert(const int* prefix, int experts, int u) {
  int lo = 0, hi = experts;  // prefix[lo] <= u < prefix[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= u) lo = mid; else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + __expf(-v)); }

__device__ __forceinline__ uint16_t to_bf16_bits(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  return *reinterpret_cast<const uint16_t*>(&b);
}

}  // namespace w4a16

// kCode = encode_tactic(tactic) (see the NOTES in fp4moe/tactic.h).
template <unsigned long long kCode>
__global__ void __launch_bounds__(decode_tactic(kCode).warps * 32)
    w4a16_grouped_gemm_kernel(const W4a16GemmParams p) {
  constexpr Tactic kT = decode_tactic(kCode);
  using Tr = W4a16Traits<kT>;
  constexpr int kRows = Tr::kRows, kTokens = Tr::kTokens, kStages = Tr::kStages;
  constexpr int kThreads = Tr::kThreads, kRowTiles = Tr::kRowTiles;
  constexpr int kRpw = Tr::kRowTilesPerWarp, kNt = Tr::kTokenTiles;

  extern __shared__ __align__(128) uint8_t smem[];
  int* prefix = reinterpret_cast<int*>(smem + kStages * Tr::kStageBytes);
  __shared__ const uint16_t* token_src[kTokens];  // x row of each token of the unit (or null)
  __shared__ int warp_sums[kT.warps];
  __shared__ int finished_token[kTokens];         // finalize: token completed by this CTA, or -1
  __shared__ int split_last;                      // split-K: this CTA reduces the tile

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // MMA fragment coordinates
  const int experts = p.num_experts, split = p.split_k;
  const int row_blocks = (p.rowtiles + kRowTiles - 1) / kRowTiles;
  const int units_per_tile = row_blocks * split;
  const int64_t expert_wbytes = static_cast<int64_t>(p.rowtiles) * p.kgroups * 2048;
  const int64_t expert_sbytes = static_cast<int64_t>(p.rowtiles) * p.kgroups * 256;
  const int rows_pad = p.rowtiles * 16;

  w4a16::unit_prefix<kThreads>(prefix, p.expert_offsets, experts, kTokens, units_per_tile,
                               warp_sums);
  const int total_units = prefix[experts];

  for (int u = blockIdx.x; u < total_units; u += gridDim.x) {
    // ---- decode the unit: expert, row block, split, token tile (innermost) ----------------
    const int e = w4a16::find_expert(prefix, experts, u);
    const int row0_e = p.expert_offsets[e];
    const int n_e = p.expert_offsets[e + 1] - row0_e;
    const int tiles_e = (n_e + kTokens - 1) / kTokens;
    const int local = u - prefix[e];
    const int tt = local % tiles_e;
    const int s = (local / tiles_e) % split;
    const int rb = local / (tiles_e * split);
    const int tok0 = row0_e + tt * kTokens;  // first permuted row of the tile
    const int ntok = min(kTokens, n_e - tt * kTokens);
    const int kg_begin = static_cast<int>(static_cast<int64_t>(p.kgroups) * s / split);
    const int kg_end = static_cast<int>(static_cast<int64_t>(p.kgroups) * (s + 1) / split);
    const int nk = kg_end - kg_begin;

    for (int n = tid; n < kTokens; n += kThreads) {
      const uint16_t* src = nullptr;
      if (n < ntok) {
        const int xr = p.gather ? p.gather[tok0 + n] : tok0 + n;
        src = p.x + static_cast<int64_t>(xr) * p.x_stride;
      }
      token_src[n] = src;
    }
    __syncthreads();  // RAW: token_src; WAR: the previous unit's epilogue is done with smem

    const uint8_t* wbase = p.weights + e * expert_wbytes;
    const uint8_t* sbase = p.scales + e * expert_sbytes;

    // ---- stage loader: weights, scales and tokens of K group kg into stage slot ------------
    auto load_stage = [&](int slot, int kg) {
      uint8_t* st = smem + slot * Tr::kStageBytes;
      // Weights: kRowTiles x 2048 B, contiguous per row tile in global memory.
#pragma unroll
      for (int i = 0; i < kRowTiles * 128 / kThreads; ++i) {
        const int c = tid + i * kThreads;  // 16-byte unit
        const int rt = c >> 7, within = c & 127;
        const int grt = rb * kRowTiles + rt;
        uint8_t* dst = st + rt * 2048 + within * 16;
        if (grt < p.rowtiles) {
          ptx::cp_async_16(dst, wbase + (static_cast<int64_t>(grt) * p.kgroups + kg) * 2048 + within * 16,
                           true);
        } else {
          ptx::cp_async_16(dst, wbase, false);  // zero rows past the matrix
        }
        // NOTES: an L2 evict-first policy (createpolicy.fractional + cp.async.L2::cache_hint)
        // made the kernel die with "illegal instruction" on the H200 with nvcc 13.0 (a known
        // ptxas problem with fractional policies on cp.async); plain cp.async.cg is used.
      }
      // Scales: kRowTiles x 256 B.
      if (tid < kRowTiles * 16) {
        const int rt = tid >> 4, within = tid & 15;
        const int grt = rb * kRowTiles + rt;
        uint8_t* dst = st + Tr::kWeightBytes + rt * 256 + within * 16;
        ptx::cp_async_16(dst,
                         sbase + (static_cast<int64_t>(min(grt, p.rowtiles - 1)) * p.kgroups + kg) *
                                     256 + within * 16,
                         grt < p.rowtiles);
      }
      // Tokens: kTokens rows x 32 units of 16 B (8 bf16), swizzled.
      uint8_t* tok = st + Tr::kWeightBytes + Tr::kScaleBytes;
#pragma unroll
      for (int i = 0; i < Tr::kTokenChunksPerThread; ++i) {
        const int c = tid + i * kThreads;
        const int n = c >> 5, unit = c & 31;
        const int kel = kg * 256 + unit * 8;
        const uint16_t* src = token_src[n];
        const bool valid = src != nullptr && kel < p.k;
        const int phys = (unit & ~7) | ((unit ^ n) & 7);
        ptx::cp_async_16(tok + n * 512 + phys * 16, valid ? src + kel : p.x, valid);
      }
    };

    float acc[kRpw][kNt][4];
#pragma unroll
    for (int r = 0; r < kRpw; ++r)
#pragma unroll
      for (int j = 0; j < kNt; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[r][j][i] = 0.0f;

    // ---- mainloop ---------------------------------------------------------------------------
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
      if (i < nk) load_stage(i, kg_begin + i);
      ptx::cp_async_commit();
    }
    for (int ki = 0; ki < nk; ++ki) {
      ptx::cp_async_wait<kStages - 2>();  // this thread's copies of stage ki have landed
      __syncthreads();  // RAW: all threads' copies of stage ki; WAR: stage ki-1 is consumed
      if (ki + kStages - 1 < nk) load_stage((ki + kStages - 1) % kStages, kg_begin + ki + kStages - 1);
      ptx::cp_async_commit();  // possibly empty: keeps the group count in step

      const uint8_t* st = smem + (ki % kStages) * Tr::kStageBytes;
      const uint8_t* wst = st + (warp * kRpw) * 2048;
      const uint8_t* sst = st + Tr::kWeightBytes + (warp * kRpw) * 256;
      const uint8_t* tst = st + Tr::kWeightBytes + Tr::kScaleBytes;
      uint2 sc8[kRpw];  // this lane's 8 scale bytes per row tile: chunk c -> bytes 2c, 2c+1
#pragma unroll
      for (int r = 0; r < kRpw; ++r) sc8[r] = ptx::ld_shared_v2(sst + r * 256 + lane * 8);

#pragma unroll
      for (int c = 0; c < 4; ++c) {
        // A: 16 B per lane per row tile = 4 words, one per MMA k-step of this 64-K chunk.
        uint4 aw[kRpw];
        uint32_t sg[kRpw], sg8[kRpw];
#pragma unroll
        for (int r = 0; r < kRpw; ++r) {
          aw[r] = ptx::ld_shared_v4(wst + r * 2048 + c * 512 + lane * 16);
          const uint32_t word = c < 2 ? sc8[r].x : sc8[r].y;
          const int shift = (c & 1) * 16;
          sg[r] = e4m3_to_bf16x2_scaled(word >> shift);
          sg8[r] = e4m3_to_bf16x2_scaled(word >> (shift + 8));
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // B: token g of n-tile j, K = 64c + 16t + 8h + [0, 8): steps 2h and 2h+1.
          //   b[j].x,y: step 2h (k +0..3), b[j].z,w: step 2h+1 (k +4..7)
          uint4 b[kNt];
#pragma unroll
          for (int j = 0; j < kNt; ++j) {
            const int n = j * 8 + g;
            const int unit = c * 8 + 2 * t + h;
            const int phys = (unit & ~7) | ((unit ^ n) & 7);
            b[j] = ptx::ld_shared_v4(tst + n * 512 + phys * 16);
          }
#pragma unroll
          for (int s2 = 0; s2 < 2; ++s2) {
            const int step = 2 * h + s2;
#pragma unroll
            for (int r = 0; r < kRpw; ++r) {
              const uint32_t w = step == 0 ? aw[r].x : step == 1 ? aw[r].y : step == 2 ? aw[r].z : aw[r].w;
              uint32_t a[4];
              dequant_a_fragment(w, sg[r], sg8[r], a);
#pragma unroll
              for (int j = 0; j < kNt; ++j) {
                if (s2 == 0) ptx::mma_bf16_m16n8k16(acc[r][j], a, b[j].x, b[j].y);
                else ptx::mma_bf16_m16n8k16(acc[r][j], a, b[j].z, b[j].w);
              }
            }
          }
        }
      }
    }
    ptx::cp_async_wait<0>();  // drain the (empty) trailing groups before smem is reused

    // ---- epilogue -----------------------------------------------------------------------------
    // acc[r][j][i]: row = tile row base + g (+8 for i >= 2), token n = 8j + 2t + (i & 1).
    const int rt_base = rb * kRowTiles + warp * kRpw;  // this warp's first global row tile
    const float ka = p.scale_a ? p.scale_a[e] * kDequantEpilogueFactor : kDequantEpilogueFactor;

    if constexpr (kT.epilogue == Epilogue::kFinalize) {
      // Weighted rows to rows_out[s][permuted row][row]; then arrivals per (token, row block):
      // the CTA that completes a token sums its slots (and splits) in a fixed order.
#pragma unroll
      for (int r = 0; r < kRpw; ++r)
#pragma unroll
        for (int j = 0; j < kNt; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int n = j * 8 + 2 * t + (i & 1);
            const int row = (rt_base + r) * 16 + g + (i >> 1) * 8;
            if (n < ntok && row < p.rows) {
              const int pr = tok0 + n;
              p.rows_out[(static_cast<int64_t>(s) * p.partial_rows + pr) * p.rows + row] =
                  acc[r][j][i] * ka * p.row_weight[pr];
            }
          }
      __threadfence();  // release: the rows are visible before the arrival is counted
      __syncthreads();
      const int target = p.slots * split;
      for (int n = tid; n < kTokens; n += kThreads) {
        int done = -1;
        if (n < ntok) {
          const int token = p.row_token[tok0 + n];
          int* counter = p.token_counters + static_cast<int64_t>(token) * row_blocks + rb;
          if (atomicAdd(counter, 1) == target - 1) {
            *counter = 0;  // ready for the next launch
            done = token;
          }
        }
        finished_token[n] = done;
      }
      __syncthreads();
      __threadfence();  // acquire: the other arrivals' rows are read below
      for (int n = 0; n < ntok; ++n) {
        const int token = finished_token[n];
        if (token < 0) continue;
        for (int row_in = tid; row_in < kRows; row_in += kThreads) {
          const int row = rb * kRows + row_in;
          if (row >= p.rows) break;
          float sum = 0.0f;
          for (int slot = 0; slot < p.slots; ++slot) {
            const int pr = p.pair_row[static_cast<int64_t>(token) * p.slots + slot];
            for (int ss = 0; ss < split; ++ss)
              sum += ptx::ld_cg(p.rows_out + (static_cast<int64_t>(ss) * p.partial_rows + pr) * p.rows + row);
          }
          p.out[static_cast<int64_t>(token) * p.rows + row] = w4a16::to_bf16_bits(sum);
        }
      }
    } else {
      // none / swiglu: with split-K, partials go to the workspace and the last split of the
      // tile sums them (in split order) into acc before the epilogue proper.
      if (split > 1) {
#pragma unroll
        for (int r = 0; r < kRpw; ++r)
#pragma unroll
          for (int j = 0; j < kNt; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int n = j * 8 + 2 * t + (i & 1);
              const int row = (rt_base + r) * 16 + g + (i >> 1) * 8;
              if (n < ntok)
                p.partials[(static_cast<int64_t>(s) * p.partial_rows + tok0 + n) * rows_pad + row] =
                    acc[r][j][i];
            }
        __threadfence();  // release
        __syncthreads();
        if (tid == 0) {
          const int tile = prefix[e] / split + rb * tiles_e + tt;
          const bool last = atomicAdd(p.tile_counters + tile, 1) == split - 1;
          if (last) p.tile_counters[tile] = 0;
          split_last = last;
        }
        __syncthreads();
        if (!split_last) continue;  // uniform across the CTA
        __threadfence();  // acquire
#pragma unroll
        for (int r = 0; r < kRpw; ++r)
#pragma unroll
          for (int j = 0; j < kNt; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int n = j * 8 + 2 * t + (i & 1);
              const int row = (rt_base + r) * 16 + g + (i >> 1) * 8;
              float sum = 0.0f;
              if (n < ntok)
                for (int ss = 0; ss < split; ++ss)
                  sum += ptx::ld_cg(p.partials +
                                    (static_cast<int64_t>(ss) * p.partial_rows + tok0 + n) * rows_pad + row);
              acc[r][j][i] = sum;
            }
      }
      if constexpr (kT.epilogue == Epilogue::kSwiglu) {
        // Row tile q holds gate rows 8q..8q+7 (tile rows 0-7) and up rows 8q..8q+7 (8-15):
        // acc[..][0..1] is gate, acc[..][2..3] the matching up, for act column 8q + g.
        const float kb = p.scale_b[e] * kDequantEpilogueFactor;
#pragma unroll
        for (int r = 0; r < kRpw; ++r) {
          const int col = (rt_base + r) * 8 + g;
#pragma unroll
          for (int j = 0; j < kNt; ++j)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              const int n = j * 8 + 2 * t + i;
              if (n < ntok && col < p.act_cols) {
                const float gate = acc[r][j][i] * ka, up = acc[r][j][i + 2] * kb;
                p.act_out[static_cast<int64_t>(tok0 + n) * p.act_cols + col] =
                    w4a16::to_bf16_bits(w4a16::silu(gate) * up);
              }
            }
        }
      } else {
#pragma unroll
        for (int r = 0; r < kRpw; ++r)
#pragma unroll
          for (int j = 0; j < kNt; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int n = j * 8 + 2 * t + (i & 1);
              const int row = (rt_base + r) * 16 + g + (i >> 1) * 8;
              if (n < ntok && row < p.rows)
                p.raw_out[static_cast<int64_t>(tok0 + n) * rows_pad + row] = acc[r][j][i] * ka;
            }
      }
    }
  }
}

}  // namespace fp4moe::kernels
