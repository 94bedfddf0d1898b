// Thin wrappers over the PTX instructions the kernels use (sm_80+). Each names the
// instruction it emits; none hides control flow.
#pragma once

#include <cstdint>

namespace fp4moe::ptx {

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: copies 16 bytes, L2 only (weights
// and tokens are streamed, not reused from L1). src_bytes = 0 zero-fills the destination
// (rows past an expert's tokens, K past the matrix) without touching global memory.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: D = A . B + D.
//   a[4]: bf16x2, rows {g, g+8} x k {2t, 2t+1, 2t+8, 2t+9}   (g = lane / 4, t = lane % 4)
//   b[2]: bf16x2, k {2t, 2t+1} and {2t+8, 2t+9}, column n = g
//   d[4]: f32, rows {g, g, g+8, g+8} x columns {2t, 2t+1, 2t, 2t+1}
// (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type")
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// bar.sync id, threads: a barrier (with CTA-scope memory ordering, as __syncthreads) among
// `threads` threads of the CTA (a multiple of 32), for when the others have left or wait elsewhere.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// atom.acq_rel.gpu.global.add.s32: returns the old value; releases this thread's (and, through
// a preceding CTA barrier, its CTA's) writes and acquires those released to the same address.
__device__ __forceinline__ int atomic_add_acq_rel_gpu(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// ld.acquire.gpu.global.s32: a load that acquires what was released to the same address (a
// counter another CTA raised after its stores).
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// red.release.gpu.global.add.s32: adds without returning (the issuing thread does not wait for
// the round trip); releases this thread's (and, through a preceding CTA or named barrier, its
// CTA's) writes to whoever acquires the counter.
__device__ __forceinline__ void red_release_gpu_add(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint4 ld_shared_v4(const void* p) {
  uint4 v;
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(a));
  return v;
}


__device__ __forceinline__ uint2 ld_shared_v2(const void* p) {
  uint2 v;
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a));
  return v;
}

// An 8 x 8 matrix of 16-bit values held as an mma accumulator fragment (lane 4 g + t: row g,
// columns 2t, 2t+1 in one 32-bit register, the first in the low half), transposed across the
// warp: lane 4 g + t receives row g of the transpose, i.e. column g, rows 2t and 2t + 1 (sm_75+).
// Every lane of the warp executes it.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}

// Loads that bypass L1: data written by other CTAs of the same launch (split-K partials,
// finalize rows) must be read from L2, where their __threadfence()d stores are visible.
__device__ __forceinline__ float ld_cg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ float4 ld_cg(const float4* p) { return __ldcg(p); }

}  // namespace fp4moe::ptx
