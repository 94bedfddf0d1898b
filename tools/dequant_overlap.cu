// dequant_overlap: does the FP4 dequantization overlap with the tensor cores on this GPU?
//
// A microbenchmark for kernel developers (sm_90a: mma.sync and wgmma). Each kernel runs the
// inner loop of one GEMM family on operands in shared memory - no DRAM, no pipeline, no
// epilogue - in several variants that add or remove one cost, so that the cycles each costs,
// and whether two of them overlap, can be read off one table (docs/PERFORMANCE.md, "Where the
// dequantization meets the tensor cores"). Timing only: the MMAs multiply whatever bits the
// variants hand them.
//
//   decode family (mma.sync m16n8k16, the 8-token tile: 4 warps a CTA, two row tiles a warp,
//   one 32-bit word of FP4 weights a MMA, two words dequantized together as mma_half_chunk.cuh):
//     mma            the MMAs alone, A = the word itself (register copies)
//     dequant+mma    dequant_a_fragment_pair (dequant_nvfp4.cuh) feeding each pair of MMAs
//     mma+7alu       the MMAs, and 7 ALU operations a word on registers the MMAs do not read
//     dequant+2mma   the 16-token tile: the dequantization feeding two MMAs a word (two n8 tiles)
//     word / word-fma / all-alu pair dequant+mma   dequant+mma in the other layouts below
//   prefill family (wgmma m64nNk16, A from registers: four consumer warpgroups of 64 rows in a
//   CTA of 512 threads, one 64-K chunk = 4 words a lane and 4 wgmma a warpgroup, two fragment
//   buffers with one group in flight, as in sm90_w4a16_wgmma_grouped_gemm.cuh):
//     wgmma          the wgmma alone, A = the words (register copies, rewritten every chunk)
//     +alu newA      A rewritten by 16 ALU ops a chunk, and 32 more on registers no wgmma reads
//     +alu fixedA    the 32 ALU ops, the wgmma reading two fixed fragment sets
//     dequant        the dequantization alone
//     dequant>wgmma  the dequantization feeding the wgmma (what the kernels do)
//     dequant beside both, the wgmma reading the two fixed fragment sets instead
//     word / word-fma / all-alu pair alone and >wgmma   dequant, dequant>wgmma in the other layouts
//   and the same loop with W warpgroups of S sets of 64 rows each (S wgmma per k step sharing
//   its B tile, one commit group a chunk): 4 x 1 (the kernels'), 2 x 2 and 2 x 1, the wgmma
//   alone and fed by the dequantization, in cycles per 256 rows x 64 K
//
// Usage: fp4moe_dequant_overlap   (needs an sm_90 GPU; prints cycles from clock64)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "common/rng.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/dequant_nvfp4.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/sm90_ptx.cuh"
#include "kernels/common/sm90_wgmma_rs.cuh"

