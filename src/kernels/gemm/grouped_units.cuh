// The grouped GEMMs' shared work description: per-expert unit counts and their prefix, a unit's
// (expert, row block, token tile), the stream-K partition, and small epilogue helpers. Both
// families (sm80_w4a16_grouped_gemm.cuh, sm90_w4a16_wgmma_grouped_gemm.cuh) use it.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/gemm/w4a16_params.h"

namespace fp4moe::kernels {

namespace w4a16 {

// Exclusive prefix of per-expert unit counts into prefix[0..experts] (prefix[experts] = total).
// Each thread sums a contiguous chunk of experts; a warp-level scan combines the chunk sums.
template <int kThreads>
__device__ void unit_prefix(int* prefix, const int* offsets, int experts, int tokens_per_tile,
                            int row_blocks, int* warp_sums) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per_thread = (experts + kThreads - 1) / kThreads;
  const int begin = min(tid * per_thread, experts), end = min(begin + per_thread, experts);
  auto units = [&](int e) {
    const int n = offsets[e + 1] - offsets[e];
    return (n + tokens_per_tile - 1) / tokens_per_tile * row_blocks;
  };
  int local = 0;
  for (int e = begin; e < end; ++e) local += units(e);
  int incl = local;  // inclusive scan across the warp
  for (int d = 1; d < 32; d <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();  // RAW: warp totals
  int run = incl - local;
  for (int w = 0; w < warp; ++w) run += warp_sums[w];
  for (int e = begin; e < end; ++e) {
    prefix[e] = run;
    run += units(e);
  }
  if (tid == kThreads - 1) prefix[experts] = run;
  __syncthreads();  // RAW: the prefix is read by every thread
}

// The expert whose unit range holds u: the e with prefix[e] <= u < prefix[e+1].
__device__ __forceinline__ int find_expert(const int* prefix, int experts, int u) {
  int lo = 0, hi = experts;  // prefix[lo] <= u < prefix[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= u) lo = mid; else hi = mid;
  }
  return lo;
}

struct Unit {
  int e, rb, tok0, ntok;
};

__device__ __forceinline__ Unit decode_unit(const W4a16GemmParams& p, const int* prefix, int u,
                                            int tokens_per_tile) {
  Unit d;
  d.e = find_expert(prefix, p.num_experts, u);
  const int row0 = p.expert_offsets[d.e];
  const int n_e = p.expert_offsets[d.e + 1] - row0;
  const int tiles_e = (n_e + tokens_per_tile - 1) / tokens_per_tile;
  const int local = u - prefix[d.e];
  const int tt = local % tiles_e;
  d.rb = local / tiles_e;
  d.tok0 = row0 + tt * tokens_per_tile;
  d.ntok = min(tokens_per_tile, n_e - tt * tokens_per_tile);
  return d;
}

// The same units in the prefill family's order: an expert's token tiles, each over all its
// row blocks (row block innermost).
__device__ __forceinline__ Unit decode_unit_rows_inner(const W4a16GemmParams& p, const int* prefix, int u,
                                                       int tokens_per_tile, int row_blocks) {
  Unit d;
  d.e = find_expert(prefix, p.num_experts, u);
  const int row0 = p.expert_offsets[d.e];
  const int n_e = p.expert_offsets[d.e + 1] - row0;
  const int local = u - prefix[d.e];
  const int tt = local / row_blocks;
  d.rb = local - tt * row_blocks;
  d.tok0 = row0 + tt * tokens_per_tile;
  d.ntok = min(tokens_per_tile, n_e - tt * tokens_per_tile);
  return d;
}

// Stream-K partition: iteration i belongs to the CTA c with floor(c*W/G) <= i < floor((c+1)W/G).
__device__ __forceinline__ int64_t range_begin(int64_t c, int64_t w, int64_t g) { return c * w / g; }
__device__ __forceinline__ int cta_of(int64_t i, int64_t w, int64_t g) {
  return static_cast<int>(((i + 1) * g - 1) / w);
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + __expf(-v)); }

__device__ __forceinline__ uint16_t to_bf16_bits(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  return *reinterpret_cast<const uint16_t*>(&b);
}

// A barrier across all CTAs of a grid whose CTAs are all resident at once (the persistent
// kernels size their grids so). Called by one thread per CTA after a CTA barrier; the block's
// writes before that barrier are visible GPU-wide after it. bar[0] counts arrivals, bar[1] is
// the generation; the last arrival resets the count (zero between launches) and bumps the
// generation the others wait on.
__device__ __forceinline__ void grid_barrier(unsigned* bar, unsigned ctas) {
  unsigned gen;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(gen) : "l"(bar + 1) : "memory");
  __threadfence();  // release: this CTA's writes, ordered before it by the caller's barrier
  if (atomicAdd(bar, 1u) == ctas - 1) {
    bar[0] = 0;
    __threadfence();
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(bar + 1), "r"(gen + 1) : "memory");
  } else {
    unsigned now;
    do {
      __nanosleep(256);
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(now) : "l"(bar + 1) : "memory");
    } while (now == gen);
  }
}

// Programmatic dependent launch (sm_90+): wait for the previous kernel's results; let the next
// kernel's CTAs be scheduled. No-ops before sm_90.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace w4a16

}  // namespace fp4moe::kernels
