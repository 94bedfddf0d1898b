// sm90_w4a16_wgmma_grouped_gemm.cuh - the prefill-regime grouped GEMM (family w4a16_wgmma,
// sm_90a only).
//
// Same numerics and operands as the decode family (sm80_w4a16_grouped_gemm.cuh): out^T = W . X^T
// with NVFP4 weights W prepacked in kernel order (prepack_layout.h), bf16 tokens X, fp32
// accumulation, the swiglu and finalize epilogues. What changes is the engine, for hundreds of
// tokens per expert where the tensor cores, not the weight bytes, set the pace:
//
//   - wgmma m64nNk16 (N = the token tile, 64..256; an expert's partial last tile runs at the
//     narrowest of a list of widths that holds it, and its tokens come in a box of exactly that
//     many rows)
//     with the weights as the register operand A and the tokens in 128-byte swizzled K-major
//     shared memory (64 K per row);
//   - one producer warp feeds a ring of kStages stages through the copy engine: the tokens by
//     cp.async.bulk.tensor (one box of N contiguous rows; the layer stores them in fragment
//     order, kernels/common/fragment_order.h), the raw FP4 weights by a 3-D tensor copy (chunk c
//     of the row block's 8 (12) consecutive (row tile, K group) blocks of the K-group-major prepack)
//     and their block scales by a plain bulk copy;
//   - two consumer warpgroups (three in the 192-row tile, four in the 256-row ones), 64 weight
//     rows each. A consumer thread loads its 16-byte word group of the stage, dequantizes it
//     into the 4 A fragments of the stage's 4 k steps (the decode family's bit trick) and issues
//     the 4 wgmma; they run asynchronously while the same warps dequantize the next stage into
//     the other of two register buffers (one in the 192 x 176 and 256 x 128 tiles: kFragBufs);
//     a stage of the 256 x 64 tile may hold 128 or 256 K (kChunks = 2 or 4: per 64-K chunk a
//     token block and a weight block, dequantized into the two buffers in turn), one of the
//     192 x 176 tile 128 K (its one buffer refilled per chunk, once the chunk's wgmma have
//     retired), so that the stage's wait, slot and release are paid once per 128 (256) K;
//     the unit comes to them through a lane-0 shuffle, so that ptxas keeps their bookkeeping and
//     the wgmma descriptors in the uniform datapath; the epilogues transpose each 8 x 8
//     accumulator block across the warp (movmatrix) and store 32-bit words of one token;
//   - persistent CTAs (one per SM, two for the 64-token tile where they fit: kCtasPerSm) take
//     the units (expert, token tile, row block) in order from a global ticket counter, so
//     units start in order however long each took (a static stride drifts apart: an expert's
//     last, narrow tile finishes early). Consecutive units are the row blocks of one token
//     tile: the CTAs reading the same tokens run together and find them in L2 (the token tile,
//     8x the bytes of a weight tile per stage, is the traffic to share). The pipeline runs on
//     across unit boundaries, so a unit's epilogue overlaps the next unit's loads; the
//     producer passes each unit, decoded and with its expert's global scales, to the consumers
//     in a ring beside the stages;
//   - FC2's finalize is the kernel's second phase: the consumers store their rows (unweighted)
//     as units complete; once every unit's rows are out (a count of units, not of CTAs: it holds
//     whether or not the whole grid is resident), the consumers of every CTA sum each token's slots
//     in slot order (bitwise reproducible) - a coalesced pass over the rows that keeps every
//     SM's loads in flight, where per-unit arrival counting would serialize on latency.
//
// Why the register form of A: the dequantized weights never touch shared memory (no stores, no
// proxy fence, no barrier among the warpgroup's warps before its MMAs, and the tensor cores read
// only the token tile from shared memory). The price is the tokens' order: a register fragment
// pairs lane t with k slots {2t, 2t+1, 2t+8, 2t+9} of a step, while the prepacked word of lane t
// holds 4 consecutive K of its own 16-K block (the decode family's order, one block scale per
// lane and chunk). Rather than a second weight layout, the token rows are permuted at 4-byte
// granularity where they are written anyway (FC1's gather, FC1's epilogue for FC2), which the
// copy engine could not do.
//
// Barriers per stage: full[s] (the producer's expect_tx arrival + the copies' bytes) and
// empty[s] (every consumer thread, once the wgmma that read the stage have completed).
//
// Shared memory (dynamic, aligned up to 1024 B at run time; S = kStageBytes; C = kChunks):
//   [s*S,            + C*N*128)      B: per 64-K chunk N token rows x 128 B (bf16, swizzled by
//                                    the copy engine)
//   [.. ,            + C*R*512)      raw weights: per chunk R row tiles (8, 12 or 16) x 512 B
//   [.. ,            + R*256)        raw block scales: R row tiles x 256 B (the whole K group;
//                                    copied with its first chunk's stage only)
//   [kStages*S, ...)                 full/empty barriers, unit per stage, unit prefix, scan sums
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "fp4moe/tactic.h"
#include "kernels/common/compiled_arch.cuh"
#include "kernels/common/dequant_nvfp4.cuh"
#include "kernels/common/fragment_order.h"
#include "kernels/common/ptx.cuh"
#include "kernels/common/sm90_ptx.cuh"
#include "kernels/common/sm90_wgmma_rs.cuh"
#include "kernels/gemm/grouped_units.cuh"
#include "kernels/gemm/w4a16_params.h"
#include "kernels/moe/routing.cuh"