namespace {

using namespace fp4moe::kernels;
namespace ptx = fp4moe::ptx;
namespace sm90 = fp4moe::ptx::sm90;

// The kernels' layout (dequant_nvfp4.cuh: a word pair, 16 instructions per 16 values, 13 of them
// on the ALU pipe) against three others, timing only (the prepacker writes only the kernels'):
//   kWord     the layout before it: each word alone, 9 instructions per 8 values (5 LOP3, SHF.L.W,
//             SHF.R on the ALU pipe, two left shifts that ptxas issues as IMAD.SHL)
//   kWordFma  the same bits with the rotation by 10 as both halves of one IMAD.WIDE.U32 (w * 2^10,
//             ORed inside the masking LOP3) and the shift right by 2 as IMAD.HI.U32 (w * 2^30):
//             as many instructions, two fewer on the ALU pipe
//   kPairAlu  a word pair of 16 instructions whose views are all ALU-pipe ones (a byte permute,
//             five rotations of one word, a funnel shift across both: scripts/fp4_layout_search.py)
enum class Layout { kKernels, kWord, kWordFma, kPairAlu };

__device__ __forceinline__ void word_raw(uint32_t w, uint32_t* r) {
  constexpr uint32_t kMask = 0x81C081C0u;
  r[0] = w & kMask;
  r[1] = (w << 4) & kMask;
  r[2] = __funnelshift_l(w, w, 10) & kMask;
  r[3] = ((w << 6) & 0x80C080C0u) | ((w >> 2) & 0x01000100u);
}
__device__ __forceinline__ void word_fma_raw(uint32_t w, uint32_t* r) {
  constexpr uint32_t kMask = 0x81C081C0u;
  uint64_t w10;
  asm("mul.wide.u32 %0, %1, 1024;\n" : "=l"(w10) : "r"(w));
  r[0] = w & kMask;
  r[1] = (w << 4) & kMask;
  r[2] = (static_cast<uint32_t>(w10) | static_cast<uint32_t>(w10 >> 32)) & kMask;
  r[3] = ((w << 6) & 0x80C080C0u) | (__umulhi(w, 1u << 30) & 0x01000100u);
}
__device__ __forceinline__ void pair_alu_raw(uint32_t w0, uint32_t w1, uint32_t (&r)[8]) {
  constexpr uint32_t kMask = 0x81C081C0u;
  r[0] = (w0 & 0x80408040u) | (w1 & 0x01800180u);
  r[1] = __byte_perm(w0, w1, 0x0725) & kMask;
  r[2] = __funnelshift_l(w0, w0, 14) & kMask;
  r[3] = __funnelshift_l(w0, w0, 20) & kMask;
  r[4] = __funnelshift_l(w0, w0, 10) & kMask;
  r[5] = __funnelshift_l(w1, w1, 22) & kMask;
  r[6] = __funnelshift_l(w1, w1, 12) & kMask;
  r[7] = __funnelshift_r(w0, w1, 30) & kMask;
}

// Pair h (steps 2h, 2h + 1) of a lane's word group into its A fragments in layout kL, scaled as the kernels do.
template <Layout kL>
__device__ __forceinline__ void dequant_half(uint4 w, int h, uint32_t scales, uint32_t (&a0)[4], uint32_t (&a1)[4]) {
  if constexpr (kL == Layout::kKernels) {
    dequant_a_fragment_half(w, h, scales, a0, a1);
  } else {
    const uint2 pair = word_pair(w, h);
    uint32_t raw[8];
    if constexpr (kL == Layout::kWord) {
      word_raw(pair.x, raw);
      word_raw(pair.y, raw + 4);
    } else if constexpr (kL == Layout::kWordFma) {
      word_fma_raw(pair.x, raw);
      word_fma_raw(pair.y, raw + 4);
    } else {
      pair_alu_raw(pair.x, pair.y, raw);
    }
    scale_a_fragment_pair(raw, scales, a0, a1);
  }
}
template <Layout kL>
__device__ __forceinline__ void dequant_chunk(uint4 w, uint32_t scales, uint32_t (&a)[4][4]) {
  dequant_half<kL>(w, 0, scales, a[0], a[1]);
  dequant_half<kL>(w, 1, scales, a[2], a[3]);
}

// Each CTA writes its elapsed clock64 cycles to cycles[blockIdx.x] and a checksum of its
// accumulators to sink (so that no computation is dead code).
enum class Mma { kAlone, kBesideAlu, kDequant, kDequantTwo, kWord, kWordFma, kPairAlu };
constexpr Layout layout_of(Mma v) {
  return v == Mma::kWord ? Layout::kWord : v == Mma::kWordFma ? Layout::kWordFma
                                         : v == Mma::kPairAlu ? Layout::kPairAlu : Layout::kKernels;
}

constexpr int kWordsSmem = 1024;  // uint4 of weight words in shared memory (16 KB)

template <Mma kV>
__global__ void __launch_bounds__(128) mma_loop(const uint4* src, int iters, long long* cycles, float* sink) {
  __shared__ uint4 words[kWordsSmem];
  for (int i = threadIdx.x; i < kWordsSmem; i += blockDim.x) words[i] = src[i];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t b0 = src[lane].x, b1 = src[lane].y, scale_word = src[lane + 32].z;
  uint32_t side[4] = {b0, b1, scale_word, b0 ^ b1};
  float acc[2][4] = {}, acc_n1[2][4] = {};  // acc_n1: the second n8 tile of kDequantTwo
  const uint32_t b2 = src[lane + 64].x, b3 = src[lane + 64].y;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    const int base = (it & 3) * 256 + warp * 32 + lane;
#pragma unroll
    for (int c = 0; c < 4; ++c) {  // a K group: 4 chunks x 4 k steps x 2 row tiles
      uint4 aw[2];
      uint32_t sc[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        aw[r] = words[(base + c * 8 + r * 128) & (kWordsSmem - 1)];
        sc[r] = ue5m3_pair_to_bf16x2_scaled<0>(scale_word + c + r);
      }
      if constexpr (kV == Mma::kAlone || kV == Mma::kBesideAlu) {  // A = the word itself
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const uint32_t w = s == 0 ? aw[r].x : s == 1 ? aw[r].y : s == 2 ? aw[r].z : aw[r].w;
            const uint32_t a[4] = {w, w, w, w};
            if constexpr (kV == Mma::kBesideAlu) {
#pragma unroll
              for (int q = 0; q < 7; ++q)
                asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(side[q & 3]) : "r"(sc[r]), "r"(w));
            }
            ptx::mma_bf16_m16n8k16(acc[r], a, b0, b1);
          }
      } else {  // steps 2h, 2h + 1 of each row tile from one word pair, as mma_half_chunk.cuh
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            uint32_t a0[4], a1[4];
            dequant_half<layout_of(kV)>(aw[r], h, sc[r], a0, a1);
            ptx::mma_bf16_m16n8k16(acc[r], a0, b0, b1);
            if constexpr (kV == Mma::kDequantTwo) ptx::mma_bf16_m16n8k16(acc_n1[r], a0, b2, b3);
            ptx::mma_bf16_m16n8k16(acc[r], a1, b0, b1);
            if constexpr (kV == Mma::kDequantTwo) ptx::mma_bf16_m16n8k16(acc_n1[r], a1, b2, b3);
          }
      }
    }
  }
  const long long t1 = clock64();
  float sum = static_cast<float>(side[0] ^ side[1] ^ side[2] ^ side[3]);
  for (auto& row : acc)
    for (float v : row) sum += v;
  for (auto& row : acc_n1)
    for (float v : row) sum += v;
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

