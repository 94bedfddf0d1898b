// Tensor maps (TMA descriptors) for the copy engine, encoded on the host through the driver
// entry point the CUDA runtime hands out (so nothing links libcuda directly).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fp4moe::kernels {

// A row-major bf16 matrix [rows][k] with `stride` elements between rows, read in boxes of
// 64 K x box_rows rows into 128-byte swizzled shared memory (the wgmma K-major layout).
// Elements past k or rows arrive as zeros. Throws fp4moe::Error naming what is not encodable
// (pointer or stride not 16-byte aligned, sizes out of range).
CUtensorMap make_bf16_rows_tensor_map(const uint16_t* base, int64_t rows, int64_t k, int64_t stride,
                                      int box_rows);

}  // namespace fp4moe::kernels