namespace fp4moe::kernels {

// The width a unit runs at: the narrowest of its tile's list (W4a16WgmmaTraits::Widths) that
// holds its tokens. An expert's last tile is usually partial, and the tensor cores' time is
// proportional to N: with uniform routing an expert of glm5 holds 128 +- 11 tokens at T = 4096,
// and with the widths 32, 64, 128, 192 and 256 alone 23% of the MMA work there was on empty
// columns. The lists step by 8 (wgmma's granularity) where the partial tiles of the default
// sweep fall and coarser elsewhere: ptxas keeps the 128 accumulators of the 256-token tile in
// registers with these 16 widths, not with all 32 multiples of 8 (local memory, spills). The
// token rows come in a box of exactly the width (one tensor map per width): the kernel is bound
// by what it reads from L2 per MMA (the token tile is ~3/4 of a stage's bytes), and boxes of a
// multiple of 32 rows read ~10% more token bytes than the widths use at T = 4096.
inline constexpr int kWgmmaMaxWidths = 16;  // tensor maps of token boxes a kernel holds

// The widths a tile's units run at (ascending, multiples of 8, the last the tile's).
template <int... kWidths>
struct WgmmaWidths {
  static constexpr int kCount = sizeof...(kWidths);
  __host__ __device__ static constexpr int at(int i) {
    constexpr int kList[] = {kWidths...};
    return kList[i];
  }
  // The narrowest width that holds `tokens` (at most the tile's); a fold, not a loop over an
  // array, which device code would keep in local memory.
  __host__ __device__ static constexpr int narrowest(int tokens) {
    int w = at(kCount - 1);
    ((w = kWidths >= tokens && kWidths < w ? kWidths : w), ...);
    return w;
  }
  // Its index in the list (the tensor map of its token box).
  __host__ __device__ static constexpr int index_of(int width) {
    int i = 0;
    ((i += kWidths < width ? 1 : 0), ...);
    return i;
  }

  // Ascending multiples of 8 in [8, 256] (wgmma's N), and narrowest() picks each of them for the
  // token counts it covers.
  static constexpr bool valid() {
    for (int i = 0; i < kCount; ++i) {
      if (at(i) % 8 != 0 || at(i) < 8 || at(i) > 256 || (i > 0 && at(i) <= at(i - 1))) return false;
      if (narrowest(at(i)) != at(i) || narrowest(i > 0 ? at(i - 1) + 1 : 1) != at(i)) return false;
      if (index_of(at(i)) != i) return false;
    }
    return true;
  }

  // Calls f(std::integral_constant<int, i>) with i the index of narrowest(tokens), by bisection.
  template <int kLo = 0, int kHi = kCount - 1, class F>
  __device__ __forceinline__ static void dispatch(int tokens, F&& f) {
    if constexpr (kLo == kHi) {
      f(std::integral_constant<int, kLo>{});
    } else {
      constexpr int kMid = (kLo + kHi) / 2;
      if (tokens <= at(kMid))
        dispatch<kLo, kMid>(tokens, f);
      else
        dispatch<kMid + 1, kHi>(tokens, f);
    }
  }

  // Issues one stage's 4 wgmma at the width of index kI (chosen by the caller, as dispatch does).
  template <int kI, int kAcc>
  __device__ __forceinline__ static void issue_at(float (&acc)[kAcc], uint32_t (&a)[4][4], uint32_t desc_lo,
                                                  bool first) {
    issue<kI, kI>(at(kI), acc, a, desc_lo, first);
  }

  // Issues one stage's 4 wgmma (k steps of 16) at narrowest(tokens), picked by bisection; each
  // width's whole fence-issue-commit sequence in its own branch (a branch between the wgmma
  // serializes them).
  template <int kLo = 0, int kHi = kCount - 1, int kAcc>
  __device__ __forceinline__ static void issue(int tokens, float (&acc)[kAcc], uint32_t (&a)[4][4],
                                               uint32_t desc_lo, bool first) {
    namespace sm90 = ptx::sm90;
    if constexpr (kLo == kHi) {
      sm90::wgmma_fence_operands(acc);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) sm90::wgmma_fence_operands(a[kk]);
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        sm90::WgmmaRs<at(kLo)>::mma(acc, a[kk], sm90::wgmma_desc_k_sw128(desc_lo + 2 * kk),
                                    static_cast<uint32_t>(!first || kk > 0));
      sm90::wgmma_commit();
    } else {
      constexpr int kMid = (kLo + kHi) / 2;
      constexpr int kMidWidth = at(kMid);
      if (tokens <= kMidWidth)
        issue<kLo, kMid>(tokens, acc, a, desc_lo, first);
      else
        issue<kMid + 1, kHi>(tokens, acc, a, desc_lo, first);
    }
  }
};

// What the producer hands the consumers beside the first stage of a unit: the unit, decoded, and
// its expert's global scales. The consumers decoded it again themselves (a binary search over the
// unit prefix, two global loads) and loaded the scales in the epilogue: a chain of L2 round trips
// at every unit boundary, while both warpgroups' tensor work waits - FC2's units are 32 stages
// (glm5, K = 2048), and they took 1.23x FC1's time per FLOP.
struct WgmmaUnitEntry {
  w4a16::Unit unit;  // unit.e = -1: the producer is out of units
  float ka, kb;      // the global scales x kDequantEpilogueFactor (FC1: gate, up; FC2: ka)
  int pad[2];        // 32 B: two aligned vector loads; the last entry: FC2's units taken, in all
};
static_assert(sizeof(WgmmaUnitEntry) == 32, "the resource model counts 32 B of unit ring per stage");

// The kernel's tensor maps: the prepacked weights (a box = one 64-K chunk of a row block's 8 row
// tiles), and the tokens, one map per width of the tile (tokens[i]: Widths::at(i) rows x 64 K;
// those past the tile's list are left empty).
struct WgmmaMaps {
  CUtensorMap weights;
  CUtensorMap tokens[kWgmmaMaxWidths];
};

