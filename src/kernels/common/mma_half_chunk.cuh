// mma_half_chunk.cuh - the inner step of the mma.sync families that stream weights into
// registers (w4a16_mma, w4a16_fused): half of a 64-K chunk, two MMA k steps, every weight word
// dequantized once for all of the lane's n8 token tiles.
#pragma once

#include <cstdint>

#include "kernels/common/dequant_nvfp4.cuh"
#include "kernels/common/ptx.cuh"

namespace fp4moe::kernels {

// Steps 2h and 2h + 1 of a chunk for kRpw row tiles x kNt token tiles. aw[r]: row tile r's four
// prepacked words of the chunk (word s: k step s), sc[r] its block-scale pair (chunk_scales);
// b[j]: token tile j's B fragments at this half (x, y: step 2h; z, w: step 2h + 1). h is a
// compile-time constant once the caller's loop over the halves is unrolled.
template <int kRpw, int kNt>
__device__ __forceinline__ void mma_half_chunk(float (&acc)[kRpw][kNt][4], const uint4 (&aw)[kRpw],
                                               const uint32_t (&sc)[kRpw], const uint4 (&b)[kNt], int h) {
#pragma unroll
  for (int r = 0; r < kRpw; ++r) {
    // Steps 2h and 2h + 1 come from one word pair (dequant_nvfp4.cuh).
    uint32_t a0[4], a1[4];
    dequant_a_fragment_half(aw[r], h, sc[r], a0, a1);
#pragma unroll
    for (int j = 0; j < kNt; ++j) ptx::mma_bf16_m16n8k16(acc[r][j], a0, b[j].x, b[j].y);
#pragma unroll
    for (int j = 0; j < kNt; ++j) ptx::mma_bf16_m16n8k16(acc[r][j], a1, b[j].z, b[j].w);
  }
}

}  // namespace fp4moe::kernels