enum class Wg {
  kAlone,
  kAluNewA,
  kAluFixedA,
  kDequantAlone,
  kDequantFeeds,
  kDequantBeside,
  kWordAlone,
  kWordFeeds,
  kPairAluAlone,
  kPairAluFeeds,
  kFmaAlone,
  kFmaFeeds
};
constexpr bool dequant_only(Wg v) {
  return v == Wg::kDequantAlone || v == Wg::kWordAlone || v == Wg::kPairAluAlone || v == Wg::kFmaAlone;
}
constexpr Layout layout_of(Wg v) {
  return v == Wg::kWordAlone || v == Wg::kWordFeeds         ? Layout::kWord
         : v == Wg::kPairAluAlone || v == Wg::kPairAluFeeds ? Layout::kPairAlu
         : v == Wg::kFmaAlone || v == Wg::kFmaFeeds         ? Layout::kWordFma
                                                            : Layout::kKernels;
}

// The wgmma loops' operands: kWordsSmem weight words into dynamic shared memory, then
// (1024-aligned, 16 KB after the aligned base) a B tile of kN token rows x 128 B; the words, the
// B tile's descriptor (low word) and this lane's scale word.
struct WgmmaOperands {
  const uint4* words;
  uint32_t desc_lo;
  uint32_t scale_word;
};
template <int kN>
__device__ __forceinline__ WgmmaOperands stage_wgmma_operands(const uint4* src) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint4* words = reinterpret_cast<uint4*>(smem);
  uint8_t* b_tile = smem + kWordsSmem * 16;
  for (int i = threadIdx.x; i < kWordsSmem; i += blockDim.x) words[i] = src[i];
  for (int i = threadIdx.x; i < kN * 8; i += blockDim.x) reinterpret_cast<uint4*>(b_tile)[i] = src[kWordsSmem + i];
  __syncthreads();
  return {words, sm90::wgmma_desc_lo_k_sw128(b_tile), src[(threadIdx.x & 31) + 32].z};
}

