// Gathers the token rows of the permutation into one contiguous matrix in fragment order
// (gather_rows.cu), for the prefill family: its tokens then come by the copy engine in whole
// tiles (a gather inside the GEMM would cost a cp.async per 16 bytes on the producer's critical
// path), already permuted the way its register-operand wgmma pairs them with the weights
// (kernels/common/fragment_order.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp4moe::kernels {

// out[pair_row[t][s]] = x[t][0, k) in fragment order, row pitch fragment_order_pitch(k), the
// padding zero, for every token t < tokens and slot s < slots (pair_row [tokens][slots], every
// permuted row named once); k a multiple of 16, x_stride and the pointers 16-byte aligned, at most
// 64 slots. pdl: a programmatic dependent launch (sm_90+) that waits for the routing inside.
// Checks the launch; never synchronizes.
void launch_gather_rows(const uint16_t* x, int64_t x_stride, const int* pair_row, int64_t tokens, int slots,
                        int64_t k, uint16_t* out, bool pdl, cudaStream_t stream);

}  // namespace fp4moe::kernels
