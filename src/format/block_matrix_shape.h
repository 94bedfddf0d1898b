// The check every block-quantized matrix (NVFP4, MXFP4) makes before an element is read: its
// shape, and its code and scale buffers against that shape (a matrix a caller put together may
// hold fewer bytes than its rows x cols need).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp4moe/error.h"

namespace fp4moe::detail {

// `what` names the matrix, `format` the block format; `data_name` and `scales_name` the two
// buffers as the checkpoint calls them (NVFP4: weight, weight_scale).
inline void check_block_matrix_shape(int64_t rows, int64_t cols, size_t data_bytes, size_t scale_bytes, int block,
                                     const char* what, const char* format, const char* data_name,
                                     const char* scales_name) {
  FP4MOE_CHECK(rows >= 0 && cols >= 0, what, ": negative shape [", rows, ", ", cols, "]");
  checked_size(rows, cols, what);
  FP4MOE_CHECK(cols % block == 0, what, ": K = ", cols, " is not a multiple of the ", format, " block size ", block);
  FP4MOE_CHECK(static_cast<int64_t>(data_bytes) == rows * cols / 2, what, ": ", data_name, " holds ", data_bytes,
               " bytes, shape [", rows, ", ", cols, "] needs ", rows * cols / 2);
  FP4MOE_CHECK(static_cast<int64_t>(scale_bytes) == rows * cols / block, what, ": ", scales_name, " holds ",
               scale_bytes, " bytes, shape [", rows, ", ", cols, "] needs ", rows * cols / block);
}

}  // namespace fp4moe::detail
