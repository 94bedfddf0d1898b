// The grouped GEMMs' shared work description: per-expert unit counts and their prefix, a unit's
// (expert, row block, token tile), the stream-K partition, and small epilogue helpers. Both
// families (sm80_w4a16_grouped_gemm.cuh, sm90_w4a16_wgmma_grouped_gemm.cuh) use it.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/ptx.cuh"
#include "kernels/common/sm90_ptx.cuh"
#include "kernels/gemm/unit_cursor.h"
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

// x sigmoid(x) with the fast division (MUFU.RCP and a multiply; 2 ulp, under a bf16 output's
// rounding): the IEEE division took 7 instructions and a slow-path branch per value, a sixth of
// the prefill FC1 epilogue. For v < -87 the divisor overflows and the result is -0, as it rounds
// to in bf16 anyway.
__device__ __forceinline__ float silu(float v) { return __fdividef(v, 1.0f + __expf(-v)); }

__device__ __forceinline__ uint16_t to_bf16_bits(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  return *reinterpret_cast<const uint16_t*>(&b);
}

// Waits until every unit's rows are out, whichever CTAs took them - a barrier that counts units,
// not CTAs, so it never waits for a CTA that is not resident. A persistent grid sized to what the
// GPU holds is not sure to be resident whole: another kernel (a second layer on another stream,
// a communication kernel) can hold some of its places, and a barrier over gridDim.x CTAs then
// waited for ever for CTAs that could only start once the waiting ones left. Units are drawn from
// a ticket counter by CTAs that run, so the units counted here all finish; a CTA that starts
// later finds no unit left and passes at once.
// Called by one thread per CTA after a CTA (or named) barrier that orders the CTA's row stores
// before it; `mine` is the number of units this CTA took, `units` the kernel's total. bar[0]
// counts units out, bar[1] CTAs past; the last CTA past resets both (zero between launches).
__device__ __forceinline__ void wait_all_units_out(unsigned* bar, unsigned mine, unsigned units, unsigned ctas) {
  __threadfence();  // release: this CTA's rows, ordered before it by the caller's barrier
  if (mine) atomicAdd(bar, mine);
  unsigned out;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(out) : "l"(bar) : "memory");
    if (out >= units) break;
    __nanosleep(256);
  }
  // Every CTA has read the final count before the last one resets it (acq_rel: the reset stores
  // are ordered after the other CTAs' reads, not only by the branch).
  if (static_cast<unsigned>(ptx::atomic_add_acq_rel_gpu(reinterpret_cast<int*>(bar + 1), 1)) == ctas - 1) {
    bar[0] = 0;
    bar[1] = 0;
  }
}

// Two floats as one bf16x2 word (lo in the low half), rounded to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t{to_bf16_bits(lo)} | (uint32_t{to_bf16_bits(hi)} << 16);
}

// Finalize, phase 2 (every row in rows_out: after wait_all_units_out, or in the next launch):
// out[token] = the sum of its slots' rows times their routing weights, in slot order (bitwise
// reproducible), 8 rows of a token per thread (one 16-byte load a slot; rows is a multiple of
// 16), spread over the whole grid. The weights are applied here, not in the GEMM's epilogue:
// there a weight is one more global load per token and unit, on the epilogue's critical path
// (with glm5-tp8's FC2, K = 256, every K group ends a unit), while here the threads of a token
// share its slots' weights through L1. kThreads threads of each CTA take part, `thread` being
// this one's index among them.
inline constexpr int kFinalizeRowsPerThread = 8;  // bf16 rows: one 16-byte load per slot

