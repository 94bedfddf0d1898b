// prepack_layout.h - the kernel order of NVFP4 weights for the w4a16 families, shared by the
// host reference prepacker, the GPU prepack kernel and (implicitly) the GEMM's loads.
//
// A weight matrix [rows, K] (checkpoint layout: codes [rows][K/2], scales [rows][K/16]) becomes
// rowtiles = ceil(rows / 16) x kgroups = ceil(K / 256) blocks, K group major (block (rt, kg) at
// kg * rowtiles + rt), so that one pipeline stage of a CTA - its consecutive row tiles at one K
// group - is one contiguous run of memory:
//   weights: 2048 B per (rowtile, kgroup) = [chunk c: 4][lane: 32][word s: 4] x 32 bit
//   scales:   256 B per (rowtile, kgroup) = [lane: 32][8 B], byte 2c = row g, 2c+1 = row g+8,
//             as UE5M3 codes (dequant_nvfp4.cuh); a negative E4M3 scale flips the sign bits of
//             its block's codes, a zero scale zeroes them, so every prepacked scale is positive
// Lane l = 4g + t holds, for 64-K chunk c and MMA step s, the 8 values
//   rows {g, g+8} x k = 256*kgroup + 64c + 16t + 4s + {0,1,2,3}
// in the word pair layout of dequant_nvfp4.cuh (words 2h, 2h + 1 together: slots V0..V7 step 2h,
// V8..V15 step 2h + 1; within a step V0 V1 = row g k+0,+1; V2 V3 = row g+8 k+0,+1; V4 V5 = row g
// k+2,+3; V6 V7 = row g+8 k+2,+3), and the block scale of block
// 16*kgroup + 4c + t of rows g and g+8. That is: the MMA's k slots are permuted so that each
// lane's 16 values of a row fall into one 16-element block (one scale per row per chunk), and
// the B operand (tokens) is read with the same permutation: 16 contiguous bytes per lane.
// Rows or K beyond the matrix are code 0 with scale 0 (they contribute exact zeros).
//
// FC1 (gate and up, I rows each) is interleaved in 8-row groups: row tile q holds gate rows
// 8q..8q+7 as its rows 0-7 and up rows 8q..8q+7 as rows 8-15, so the thread holding gate row
// j of a token also holds up row j: SwiGLU happens in registers.
#pragma once

#include <cstdint>

#include "kernels/common/dequant_nvfp4.cuh"

namespace fp4moe::kernels {

inline constexpr int kPrepackRowTile = 16;
inline constexpr int kPrepackKGroup = 256;
inline constexpr int kPrepackWeightBytes = 2048;  // per (rowtile, kgroup)
inline constexpr int kPrepackScaleBytes = 256;

struct PrepackShape {
  int64_t rows = 0;  // packed rows (FC1: 2 * I)
  int64_t k = 0;
  __host__ __device__ int64_t rowtiles() const { return (rows + 15) / 16; }
  __host__ __device__ int64_t kgroups() const { return (k + 255) / 256; }
  __host__ __device__ int64_t weight_bytes() const { return rowtiles() * kgroups() * kPrepackWeightBytes; }
  __host__ __device__ int64_t scale_bytes() const { return rowtiles() * kgroups() * kPrepackScaleBytes; }
};

// Where packed row R comes from: matrix 0 or 1 (FC1: gate / up) and its row, or -1 (padding).
struct SourceRow {
  int matrix;
  int64_t row;
};
__host__ __device__ inline SourceRow prepack_source_row(int64_t packed_row, int64_t src_rows,
                                                        bool interleave_gate_up) {
  if (!interleave_gate_up) return {0, packed_row < src_rows ? packed_row : -1};
  const int64_t q = packed_row / 16, w = packed_row % 16;
  const int64_t r = 8 * q + (w & 7);
  return {w < 8 ? 0 : 1, r < src_rows ? r : -1};
}

// A checkpoint-layout NVFP4 matrix seen by the prepacker.
struct Nvfp4View {
  const uint8_t* codes = nullptr;   // [rows][k/2]
  const uint8_t* scales = nullptr;  // [rows][k/16] E4M3
};

__host__ __device__ inline uint32_t view_code(const Nvfp4View& v, int64_t k, int64_t row, int64_t col) {
  const uint8_t b = v.codes[row * (k / 2) + col / 2];
  return (col & 1) ? (b >> 4) : (b & 0xF);
}

// The prepacked word pair at (rowtile, kgroup, chunk c, lane, pair h): the words of steps 2h
// (low 32 bits) and 2h + 1.
__host__ __device__ inline uint64_t prepack_pair(const Nvfp4View* src, int64_t src_rows, int64_t k,
                                                 bool interleave, int64_t rowtile, int64_t kgroup,
                                                 int c, int lane, int h) {
  const int g = lane >> 2, t = lane & 3;
  uint64_t pair = 0;
  for (int odd = 0; odd < 2; ++odd) {  // step 2h, then 2h + 1
    const int64_t k0 = kgroup * 256 + 64 * c + 16 * t + 4 * (2 * h + odd);
    for (int half = 0; half < 2; ++half) {  // row g, row g + 8
      const SourceRow sr = prepack_source_row(rowtile * 16 + g + 8 * half, src_rows, interleave);
      if (sr.row < 0) continue;
      for (int i = 0; i < 4; ++i) {
        const int64_t col = k0 + i;
        if (col >= k) continue;
        uint32_t code = view_code(src[sr.matrix], k, sr.row, col);
        const uint8_t scale = src[sr.matrix].scales[sr.row * (k / 16) + col / 16];
        if ((scale & 0x7F) == 0) code = 0;  // a zero block: exact zeros whatever the code
        if (scale & 0x80) code ^= 0x8;      // a negative scale moves into the codes' signs
        // V slot: k +0,+1 -> V0,V1 (row g) / V2,V3 (row g+8); k +2,+3 -> V4,V5 / V6,V7; +8 for
        // the odd step.
        const int v = 8 * odd + (i < 2 ? 0 : 4) + 2 * half + (i & 1);
        pair |= fp4_pair_place(code, v);
      }
    }
  }
  return pair;
}

// The prepacked word at (rowtile, kgroup, chunk c, lane, step s): its half of pair s / 2.
__host__ __device__ inline uint32_t prepack_word(const Nvfp4View* src, int64_t src_rows, int64_t k,
                                                 bool interleave, int64_t rowtile, int64_t kgroup,
                                                 int c, int lane, int s) {
  const uint64_t pair = prepack_pair(src, src_rows, k, interleave, rowtile, kgroup, c, lane, s >> 1);
  return static_cast<uint32_t>((s & 1) ? pair >> 32 : pair);
}

// Scale byte b (0..7) of lane `lane` at (rowtile, kgroup).
__host__ __device__ inline uint8_t prepack_scale(const Nvfp4View* src, int64_t src_rows, int64_t k,
                                                 bool interleave, int64_t rowtile, int64_t kgroup,
                                                 int lane, int b) {
  const int g = lane >> 2, t = lane & 3, c = b >> 1, half = b & 1;
  const int64_t block = kgroup * 16 + 4 * c + t;
  if (block * 16 >= k) return 0;
  const SourceRow sr = prepack_source_row(rowtile * 16 + g + 8 * half, src_rows, interleave);
  if (sr.row < 0) return 0;
  return e4m3_to_ue5m3(src[sr.matrix].scales[sr.row * (k / 16) + block] & 0x7F);
}

}  // namespace fp4moe::kernels