template <Tactic kT>
struct W4a16WgmmaTraits {
  static constexpr int kRows = kT.tile_rows;
  static constexpr int kTokens = kT.tile_tokens;
  static constexpr int kStageK = kT.tile_k;
  static constexpr int kStages = kT.stages;
  static constexpr int kThreads = kT.warps * 32;
  static constexpr int kConsumers = kRows / 64;  // warpgroups of 64 weight rows
  static constexpr int kRowTiles = kRows / 16;
  // A stage holds kChunks 64-K chunks (one; two or four in the 128- and 256-K tiles): per chunk a block of
  // kTokens 128-byte token rows and one of raw weights, kChunks blocks each side by side.
  static constexpr int kChunks = kStageK / 64;
  static constexpr int kBChunkBytes = kTokens * 128;
  static constexpr int kRawChunkBytes = kRowTiles * 512;  // FP4 codes of one 64-K chunk
  static constexpr int kBBytes = kBChunkBytes * kChunks;
  static constexpr int kRawBytes = kRawChunkBytes * kChunks;
  static constexpr int kScaleBytes = kRowTiles * 256;  // UE5M3 scales of one K group
  static constexpr int kStageBytes = kBBytes + kRawBytes + kScaleBytes;
  static constexpr int kAccum = kTokens / 2;           // fp32 accumulators per consumer thread
  // Stages per unit. Evaluated where it is used, from the kernel parameter: computed once
  // before the warp roles split, ptxas kept it in a register across setmaxnreg and spilled it.
  __host__ __device__ static constexpr int k_steps(int k) { return (k + kStageK - 1) / kStageK; }
  // The widths units run at (see WgmmaWidths and the comment above it).
  using Widths = std::conditional_t<
      kTokens == 64, WgmmaWidths<16, 24, 32, 40, 48, 56, 64>,
      std::conditional_t<
          kTokens == 128, WgmmaWidths<16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 112, 128>,
          std::conditional_t<
              kTokens == 144, WgmmaWidths<16, 32, 48, 64, 80, 96, 104, 112, 120, 128, 136, 144>,
              std::conditional_t<kTokens == 176, WgmmaWidths<16, 32, 48, 64, 96, 112, 128, 136, 144, 152, 160, 168, 176>,
                                 WgmmaWidths<16, 32, 48, 64, 96, 112, 128, 136, 144, 152, 160, 168, 176, 192, 224,
                                             256>>>>>;

  static_assert(kT.family == Family::kW4a16Wgmma, "w4a16_wgmma kernel instantiated for another family");
  static_assert(kRows == 128 || kRows == 192 || kRows == 256, "two to four consumer warpgroups of 64 rows");
  static_assert(kStageK == 64 || kStageK == 128 || kStageK == 256,
                "one, two or four 128-byte swizzled rows of bf16 per token and stage (a K group's chunks)");
  static_assert(kT.warps == 4 * (1 + kConsumers), "a producer warpgroup and a consumer warpgroup per 64 rows");
  static_assert(kRows == 128   ? (kTokens == 64 || kTokens == 128 || kTokens == 256)
                : kRows == 192 ? (kTokens == 144 || kTokens == 176)
                               : (kTokens == 64 || kTokens == 128),
                "wgmma N of 64, 128 or 256 with two consumer warpgroups, 144 or 176 with three, 64 or 128 with four "
                "(registers)");
  static_assert(kT.split_k == 1, "persistent tiles: no split-K");
  static_assert(kT.epilogue == Epilogue::kSwiglu || kT.epilogue == Epilogue::kFinalize,
                "the prefill family serves FC1 (swiglu) and FC2 (finalize) only");
  static_assert(kStageBytes % 1024 == 0, "stages keep the swizzled tiles 1024-byte aligned");
  static_assert(Widths::valid() && Widths::at(Widths::kCount - 1) == kTokens,
                "the widths: ascending multiples of 8 that end at the tile");
  static_assert(Widths::kCount <= kWgmmaMaxWidths, "a token box tensor map per width");

  // Beyond the stages: 2 barriers per stage; the unit ring (the unit a stage starts, a
  // WgmmaUnitEntry per stage); the unit prefix (4 B per group + 1); the scan's warp sums. The
  // first 1024 bytes are slack for aligning the dynamic allocation.
  static constexpr int kAlignSlack = 1024;
  static constexpr int kBarrierBytes = kStages * 2 * 8;
  static constexpr int kUnitRingBytes = kStages * static_cast<int>(sizeof(WgmmaUnitEntry));
  static constexpr int prefix_bytes(int experts) { return ((4 * (experts + 1) + 15) / 16) * 16; }
  static constexpr int kSchedulerScratch = ((4 * (kT.warps + 1) + 15) / 16) * 16;
  static constexpr int dynamic_smem_bytes(int experts) {
    return kAlignSlack + kStages * kStageBytes + kBarrierBytes + kUnitRingBytes + prefix_bytes(experts) +
           kSchedulerScratch;
  }