// Stores a lane's 16 fragment registers to dst unless off: what makes them live where no wgmma
// reads them.
__device__ __forceinline__ void keep_fragments(const uint32_t (&f)[4][4], float* dst, int off) {
  asm volatile(
      "{\n .reg .pred p;\n setp.eq.s32 p, %1, 0;\n"
      " @p st.global.v4.b32 [%0], {%2, %3, %4, %5};\n @p st.global.v4.b32 [%0+16], {%6, %7, %8, %9};\n"
      " @p st.global.v4.b32 [%0+32], {%10, %11, %12, %13};\n @p st.global.v4.b32 [%0+48], {%14, %15, %16, %17};\n}\n"
      :
      : "l"(dst), "r"(off), "r"(f[0][0]), "r"(f[0][1]), "r"(f[0][2]), "r"(f[0][3]), "r"(f[1][0]), "r"(f[1][1]),
        "r"(f[1][2]), "r"(f[1][3]), "r"(f[2][0]), "r"(f[2][1]), "r"(f[2][2]), "r"(f[2][3]), "r"(f[3][0]),
        "r"(f[3][1]), "r"(f[3][2]), "r"(f[3][3])
      : "memory");
}

// 4 warpgroups; each chunk: 4 words a lane -> 16 A registers -> 4 wgmma m64nNk16 on a B tile
// of N tokens x 64 K in shared memory (128-byte swizzle).
template <Wg kV, int kN>
__global__ void __launch_bounds__(512, 1) wgmma_loop(const uint4* src, int iters, int off, long long* cycles,
                                                      float* sink) {
  const auto [words, desc_lo, scale_word] = stage_wgmma_operands<kN>(src);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc[kN / 2] = {};
  uint32_t frag[2][4][4];   // dequantized fragments, two buffers
  uint32_t fixed[2][4][4];  // the fixed sets of kAluNewA (rewritten), kAluFixedA, kDequantBeside
  uint32_t side[8] = {1, 2, 3, 4, 5, 6, 7, 8};  // what the 32 ALU ops a chunk work on
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int q = 0; q < 4; ++q) fixed[b][s][q] = src[2048 + b * 512 + lane * 16 + s * 4 + q].x;
  const long long t0 = clock64();
#pragma unroll 1
  for (int it = 0; it < iters; it += 2) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const uint4 w = words[((it + b) * 64 + warp * 32 + lane) & (kWordsSmem - 1)];
      const uint32_t sc = ue5m3_pair_to_bf16x2_scaled<0>(scale_word + it + b);
      if constexpr (kV == Wg::kAlone) {
        const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
          for (int q = 0; q < 4; ++q) frag[b][s][q] = ws[s];
      } else if constexpr (kV == Wg::kAluNewA || kV == Wg::kAluFixedA) {
        if constexpr (kV == Wg::kAluNewA) {
#pragma unroll
          for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int q = 0; q < 4; ++q)
              asm volatile("lop3.b32 %0, %0, %1, 0x00010001, 0x96;\n" : "+r"(fixed[b][s][q]) : "r"(sc));
        }
