// The decode family's finalize, phase 2 (finalize_slots.cu): out[token] = the sum of the
// token's slot rows that FC2 wrote to rows_out, times their routing weights - in slot order, so bitwise
// reproducible. A kernel of its own rather than a grid barrier inside FC2: the decode kernels
// run several CTAs per SM, and with programmatic dependent launch some of FC2's CTAs become
// resident beside FC1's, under FC1's shared-memory carveout, so that not every CTA of FC2's
// grid is guaranteed a place at once - a grid barrier could wait forever. (The prefill
// family's FC2 keeps its phase 2: its units come from a ticket counter, drawn only by CTAs that
// run, so it waits for every unit's rows rather than for every CTA - wait_all_units_out.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp4moe::kernels {

// out[t][0, rows) bf16 = sum over s < slots of row_weight[r] * rows_out[r][0, rows) (bf16 rows,
// fp32 sum) with r = pair_row[t][s], t < tokens; rows a multiple of 8, pointers 16-byte
// aligned. pdl: a programmatic dependent launch (sm_90+) that waits for FC2 inside. Checks the
// launch; never synchronizes.
void launch_finalize_slots(const uint16_t* rows_out, const float* row_weight, const int* pair_row, int slots,
                           int64_t tokens, int64_t rows, uint16_t* out, bool pdl, cudaStream_t stream);

}  // namespace fp4moe::kernels