// kBatch: slots loaded before any is added. One slot after another, each sum waited a dependent
// chain of two global loads (the slot's row, then its weight and values), and the prefill FC2
// spent ~38% of its warp samples here and at the barrier before it (ncu, glm5, T = 4096, H200);
// eight at a time, a top-8 model with a shared expert (9 slots) still waited two chains a token.
// A batch costs 4 registers a slot for the values: the slot-sum kernel takes 16, the prefill
// FC2 as many as its launch's registers hold (W4a16WgmmaTraits::kSlotBatch: 16, 12, 10 or 8).
// The sum keeps slot order, so the bits do not depend on kBatch.
template <int kThreads, int kBatch = 16>
__device__ void finalize_sum_slots(const W4a16GemmParams& p, int thread) {
  constexpr int kPer = kFinalizeRowsPerThread;
  const int64_t groups = p.rows / kPer;
  const int64_t items = p.x_rows / p.slots * groups;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + thread; i < items; i += stride) {
    const int64_t token = i / groups, row = (i - token * groups) * kPer;
    const int* pair = p.pair_row + token * p.slots;
    float sum[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) sum[j] = 0.f;
    for (int s0 = 0; s0 < p.slots; s0 += kBatch) {
      int r[kBatch];
      float w[kBatch];
      uint4 v[kBatch];
#pragma unroll
      for (int q = 0; q < kBatch; ++q) r[q] = s0 + q < p.slots ? pair[s0 + q] : -1;
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        if (r[q] < 0) continue;
        w[q] = p.row_weight[r[q]];
        v[q] = __ldcg(reinterpret_cast<const uint4*>(p.rows_out + static_cast<int64_t>(r[q]) * p.rows + row));
      }
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        if (r[q] < 0) continue;
        const uint32_t words[4] = {v[q].x, v[q].y, v[q].z, v[q].w};
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          // bf16 -> fp32 is exact: the bits move to the top half.
          const uint32_t bits = j & 1 ? words[j / 2] & 0xffff0000u : words[j / 2] << 16;
          sum[j] = fmaf(w[q], __uint_as_float(bits), sum[j]);
        }
      }
    }
    uint32_t packed[kPer / 2];
#pragma unroll
    for (int j = 0; j < kPer / 2; ++j)
      packed[j] = pack_bf16x2(sum[2 * j], sum[2 * j + 1]);
    *reinterpret_cast<uint4*>(p.out + token * p.rows + row) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
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

// Clock accounting (W4a16GemmParams::sm_clock). Under the power cap the SMs run below the clock
// NVML reports (the H200: 1.42-1.67 GHz in the prefill GEMMs while NVML read 1980 MHz,
// docs/PERFORMANCE.md), so the layer measures it where it runs: minus the stamps at thread 0's
// entry, plus those at its exit. Fire-and-forget atomics (their results unused: RED), one
// thread of one CTA: nothing the other threads wait for.
__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
__device__ __forceinline__ void sm_clock_enter(unsigned long long* acc) {
  if (acc != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    atomicAdd(acc, 0ull - static_cast<unsigned long long>(clock64()));
    atomicAdd(acc + 1, 0ull - global_timer_ns());
  }
}
__device__ __forceinline__ void sm_clock_exit(unsigned long long* acc) {
  if (acc != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    atomicAdd(acc, static_cast<unsigned long long>(clock64()));
    atomicAdd(acc + 1, global_timer_ns());
    atomicAdd(acc + 2, 1ull);
  }
}

// The decode family's bulk weight copies (sm_90+; see sm80_w4a16_grouped_gemm.cuh). The
// kernel calls them only where __CUDA_ARCH__ >= 900; elsewhere they compile to nothing.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ptx::sm90::mbarrier_init(bar, arrivals);
#endif
}
__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ptx::sm90::fence_mbarrier_init();
#endif
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ptx::sm90::mbarrier_arrive_expect_tx(bar, bytes);
#endif
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ptx::sm90::mbarrier_wait(bar, parity);
#endif
}
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ptx::sm90::bulk_copy_g2s(dst, src, bytes, bar);
#endif
}

// cp.async.bulk.prefetch.L2: `bytes` (a multiple of 16, 16-byte aligned) towards L2, no completion.
__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ptx::sm90::bulk_prefetch_l2(src, bytes);
#endif
}

}  // namespace w4a16

}  // namespace fp4moe::kernels
