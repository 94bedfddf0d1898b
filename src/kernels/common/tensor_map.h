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

// Prepacked NVFP4 weights (kernels/moe/prepack_layout.h): `blocks` consecutive (row tile, K
// group) blocks of 2048 bytes, each 4 chunks of 512 bytes (64 K of 16 rows). One box is chunk c
// of `box_blocks` consecutive blocks, landing as box_blocks x 512 contiguous bytes: the copy of a
// stage's weights for a whole row block in one instruction. Blocks past the end arrive as zeros.
CUtensorMap make_prepacked_chunks_tensor_map(const uint8_t* base, int64_t blocks, int box_blocks);

}  // namespace fp4moe::kernels