  // CTAs per SM. A consumer's stage is a dependent chain (wait for the stage, load and
  // dequantize, four wgmma, retire the previous stage) that two warpgroups per SM do not hide
  // when the wgmma are short: at 32 tokens per expert a stage took ~5x its tensor time (ncu,
  // glm5, T = 1024, m128n128: 746 cycles a stage, 144 of them tensor work; issue 42% busy). So
  // where two CTAs' stages fit in an SM's shared memory (the H200's 228 KB, 1 KB reserved per
  // CTA) and their registers in its 64 K, two share it: four consumer warpgroups. That is the
  // 64-token tile with 7 stages: 65536 / (2 x 384) = 80 registers at launch, and ptxas fits its
  // consumers (32 accumulators, two stages of A fragments, 32) in them without spilling. (The
  // 128-token tile's 64 accumulators do not: ptxas stops at its wgmma, "insufficient registers
  // (80)", even with one fragment buffer.) setmaxnreg keeps the one-CTA split (168 at launch,
  // producers 40, consumers 232) and moves 32 / 104 here ((80 - 32) x 128 = (104 - 80) x 256).
  static constexpr int kCtasPerSm =
      kConsumers == 2 && kTokens == 64 && two_ctas_fit(dynamic_smem_bytes(kMaxRoutedExperts + 1), kHopperSmemPerSm) ? 2 : 1;
  //
  // Three consumer warpgroups (192 rows, 512 threads: 128 registers at launch) put three
  // consumer warps on each scheduler instead of two, which hides more of the chain (glm5 FC2
  // 5-7.5% faster at 56-128 tokens per expert, docs/PERFORMANCE.md). In the 152 registers
  // setmaxnreg grants them (at the launch's 128 they spill 208-224 bytes) 88 accumulators (176
  // tokens) and one buffer of A fragments fit; a second buffer made ptxas serialize the wgmma
  // (C7512), and a 24-register producer spilled. So this tile retires each stage's wgmma before dequantizing
  // the next (kFragBufs = 1): the other two warpgroups' wgmma keep the tensor pipe busy meanwhile
  // (not all the time: at glm5 T = 4096 a sixth of the consumers' warp samples wait there). With
  // 144 tokens (72 accumulators) both buffers fit (160: C7512).
  //
  // Four consumer warpgroups (256 rows, 640 threads: 96 registers at launch) are the two-CTA
  // 64-token tile's four warpgroups per SM sharing one token tile: half the token bytes per MMA
  // (a stage reads 8 KB of tokens for 256 rows instead of 128), one producer per SM instead of
  // two, and ptxas compiles the consumers (32 accumulators, two buffers of A fragments) in 96
  // registers without serializing their wgmma, which it does in the two-CTA tile's 80. glm5 T =
  // 512-1536: 7-12% faster than the two-CTA tile (FC1 9-11%, FC2 6-8%); one fragment buffer
  // instead of two was 8% slower (docs/PERFORMANCE.md). With 128 tokens (64 accumulators) the
  // 96 registers hold one fragment buffer (two: C7512): 256 x 128 reads 25 KB a stage for the
  // MMAs of the 128 x 256 tile's 37 KB, with four consumer warpgroups instead of two.
  // ptxas budgets each role's code by what setmaxnreg gives it (the 256 x 128 tile's consumers at
  // 104 instead of 112 spilled 208 bytes around their HGMMA), and all of these counts are tight:
  // docs/PERFORMANCE.md, "Under the power cap", lists what a few more instructions in the
  // 32-register producers' loop took.
  static constexpr int kProducerRegs = kCtasPerSm == 2 || kConsumers >= 3 ? 32 : 40;
  static constexpr int kConsumerRegs = kCtasPerSm == 2 ? 104 : kConsumers == 4 ? 112 : kConsumers == 3 ? 152 : 232;
  // What __launch_bounds__ leaves a thread: the SM's 64 K registers over the CTAs' threads, in
  // the allocation's steps of 8 (168, 128, 96 for one CTA of 384, 512, 640 threads; 80 for two).
  static constexpr int kLaunchRegs = 65536 / (kThreads * kCtasPerSm) / 8 * 8;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= kLaunchRegs * kThreads,
                "setmaxnreg moves registers within the CTA's launch allocation");
  static_assert(kLaunchRegs * kThreads * kCtasPerSm <= 65536, "the CTAs' registers fit an SM");
  // The finalize's phase 2: slots loaded per batch (w4a16::finalize_sum_slots). ptxas compiles it
  // at the launch's register count, not at the consumers' setmaxnreg: the most that count holds
  // without spilling (16 spilled 24 bytes at 128, 152 at 96; 10 spilled 8 at 80).
  static constexpr int kSlotBatch = kLaunchRegs >= 168 ? 16 : kLaunchRegs >= 128 ? 12 : kLaunchRegs >= 96 ? 10 : 8;
  static constexpr int kFragBufs = (kConsumers == 3 && kTokens > 144) || (kConsumers == 4 && kTokens > 64) ? 1 : 2;
  // 128 or 256 K a stage: the stage's chunks are dequantized into the two fragment buffers in
  // turn (with one buffer, the 192 x 176 tile: into it, each once the chunk before has retired),
  // one barrier wait, slot and release per stage (the per-stage bookkeeping was ~77 of a
  // consumer warp's 134 instructions a 64-K stage at glm5 T = 1024, docs/PERFORMANCE.md).
  static_assert(kChunks == 1 || kFragBufs == 2 || kConsumers == 3,
                "a stage of several chunks: two fragment buffers, or one in the three-warpgroup tile (whose K loop "
                "is compiled per width)");
};

