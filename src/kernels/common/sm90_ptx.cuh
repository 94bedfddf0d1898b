// Thin wrappers over the sm_90 instructions of the prefill family: mbarriers, the bulk copy
// engine (TMA), wgmma and register reallocation. Each names the
// instruction it emits (PTX ISA 8.x). Only code compiled for sm_90a may call them.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: nothing from libcuda is linked)

#include <cstdint>

namespace fp4moe::ptx::sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier (shared memory, CTA scope) --------------------------------------------------
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals));
}
// Makes the initialized barriers visible to the async proxy (the copy engine's complete_tx).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival that also expects `bytes` more from copies completing on this barrier.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Spins until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}

// Orders this thread's later async-proxy accesses (bulk copies) after the generic-proxy writes
// it has observed: global data that other CTAs stored and released, read by the copy engine.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// ---- bulk copies, global -> shared, completing on an mbarrier -------------------------------
// cp.async.bulk: `bytes` (a multiple of 16, both addresses 16-byte aligned) as one transfer.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
// createpolicy.fractional.L2::evict_first (fraction 1.0): an L2 policy for bytes read once.
__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// bulk_copy_g2s with an L2 cache policy (cp.async.bulk ... .L2::cache_hint).
__device__ __forceinline__ void bulk_copy_g2s_evict(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                    uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}
// cp.async.bulk.prefetch.L2: `bytes` (a multiple of 16, 16-byte aligned) into L2; no completion
// mechanism, a hint that a later load will hit.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}
// cp.async.bulk.tensor.3d: the box of `map` at (c0 = innermost, c1, c2) into dst.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}
// cp.async.bulk.tensor.2d: the box of `map` at (c0 = innermost, c1) into dst, swizzled as the
// map says; elements outside the tensor arrive as zeros and count toward the bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

// ---- register reallocation between warpgroups (setmaxnreg) ---------------------------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- wgmma ----------------------------------------------------------------------------------
// Shared-memory matrix descriptor of a K-major tile with 128-byte swizzle: rows of 128 bytes
// (64 bf16 of K), 8-row groups 1024 bytes apart (the stride byte offset), the tile 1024-byte
// aligned. Stepping K by 16 elements inside the 128-byte row adds 32 bytes to the start address
// (descriptor + 2): the swizzle is a function of the address bits, so the hardware applies it
// to the advanced address exactly as the copy engine did.
// In two words: the low one (start address, leading offset) moves with the tile, the high one
// (stride, swizzle) is the same for every tile of the layout. A kernel steps K with a 32-bit add
// to the low word (the start field's 14 bits hold any shared-memory address + 96 B) and keeps
// the high one a constant: for a 64-bit add per wgmma ptxas emitted an add with carry and a
// register move more on each (SASS, sm_90a).
inline constexpr uint32_t kWgmmaDescHiKSw128 = (1024u >> 4)  // stride: 8 rows x 128 B (bits 32-45)
                                               | (1u << 30);  // layout type 128-byte swizzle (bits 62-63)
__device__ __forceinline__ uint32_t wgmma_desc_lo_k_sw128(const void* tile) {
  constexpr uint32_t kLeading = 1;  // unused by swizzled K-major layouts (bits 16-29)
  return ((smem_addr(tile) & 0x3FFFFu) >> 4) | (kLeading << 16);
}
__device__ __forceinline__ uint64_t wgmma_desc_k_sw128(uint32_t lo) {
  return (static_cast<uint64_t>(kWgmmaDescHiKSw128) << 32) | lo;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Pins the accumulators in place around wgmma issue and wait: without it the compiler may read
// or move them while the asynchronous MMA still owns them.
template <int kN>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for a register A operand: keeps the registers of an in-flight wgmma from being
// reused before the wait that retires it.
template <int kN>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&a)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// The MMA itself, wgmma.mma_async m64nNk16 with A from registers, for every N: WgmmaRs<N> in
// sm90_wgmma_rs.cuh (generated: one wrapper per width).

}  // namespace fp4moe::ptx::sm90