#pragma unroll
        for (int k = 0; k < 32; ++k)
          asm volatile("lop3.b32 %0, %0, %1, 0x00010001, 0x96;\n" : "+r"(side[k & 7]) : "r"(sc));
      } else {
        dequant_chunk<layout_of(kV)>(w, sc, frag[b]);
      }
      if constexpr (dequant_only(kV) || kV == Wg::kDequantBeside) {
        // Keeps every chunk's dequantization where no wgmma reads it: four predicated stores of
        // the 16 fragment registers in one asm, never executed (off = 1) but issued, so that
        // the loop pays one ISETP and four STG a chunk for them. A store under a never-taken
        // branch did not keep it: ptxas moved the second chunk of each iteration into that
        // branch, and the loop ran half the dequantization it was timed for.
        keep_fragments(frag[b], sink + threadIdx.x * 16, off);
      }
      if constexpr (!dequant_only(kV)) {
        constexpr bool kFixed = kV == Wg::kDequantBeside || kV == Wg::kAluNewA || kV == Wg::kAluFixedA;
        sm90::wgmma_fence_operands(acc);
        sm90::wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s)
          sm90::WgmmaRs<kN>::mma(acc, kFixed ? fixed[b][s] : frag[b][s], sm90::wgmma_desc_k_sw128(desc_lo + 2 * s), 1);
        sm90::wgmma_commit();
        sm90::wgmma_fence_operands(acc);
        sm90::wgmma_wait<1>();  // the other buffer's group has retired: it may be rewritten
        // Pin all four k steps of the buffer that group read, so that no write of the next
        // chunk moves above the wait.
        auto& retired = kFixed ? fixed[b ^ 1] : frag[b ^ 1];
#pragma unroll
        for (int s = 0; s < 4; ++s) sm90::wgmma_fence_operands(retired[s]);
      }
    }
  }
  if constexpr (!dequant_only(kV)) sm90::wgmma_wait<0>();
  const long long t1 = clock64();
  float sum = 0.f;
  for (float v : acc) sum += v;
  for (uint32_t v : side) sum += static_cast<float>(v);
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

// Fewer, wider warpgroups: kWgs warpgroups, each with kSets sets of 64 weight rows that share
// the chunk's B tile (kSets wgmma per k step, one accumulator set each), the dequantization
// feeding them (kDequant) or the words as they are. Per SM the same 256 rows a chunk as the
// four-warpgroup loop above when kWgs * kSets = 4: the chunk's bookkeeping (wait, fence, commit)
// is paid once per kSets row sets, and a scheduler has kWgs warps to switch between.
template <int kN, int kWgs, int kSets, bool kDequant>
__global__ void __launch_bounds__(kWgs * 128, 1) wgmma_sets_loop(const uint4* src, int iters, long long* cycles,
                                                                  float* sink) {
  const auto [words, desc_lo, scale_word] = stage_wgmma_operands<kN>(src);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc[kSets][kN / 2] = {};
  uint32_t frag[2][kSets][4][4];
  const long long t0 = clock64();
#pragma unroll 1
  for (int it = 0; it < iters; it += 2) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
#pragma unroll
      for (int r = 0; r < kSets; ++r) {
        const uint4 w = words[((it + b) * 64 + (warp * kSets + r) * 32 + lane) & (kWordsSmem - 1)];
        if constexpr (kDequant) {
          dequant_a_fragments(w, ue5m3_pair_to_bf16x2_scaled<0>(scale_word + it + b + r), frag[b][r]);
        } else {
          const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
          for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int q = 0; q < 4; ++q) frag[b][r][s][q] = ws[s];
        }
      }
#pragma unroll
      for (int r = 0; r < kSets; ++r) sm90::wgmma_fence_operands(acc[r]);
      sm90::wgmma_fence();
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int r = 0; r < kSets; ++r)
          sm90::WgmmaRs<kN>::mma(acc[r], frag[b][r][s], sm90::wgmma_desc_k_sw128(desc_lo + 2 * s), 1);
      sm90::wgmma_commit();
#pragma unroll
      for (int r = 0; r < kSets; ++r) sm90::wgmma_fence_operands(acc[r]);
      sm90::wgmma_wait<1>();
#pragma unroll
      for (int r = 0; r < kSets; ++r)
#pragma unroll
        for (int s = 0; s < 4; ++s) sm90::wgmma_fence_operands(frag[b ^ 1][r][s]);
    }
  }
  sm90::wgmma_wait<0>();
  const long long t1 = clock64();
  float sum = 0.f;
  for (auto& set : acc)
    for (float v : set) sum += v;
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

struct Buffers {
  uint4* src = nullptr;
  long long* cycles = nullptr;
  float* sink = nullptr;
  int sms = 0;
};