// kCode = encode_tactic(tactic). One CTA per SM, 384 threads at 168 registers each (two CTAs at
// 80 where kCtasPerSm says so; 512 threads at 128 for the three-warpgroup tile, 640 at 96 for
// the four-warpgroup ones); setmaxnreg then moves registers from the producer warpgroup (40:
// one warp issues copies) to the two consumers (232: kTokens / 2 accumulators, up to 128, two
// stages of A fragments, 32, and the dequantization's temporaries; 128 x 40 + 256 x 232 <= 64 K
// registers; W4a16WgmmaTraits has the other tiles' split). FC2's finalize phase runs on the
// consumers alone, at their count.
template <unsigned long long kCode>
__global__ void __launch_bounds__(decode_tactic(kCode).warps * 32,
                                  W4a16WgmmaTraits<decode_tactic(kCode)>::kCtasPerSm)
    w4a16_wgmma_grouped_gemm_kernel(const W4a16GemmParams p, const __grid_constant__ WgmmaMaps maps) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace sm90 = ptx::sm90;
  constexpr Tactic kT = decode_tactic(kCode);
  using Tr = W4a16WgmmaTraits<kT>;
  constexpr int kTokens = Tr::kTokens, kStages = Tr::kStages, kRowTiles = Tr::kRowTiles;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + Tr::kAlignSlack - 1) & ~uintptr_t{Tr::kAlignSlack - 1});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * Tr::kStageBytes);
  uint64_t* empty = full + kStages;
  // The unit starting at a stage (unit.e = -1: done); 16-byte aligned (the barriers before it are
  // 16 B per stage from a 1024-aligned base).
  WgmmaUnitEntry* unit_ring = reinterpret_cast<WgmmaUnitEntry*>(empty + kStages);
  int* prefix = reinterpret_cast<int*>(reinterpret_cast<uint8_t*>(unit_ring) + Tr::kUnitRingBytes);
  int* warp_sums =
      reinterpret_cast<int*>(reinterpret_cast<uint8_t*>(prefix) + Tr::prefix_bytes(p.num_experts));

  w4a16::sm_clock_enter(p.sm_clock);  // thread 0: the producer's copying lane
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warpgroup = warp / 4;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(&full[s], 1);                    // the producer's expect_tx arrival
      sm90::mbarrier_init(&empty[s], Tr::kConsumers * 128);  // every consumer thread
    }
    sm90::fence_mbarrier_init();
  }
  const int row_blocks = (p.rowtiles + kRowTiles - 1) / kRowTiles;
  w4a16::griddep_wait();  // the routing (and FC1's act) are complete and visible
  w4a16::unit_prefix<Tr::kThreads>(prefix, p.expert_offsets, p.num_experts, kTokens, row_blocks,
                                   warp_sums);  // its barriers also publish the mbarrier init
  w4a16::griddep_launch_dependents();
  const int64_t expert_sbytes = static_cast<int64_t>(p.rowtiles) * p.kgroups * 256;

  if (warpgroup == 0) {
    sm90::setmaxnreg_dec<Tr::kProducerRegs>();
    if (warp == 0) {
      // The unit count is read from shared memory where it is compared: a register holding it
      // through the loop was one too many for the 32-register producer of three tiles in one
      // build of this kernel (ptxas spilled it).
      const int* units = prefix + p.num_experts;
      // ===================== producer: lane 0 arms each stage, one lane per row tile copies ==
      int slot = 0;
      uint32_t phase = 0;
      auto take_ticket = [&] {
        int ticket = 0;
        if (lane == 0) ticket = atomicAdd(p.unit_ticket, 1);
        return __shfl_sync(0xffffffffu, ticket, 0);
      };
      // The units this CTA takes, counted in the unit prefix's scratch (free once the prefix is
      // built) for the finalize's wait: a shared word, not a register across the loop.
      if (kT.epilogue == Epilogue::kFinalize && lane == 0) warp_sums[0] = 0;
      int u = take_ticket();
      for (; u < *units; u = take_ticket()) {
        if (kT.epilogue == Epilogue::kFinalize && lane == 0) ++warp_sums[0];
        const w4a16::Unit cu = w4a16::decode_unit_rows_inner(p, prefix, u, kTokens, row_blocks);
        // The expert's global scales, for the consumers' epilogue (lane 0 writes the entry).
        float ka = kDequantEpilogueFactor, kb = kDequantEpilogueFactor;
        if (lane == 0) {
          if (p.scale_a) ka = p.scale_a[cu.e] * kDequantEpilogueFactor;
          if (kT.epilogue == Epilogue::kSwiglu) kb = p.scale_b[cu.e] * kDequantEpilogueFactor;
        }
        const int rt0 = cu.rb * kRowTiles;
        const int rts = min(kRowTiles, p.rowtiles - rt0);  // row tiles that exist in this block
        const uint8_t* ssrc = p.scales + cu.e * expert_sbytes + static_cast<int64_t>(rt0) * 256;
        // The box (the unit's width in rows) always lands whole (rows past the tensor as
        // zeros); rows of the next expert only feed D columns that are never stored.
        const int width = Tr::Widths::narrowest(cu.ntok);
        const int bi = Tr::Widths::index_of(width);
        // The weight box always lands whole too: row tiles past the block are the next blocks'
        // (or zeros past the tensor), never dequantized into a stored row. The block scales
        // cover a whole K group: they come with its first chunk only.
        const uint32_t stage_bytes = (width * 128 + Tr::kRawChunkBytes) * Tr::kChunks;
        const uint32_t scale_bytes = rts * 256;
        for (int ks = 0; ks < Tr::k_steps(p.k); ++ks) {
          sm90::mbarrier_wait(&empty[slot], phase ^ 1);  // a fresh barrier passes parity 1
          uint8_t* st = smem + slot * Tr::kStageBytes;
          const int kc = ks * Tr::kChunks;  // the stage's first 64-K chunk
          const int kg = kc >> 2, chunk = kc & 3;
          // Two or three copies per stage from one lane: each copy instruction costs the issuing
          // warp ~100 cycles (a copy per row tile made the producer the bottleneck at 32 tokens per
          // expert).
          if (lane == 0) {
            if (ks == 0) unit_ring[slot] = WgmmaUnitEntry{cu, ka, kb, {0, 0}};  // released by the arrival below
            sm90::mbarrier_arrive_expect_tx(&full[slot], stage_bytes + (chunk == 0 ? scale_bytes : 0));
#pragma unroll
            for (int c = 0; c < Tr::kChunks; ++c)
              sm90::tma_load_3d(st + Tr::kBBytes + c * Tr::kRawChunkBytes, &maps.weights, 0, chunk + c,
                                (cu.e * p.kgroups + kg) * p.rowtiles + rt0, &full[slot]);
            if (chunk == 0)
              sm90::bulk_copy_g2s(st + Tr::kBBytes + Tr::kRawBytes,
                                  ssrc + kg * static_cast<int64_t>(p.rowtiles) * 256, scale_bytes, &full[slot]);
#pragma unroll
            for (int c = 0; c < Tr::kChunks; ++c)
              sm90::tma_load_2d(st + c * Tr::kBChunkBytes, &maps.tokens[bi], (kc + c) * 64, cu.tok0, &full[slot]);
          }
          __syncwarp();
          if (++slot == kStages) {
            slot = 0;
            phase ^= 1;
          }
        }
      }
      // Out of units: tell the consumers through the next slot, and reset the counter for the
      // next launch if this was the last ticket (every CTA draws exactly one ticket >= units).
      sm90::mbarrier_wait(&empty[slot], phase ^ 1);
      if (lane == 0) {
        unit_ring[slot].unit.e = -1;
        if (kT.epilogue == Epilogue::kFinalize) {  // for the finalize's wait: units taken, units in all
          unit_ring[slot].pad[0] = warp_sums[0];
          unit_ring[slot].pad[1] = *units;
        }
        sm90::mbarrier_arrive(&full[slot]);
        if (u == *units + static_cast<int>(gridDim.x) - 1) *p.unit_ticket = 0;
      }
      w4a16::sm_clock_exit(p.sm_clock);  // its last copies are issued: the mainloop's interval
    }
    // The producers are done: the finalize's phase 2 runs on the consumers, at their registers
    // (at 40 the slot sums would be starved of registers; a kernel that took 168 back with
    // setmaxnreg.inc here hung under compute-sanitizer).
  } else {
    // ===================== consumers: dequantize, wgmma, epilogue ==============================
    sm90::setmaxnreg_inc<Tr::kConsumerRegs>();
    const int cw = warpgroup - 1;  // consumer 0: tile rows 0-63, consumer 1: rows 64-127
    const int wl = warp & 3;       // warp in the warpgroup: row tile 4 cw + wl of the block
    const int g = lane >> 2, t = lane & 3;
    const int local_rt = 4 * cw + wl;
    constexpr int kBufs = Tr::kFragBufs;
    float acc[Tr::kAccum];
    uint32_t frag[kBufs][4][4];  // [register buffer][k step][A fragment]: kBufs stages in flight
    int slot = 0;
    uint32_t phase = 0;
    uint2 sc = make_uint2(0, 0);  // this lane's block scales of the current K group (8 B: its 4 chunks)

    // One stage: dequantize this warp's 16 rows x 64 K into register buffer kBuf, issue its 4
    // wgmma, then retire the previous stage's (the other buffer) and release that slot.
    auto stage = [&](auto buf_tag, int ks, auto width) __attribute__((always_inline)) {
      constexpr int kBuf = decltype(buf_tag)::value;
      sm90::mbarrier_wait(&full[slot], phase);
      const uint8_t* st = smem + slot * Tr::kStageBytes;
      {
        // Word s of the lane: rows g, g+8 at K 16t + 4s .. +3 of the chunk, all in block t of
        // the chunk (one scale per row); in fragment order that is exactly k step s's A fragment.
        const int chunk = ks & 3;
        const uint8_t* raw = st + Tr::kBBytes;
        const uint4 w = ptx::ld_shared_v4(raw + local_rt * 512 + lane * 16);
        // The K group's scales land with its first chunk's stage only (slots are refilled
        // stage by stage, so they are kept in registers for the other three).
        if (chunk == 0) sc = ptx::ld_shared_v2(raw + Tr::kRawBytes + local_rt * 256 + lane * 8);
        const uint32_t sword = chunk < 2 ? sc.x : sc.y;
        const uint32_t scales = ue5m3_pair_to_bf16x2_scaled(sword, static_cast<uint32_t>(chunk & 1));
        dequant_a_fragments(w, scales, frag[kBuf]);
      }
      if constexpr (std::is_same_v<decltype(width), int>) {
        Tr::Widths::issue(width, acc, frag[kBuf], sm90::wgmma_desc_lo_k_sw128(st), ks == 0);
      } else {
        Tr::Widths::template issue_at<decltype(width)::value>(acc, frag[kBuf], sm90::wgmma_desc_lo_k_sw128(st),
                                                              ks == 0);
      }
      sm90::wgmma_fence_operands(acc);
      // The previous stage's wgmma are done (with one buffer: this stage's): its register
      // buffer may be rewritten and its slot refilled (with two, this stage's stay in flight
      // while the next stage is dequantized).
      sm90::wgmma_wait<kBufs - 1>();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) sm90::wgmma_fence_operands(frag[(kBuf + 1) % kBufs][kk]);
      const int oldest = slot >= kBufs - 1 ? slot - (kBufs - 1) : slot + kStages - (kBufs - 1);
      if (ks >= kBufs - 1) sm90::mbarrier_arrive(&empty[oldest]);
      if (++slot == kStages) {
        slot = 0;
        phase ^= 1;
      }
    };

    // A stage of kChunks 64-K chunks (two: 128 K, four: a whole K group of 256), as kChunks
    // 64-K stages would be run but with the wait for the stage, the slot and the release paid
    // once. With two buffers chunk c is dequantized into buffer c % 2 and its 4 wgmma stay in
    // flight while chunk c + 1 is dequantized into the other; the previous stage's slot is
    // released once its last chunk's wgmma have retired (the wait after this stage's first
    // chunk). With one (the 192 x 176 tile) each chunk's wgmma retire before the next chunk is
    // dequantized, and the stage releases its own slot. The block scales come with the K
    // group's first chunk: a 128-K stage starts at chunk 0 or 2, a 256-K stage always at 0.
    auto stage_chunks = [&](int ks, auto width) __attribute__((always_inline)) {
      sm90::mbarrier_wait(&full[slot], phase);
      const uint8_t* st = smem + slot * Tr::kStageBytes;
      const uint8_t* raw = st + Tr::kBBytes;
      // Chunk c's token block starts kBChunkBytes / 16 descriptor units after the stage's (shared
      // addresses stay below 2^18, so the descriptor's address field never wraps).
      const uint32_t desc_stage = sm90::wgmma_desc_lo_k_sw128(st);
      const int chunk0 = (ks * Tr::kChunks) & 3;
      if (chunk0 == 0) sc = ptx::ld_shared_v2(raw + Tr::kRawBytes + local_rt * 256 + lane * 8);
      const uint32_t sword_lo = Tr::kChunks == 4 || chunk0 == 0 ? sc.x : sc.y;
#pragma unroll
      for (int c = 0; c < Tr::kChunks; ++c) {
        const int buf = c % kBufs;
        const uint32_t sword = c < 2 ? sword_lo : sc.y;  // chunks 2, 3 of a K group: the high word
        {
          const uint4 w = ptx::ld_shared_v4(raw + c * Tr::kRawChunkBytes + local_rt * 512 + lane * 16);
          const uint32_t scales = ue5m3_pair_to_bf16x2_scaled(sword, static_cast<uint32_t>(c & 1));
          dequant_a_fragments(w, scales, frag[buf]);
        }
        const uint32_t desc_lo = desc_stage + c * (Tr::kBChunkBytes >> 4);
        if constexpr (std::is_same_v<decltype(width), int>)
          Tr::Widths::issue(width, acc, frag[buf], desc_lo, ks == 0 && c == 0);
        else
          Tr::Widths::template issue_at<decltype(width)::value>(acc, frag[buf], desc_lo, ks == 0 && c == 0);
        sm90::wgmma_fence_operands(acc);
        // Two buffers: the chunk before this one has retired, its buffer is free again. One: this
        // chunk has (the other warpgroups' wgmma keep the tensor pipe busy meanwhile).
        sm90::wgmma_wait<kBufs - 1>();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) sm90::wgmma_fence_operands(frag[(c + 1) % kBufs][kk]);
        if (kBufs == 2 && c == 0 && ks > 0) sm90::mbarrier_arrive(&empty[slot == 0 ? kStages - 1 : slot - 1]);
      }
      if (kBufs == 1) sm90::mbarrier_arrive(&empty[slot]);
      if (++slot == kStages) {
        slot = 0;
        phase ^= 1;
      }
    };

    // The unit a stage starts, once its copies are armed (the stage's own wait below passes at
    // once); unit.e = -1 when the producer is out of units. Its expert and token count pass
    // through a shuffle from lane 0: ptxas then knows them warp-uniform, and with them the unit
    // loop, the width bisection, the slot and phase and the stage addresses, which it keeps in
    // the uniform datapath - the wgmma descriptors are built in uniform registers instead of
    // being moved there by two R2UR per wgmma, and the vector registers they held are free
    // (SASS: 15 R2UR per kernel instead of 111-401; glm5 FC1 and FC2 3-5% faster at T = 1024-4096).
    auto next_unit = [&] {
      sm90::mbarrier_wait(&full[slot], phase);
      WgmmaUnitEntry entry = unit_ring[slot];
      entry.unit.e = __shfl_sync(0xffffffffu, entry.unit.e, 0);
      entry.unit.ntok = __shfl_sync(0xffffffffu, entry.unit.ntok, 0);
      return entry;
    };
    for (WgmmaUnitEntry entry = next_unit(); entry.unit.e >= 0; entry = next_unit()) {
      const w4a16::Unit cu = entry.unit;
      // (the test through a lane-0 shuffle, like the unit above: ptxas must see it warp-uniform,
      // or the slot and phase after it, and every wgmma descriptor with them, leave the uniform
      // registers)
      if (__shfl_sync(0xffffffffu, cu.rb * kRowTiles + 4 * cw >= p.rowtiles, 0)) {
        // This warpgroup's 64 rows are past the matrix (the last row block of a matrix whose rows
        // are not a multiple of the tile's: glm5's FC1, 4096 rows in 192-row blocks, ends in one
        // of 64). It only passes the unit's stages on, leaving the tensor pipe to the warpgroups
        // with rows: their unit's wgmma had waited behind two thirds of padding. Each stage is
        // waited for before it is released, so that its arrival counts in the slot's current
        // phase (a warpgroup running a ring ahead would complete the next one).
#pragma unroll 1
        for (int ks = 0; ks < Tr::k_steps(p.k); ++ks) {
          sm90::mbarrier_wait(&full[slot], phase);
          sm90::mbarrier_arrive(&empty[slot]);
          if (++slot == kStages) {
            slot = 0;
            phase ^= 1;
          }
        }
        continue;
      }
      const int width = Tr::Widths::narrowest(cu.ntok);
      // kBufs stages per trip: the register buffer of each is a compile-time index.
      int ks = 0;
      if constexpr (Tr::kChunks > 1 && kBufs == 1) {
        // As below: the width once per unit, the unit's K loop compiled per width.
        Tr::Widths::dispatch(cu.ntok, [&](auto wi) __attribute__((always_inline)) {
#pragma unroll 1
          for (; ks < Tr::k_steps(p.k); ++ks) stage_chunks(ks, wi);
        });
      } else if constexpr (Tr::kChunks > 1) {
        for (; ks < Tr::k_steps(p.k); ++ks) stage_chunks(ks, width);
      } else if constexpr (kBufs == 2) {
        for (; ks + 1 < Tr::k_steps(p.k); ks += 2) {
          stage(std::integral_constant<int, 0>{}, ks, width);
          stage(std::integral_constant<int, 1>{}, ks + 1, width);
        }
        if (ks < Tr::k_steps(p.k)) stage(std::integral_constant<int, 0>{}, ks, width);
      } else if constexpr (Tr::kConsumers == 3) {
        // The width chosen once per unit, the unit's K loop compiled per width (no bisection in
        // each stage): ptxas keeps this tile's wgmma asynchronous so (in the two-buffer tiles it
        // serializes them, C7511), and glm5 FC1 and FC2 at T = 4096 are 1.5-2% faster. (The
        // 256 x 128 tile was 2-3% slower so at glm5-tp8's FC2, whose units are 4 stages.)
        Tr::Widths::dispatch(cu.ntok, [&](auto wi) __attribute__((always_inline)) {
#pragma unroll 1
          for (; ks < Tr::k_steps(p.k); ++ks) stage(std::integral_constant<int, 0>{}, ks, wi);
        });
      } else {
        for (; ks < Tr::k_steps(p.k); ++ks) stage(std::integral_constant<int, 0>{}, ks, width);
      }
      sm90::wgmma_wait<0>();
      sm90::wgmma_fence_operands(acc);
#pragma unroll
      for (int b = 0; b < kBufs; ++b)
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) sm90::wgmma_fence_operands(frag[b][kk]);
      // The last stage's slot (with one buffer every stage released its own already).
      if (kBufs == 2) sm90::mbarrier_arrive(&empty[slot == 0 ? kStages - 1 : slot - 1]);

      // ---- epilogue: acc[4j + i] = row 16 local_rt + g (+8 for i >= 2), token 8j + 2t + (i & 1)
      // Each 8 x 8 block (8 rows, tokens 8j..8j+7) is transposed across the warp (movmatrix), so
      // that lane (g, t) stores token 8j + g's rows (columns) 2t, 2t + 1 as one 32-bit word: one
      // store per block and half-row instead of two 16-bit stores (FC1) or a shuffle, two selects
      // and a store per row pair (FC2) - the epilogues had 7% (FC1) and 12.5% (FC2) of the warp
      // samples at glm5 T = 4096. Only the unit's tokens are stored: a partial tile (most
      // experts' last) stops at its width, the break uniform across the CTA, as movmatrix needs
      // every lane of the warp.
      const int rt = cu.rb * kRowTiles + local_rt;  // global row tile of this warp
      const float ka = entry.ka;
      if constexpr (kT.epilogue == Epilogue::kSwiglu) {
        // Row tile q: gate rows 8q..8q+7 (tile rows 0-7), up rows 8q..8q+7 (rows 8-15), giving
        // act columns 8q..8q+7; after the transposition this lane holds columns 8q + 2t, + 1
        // (adjacent in fragment order too: it permutes 4-byte pairs).
        const float kb = entry.kb;
        const int col = rt * 8 + 2 * t;
        const int64_t pos = p.act_fragment_order ? fragment_order_position(col) : col;
        const bool col_ok = col < p.act_cols;
        uint16_t* dst = p.act_out + static_cast<int64_t>(cu.tok0 + g) * p.act_stride + pos;
        const int64_t step = 8 * static_cast<int64_t>(p.act_stride);
#pragma unroll
        for (int j = 0; j < kTokens / 8; ++j) {
          if (8 * j >= cu.ntok) break;
          const float h0 = w4a16::silu(acc[4 * j] * ka) * (acc[4 * j + 2] * kb);
          const float h1 = w4a16::silu(acc[4 * j + 1] * ka) * (acc[4 * j + 3] * kb);
          const uint32_t v = ptx::movmatrix_trans(w4a16::pack_bf16x2(h0, h1));
          if (col_ok && 8 * j + g < cu.ntok) *reinterpret_cast<uint32_t*>(dst) = v;
          dst += step;
        }
      } else {
        // Finalize, phase 1: this warpgroup's 64 rows to rows_out (bf16, unweighted); after the
        // transposition this lane holds rows 16 rt + 2t, + 1 (lo) and + 8, + 9 (hi) of token 8j + g.
        // Lanes t and t ^ 1 then trade a word (the even lane its hi for the odd lane's lo), so that
        // each holds four adjacent rows - t = 0: rows 0-3, 1: 8-11, 2: 4-7, 3: 12-15 - and the four
        // lanes of a token store its 16 rows (one 32-byte sector) in one 8-byte store each: two
        // 4-byte stores that each half-filled eight sectors had 6.7% of FC2's warp samples at glm5
        // T = 4096 (stalled issuing, the store queue full; ncu). rows is a multiple of 16: a row
        // tile is inside the matrix or wholly past it.
        const bool rows_ok = rt * 16 < p.rows;
        const bool odd = t & 1;
        uint16_t* dst = p.rows_out + static_cast<int64_t>(cu.tok0 + g) * p.rows + rt * 16 + 4 * (t >> 1) + 8 * odd;
        const int64_t step = 8 * static_cast<int64_t>(p.rows);
#pragma unroll
        for (int j = 0; j < kTokens / 8; ++j) {
          if (8 * j >= cu.ntok) break;
          const uint32_t lo = ptx::movmatrix_trans(w4a16::pack_bf16x2(acc[4 * j] * ka, acc[4 * j + 1] * ka));
          const uint32_t hi = ptx::movmatrix_trans(w4a16::pack_bf16x2(acc[4 * j + 2] * ka, acc[4 * j + 3] * ka));
          const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? lo : hi, 1);
          if (rows_ok && 8 * j + g < cu.ntok)
            *reinterpret_cast<uint2*>(dst) = odd ? make_uint2(got, hi) : make_uint2(lo, got);
          dst += step;
        }
      }
    }

    if constexpr (kT.epilogue == Epilogue::kFinalize) {
      // ---- finalize, phase 2: every unit's rows are out; out[token] = sum of its slots' rows ----
      // The consumer warpgroups only (a named barrier: the producer warps have left).
      constexpr int kConsumerThreads = Tr::kConsumers * 128;
      // The producer's last ring entry (at `slot`: the loop ended on it) carries the units this CTA
      // took and the kernel's total (read from the ring: pointers to the prefix kept live through
      // the loop made ptxas spill).
      ptx::named_barrier_sync(1, kConsumerThreads);  // this CTA's rows, before they are released
      if (tid == 128)
        w4a16::wait_all_units_out(p.grid_barrier, unit_ring[slot].pad[0], unit_ring[slot].pad[1], gridDim.x);
      ptx::named_barrier_sync(1, kConsumerThreads);
      w4a16::finalize_sum_slots<kConsumerThreads, Tr::kSlotBatch>(p, tid - 128);
    }
  }
#else
  // Built for another architecture: the registry never launches this kernel there.
  __trap();
#endif
}

}  // namespace fp4moe::kernels
