// fragment_order.h - the token layout the prefill family reads: "fragment order".
//
// The prefill family (sm90_w4a16_wgmma_grouped_gemm.cuh) feeds the dequantized weights to wgmma
// as its register operand A. A register fragment of wgmma m64nNk16 gives lane (g, t) of each
// warp the k slots {2t, 2t+1} and {2t+8, 2t+9} of a 16-wide k step, while the prepacked weight
// word of that lane for step s holds K = 16t + 4s + {0, 1, 2, 3} of its 64-K chunk
// (prepack_layout.h: the decode family's order, where each lane's 16 values share one block
// scale and its tokens are 16 contiguous bytes). The MMA only needs A and B to agree on which K
// each k slot carries, so the token rows are stored permuted instead: within every 64-element
// chunk, element
//     K = 16a + 4b + 2h + i        (a, b in 0..3; h, i in 0..1)
// sits at position
//     P = 16b + 8h + 2a + i,
// i.e. k step b, slot 2a + 8h + i, exactly where lane t = a finds it in its word s = b. Pairs of
// consecutive K (i) stay together, so every writer moves 4-byte pieces. Rows are padded to a
// whole chunk with zeros: a partial last chunk scatters its elements over all 64 positions, and
// the padding must be finite (it meets zero weights) - zero it is.
//
// Writers: the gather of FC1's rows (gather_rows.cu) and FC1's epilogue when FC2 is a prefill
// tactic (W4a16GemmParams::act_fragment_order). Reader: the prefill family's token copies.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FP4MOE_FRAGMENT_ORDER_HD __host__ __device__
#else
#define FP4MOE_FRAGMENT_ORDER_HD
#endif

namespace fp4moe::kernels {

inline constexpr int kFragmentChunk = 64;  // elements permuted together (one wgmma stage of K)

// Row pitch (elements) of a fragment-ordered matrix of K columns: whole chunks.
FP4MOE_FRAGMENT_ORDER_HD constexpr int64_t fragment_order_pitch(int64_t k) {
  return (k + kFragmentChunk - 1) / kFragmentChunk * kFragmentChunk;
}

// Position of element k of a row in fragment order.
FP4MOE_FRAGMENT_ORDER_HD constexpr int64_t fragment_order_position(int64_t k) {
  const int64_t j = k & 63;
  const int64_t a = j >> 4, b = (j >> 2) & 3, h = (j >> 1) & 1, i = j & 1;
  return (k & ~int64_t{63}) | (b << 4) | (h << 3) | (a << 1) | i;
}

// The inverse: the element at position p of a fragment-ordered row.
FP4MOE_FRAGMENT_ORDER_HD constexpr int64_t fragment_order_element(int64_t p) {
  const int64_t j = p & 63;
  const int64_t b = j >> 4, h = (j >> 3) & 1, a = (j >> 1) & 3, i = j & 1;
  return (p & ~int64_t{63}) | (a << 4) | (b << 2) | (h << 1) | i;
}

}  // namespace fp4moe::kernels

#undef FP4MOE_FRAGMENT_ORDER_HD