long long slowest_cta(const Buffers& b, int ctas) {
  std::vector<long long> c(ctas);
  FP4MOE_CUDA_CHECK(cudaMemcpy(c.data(), b.cycles, sizeof(long long) * ctas, cudaMemcpyDeviceToHost));
  long long m = 0;
  for (long long v : c) m = v > m ? v : m;
  return m;
}

// Cycles per 32-bit weight word and warp on one scheduler: each CTA has one warp on each of the
// SM's 4 schedulers, and each warp computes 32 words per iteration.
template <Mma kV>
double mma_cycles_per_word(const Buffers& b, int ctas_per_sm) {
  constexpr int kIters = 4000;
  const int ctas = b.sms * ctas_per_sm;
  mma_loop<kV><<<ctas, 128>>>(b.src, kIters, b.cycles, b.sink);
  FP4MOE_CUDA_CHECK_LAUNCH();
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  return static_cast<double>(slowest_cta(b, ctas)) / (double{kIters} * 32 * ctas_per_sm);
}

// One CTA an SM of a wgmma loop (its operands staged by stage_wgmma_operands<kN>): the slowest
// CTA's cycles.
template <int kN, class Kernel, class... Args>
long long run_wgmma_kernel(const Buffers& b, Kernel kernel, int threads, int iters, Args... args) {
  const int smem = kWordsSmem * 16 + kN * 128;
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<b.sms, threads, smem>>>(b.src, iters, args..., b.cycles, b.sink);
  FP4MOE_CUDA_CHECK_LAUNCH();
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  return slowest_cta(b, b.sms);
}

// Cycles per 64-K chunk of the four warpgroups (one SM).
template <Wg kV, int kN>
double wgmma_cycles_per_chunk(const Buffers& b) {
  constexpr int kIters = 20000;
  return static_cast<double>(run_wgmma_kernel<kN>(b, wgmma_loop<kV, kN>, 512, kIters, 1)) / kIters;
}

// Cycles per 256 rows x 64 K (the four-warpgroup loop's chunk) of the row-set loop, one CTA an SM.
template <int kN, int kWgs, int kSets, bool kDequant>
double wgmma_sets_cycles_per_chunk(const Buffers& b) {
  constexpr int kIters = 20000;
  const long long cycles = run_wgmma_kernel<kN>(b, wgmma_sets_loop<kN, kWgs, kSets, kDequant>, kWgs * 128, kIters);
  return static_cast<double>(cycles) / kIters * 4.0 / (kWgs * kSets);
}

template <int kN>
void wgmma_sets_row(const Buffers& b) {
  std::printf("| %3d | %5.0f | %5.0f | %5.0f | %5.0f | %5.0f | %5.0f |\n", kN,
              wgmma_sets_cycles_per_chunk<kN, 4, 1, false>(b), wgmma_sets_cycles_per_chunk<kN, 4, 1, true>(b),
              wgmma_sets_cycles_per_chunk<kN, 2, 2, false>(b), wgmma_sets_cycles_per_chunk<kN, 2, 2, true>(b),
              wgmma_sets_cycles_per_chunk<kN, 2, 1, false>(b), wgmma_sets_cycles_per_chunk<kN, 2, 1, true>(b));
}

template <int kN>
void wgmma_row(const Buffers& b) {
  std::printf("| %3d | %5.0f | %9.0f | %11.0f | %7.0f | %13.0f | %13.0f | %10.0f | %10.0f | %9.0f | %9.0f | %9.0f | %9.0f |\n",
              kN,
              wgmma_cycles_per_chunk<Wg::kAlone, kN>(b), wgmma_cycles_per_chunk<Wg::kAluNewA, kN>(b),
              wgmma_cycles_per_chunk<Wg::kAluFixedA, kN>(b), wgmma_cycles_per_chunk<Wg::kDequantAlone, kN>(b),
              wgmma_cycles_per_chunk<Wg::kDequantFeeds, kN>(b), wgmma_cycles_per_chunk<Wg::kDequantBeside, kN>(b),
              wgmma_cycles_per_chunk<Wg::kWordAlone, kN>(b), wgmma_cycles_per_chunk<Wg::kWordFeeds, kN>(b),
              wgmma_cycles_per_chunk<Wg::kPairAluAlone, kN>(b), wgmma_cycles_per_chunk<Wg::kPairAluFeeds, kN>(b),
              wgmma_cycles_per_chunk<Wg::kFmaAlone, kN>(b), wgmma_cycles_per_chunk<Wg::kFmaFeeds, kN>(b));
}

int run_all() {
  int device = 0, major = 0, minor = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) {
    std::fprintf(stderr, "fp4moe_dequant_overlap: needs an sm_90 GPU (wgmma), found sm_%d%d\n", major, minor);
    return 1;
  }
  Buffers b;
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&b.sms, cudaDevAttrMultiProcessorCount, device));
  // Random words with the top bit of every byte of a half clear: finite bf16 operands.
  std::vector<uint32_t> host(1 << 16);
  fp4moe::Rng rng(12345);
  for (auto& v : host) v = static_cast<uint32_t>(rng.next_u64()) & 0x3F7F3F7Fu;
  FP4MOE_CUDA_CHECK(cudaMalloc(&b.src, host.size() * 4));
  FP4MOE_CUDA_CHECK(cudaMalloc(&b.cycles, sizeof(long long) * b.sms * 8));
  FP4MOE_CUDA_CHECK(cudaMalloc(&b.sink, sizeof(float) * b.sms * 8 * 512));
  FP4MOE_CUDA_CHECK(cudaMemcpy(b.src, host.data(), host.size() * 4, cudaMemcpyHostToDevice));

  std::printf("decode family, mma.sync m16n8k16: cycles per weight word and warp on one scheduler\n\n");
  std::printf("| CTAs per SM | mma | dequant+mma | mma+7alu | dequant+2mma | word dequant+mma | word-fma dequant+mma |"
              " all-alu pair dequant+mma |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int ctas : {2, 3, 4})
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", ctas, mma_cycles_per_word<Mma::kAlone>(b, ctas),
                mma_cycles_per_word<Mma::kDequant>(b, ctas), mma_cycles_per_word<Mma::kBesideAlu>(b, ctas),
                mma_cycles_per_word<Mma::kDequantTwo>(b, ctas), mma_cycles_per_word<Mma::kWord>(b, ctas),
                mma_cycles_per_word<Mma::kWordFma>(b, ctas), mma_cycles_per_word<Mma::kPairAlu>(b, ctas));
  std::printf("\nprefill family, wgmma m64nNk16 (A from registers), 4 consumer warpgroups: cycles per 64-K chunk\n\n");
  std::printf("| N | wgmma | +alu newA | +alu fixedA | dequant | dequant>wgmma | dequant beside | word alone | word>wgmma |"
              " all-alu pair alone | all-alu pair>wgmma | word-fma alone | word-fma>wgmma |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  wgmma_row<8>(b);
  wgmma_row<16>(b);
  wgmma_row<24>(b);
  wgmma_row<40>(b);
  wgmma_row<64>(b);
  wgmma_row<128>(b);
  std::printf("\nrow sets: W warpgroups x S sets of 64 rows sharing each k step's B tile, cycles per 256 rows x 64 K\n\n");
  std::printf("| N | 4x1 wgmma | 4x1 dequant>wgmma | 2x2 wgmma | 2x2 dequant>wgmma | 2x1 wgmma | 2x1 dequant>wgmma |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  wgmma_sets_row<24>(b);
  wgmma_sets_row<40>(b);
  wgmma_sets_row<64>(b);
  FP4MOE_CUDA_CHECK(cudaFree(b.src));
  FP4MOE_CUDA_CHECK(cudaFree(b.cycles));
  FP4MOE_CUDA_CHECK(cudaFree(b.sink));
  return 0;
}

}  // namespace

int main() {
  try {
    return run_all();
  } catch (const fp4moe::Error& e) {
    std::fprintf(stderr, "fp4moe_dequant_overlap: %s\n", e.what());
    return 1;
  }
}
