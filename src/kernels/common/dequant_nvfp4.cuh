// NVFP4 -> BF16 dequantization in registers, for weights prepacked into kernel order
// (src/runtime/prepack.h describes the layout; this file and the prepacker must agree).
//
// The trick: an E2M1 nibble s.e1.e0.m placed into a bf16 as  sign -> bit 15,
// e1.e0 -> exponent bits 8..7, m -> mantissa bit 6  reads as  e2m1 * 2^-126  exactly, for the
// subnormal 0.5 (exponent 0) too. The E4M3 block scale is turned into the bf16
// e4m3 * 2^119 (exact; largest 448 * 2^119 < 2^128), and one bf16x2 multiply gives
//   (e2m1 * 2^-126) * (e4m3 * 2^119) = e2m1 * e4m3 * 2^-7,
// exact in bf16 (at most 5 significant bits) and never subnormal (>= 2^-17). The epilogue
// multiplies the fp32 accumulator by kDequantEpilogueFactor * global scale.
//
// Prepacked 32-bit word = 8 values V0..V7 -> the 4 bf16x2 registers of one m16n8k16
// A-fragment step (reg0 = V0|V1, reg1 = V2|V3, reg2 = V4|V5, reg3 = V6|V7; low half = first).
// Bit positions of each value's (m, e0, e1, s) in the word:
//   V0  6  7  8 15 | V1 22 23 24 31      reg0 = w & M                      (M = 0x81C081C0)
//   V2  3  4  5 12 | V3 19 20 21 28      reg1 = (w << 3) & M
//   V4  0  1  2  9 | V5 16 17 18 25      reg2 = (w << 6) & M
//   V6 10 11 13 14 | V7 26 27 29 30      reg3 = (w >> 4 & 0x00C000C0) | (w >> 5 & 0x01000100)
//                                                | (w << 1 & 0x80008000)
// Every bit of the word is used once. No four shifts of the pattern M tile 32 bits (a search
// over all rotations says so), hence the three-piece reg3: 8 LOP3/SHF + 3 IMAD.SHL per 8
// values instead of 16 for the plain nibble order.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace fp4moe::kernels {

inline constexpr float kDequantEpilogueFactor = 128.0f;  // 2^7

// Value slot v (0..7) -> bit positions of (m, e0, e1, sign) in the prepacked word.
struct Fp4BitSlot {
  int m, e0, e1, s;
};
__host__ __device__ constexpr Fp4BitSlot fp4_word_slot(int v) {
  switch (v) {
    case 0: return {6, 7, 8, 15};
    case 1: return {22, 23, 24, 31};
    case 2: return {3, 4, 5, 12};
    case 3: return {19, 20, 21, 28};
    case 4: return {0, 1, 2, 9};
    case 5: return {16, 17, 18, 25};
    case 6: return {10, 11, 13, 14};
    default: return {26, 27, 29, 30};
  }
}

// Host and device: place E2M1 code `code` (s.e1.e0.m) into slot v of a prepacked word.
__host__ __device__ constexpr uint32_t fp4_word_place(uint32_t code, int v) {
  const Fp4BitSlot p = fp4_word_slot(v);
  return ((code & 1u) << p.m) | (((code >> 1) & 1u) << p.e0) | (((code >> 2) & 1u) << p.e1) |
         (((code >> 3) & 1u) << p.s);
}

#ifdef __CUDACC__
// 8 prepacked E2M1 values -> 4 bf16x2 registers holding e2m1 * 2^-126.
__device__ __forceinline__ void fp4x8_to_bf16x2_raw(uint32_t w, uint32_t (&r)[4]) {
  constexpr uint32_t kMask = 0x81C081C0u;
  r[0] = w & kMask;
  r[1] = (w << 3) & kMask;
  r[2] = (w << 6) & kMask;
  r[3] = ((w >> 4) & 0x00C000C0u) | ((w >> 5) & 0x01000100u) | ((w << 1) & 0x80008000u);
}

// E4M3 code (low 8 bits of b) -> bf16x2 holding (e4m3 * 2^119, e4m3 * 2^119).
//   bits << 20 read as fp32 give e4m3 * 2^-120, subnormal e4m3 included (fp32 subnormals are
//   kept: no -ftz); * 2^127 makes it a normal float e4m3 * 2^7; adding 112 to the exponent
//   field gives e4m3 * 2^119.
__device__ __forceinline__ uint32_t e4m3_to_bf16x2_scaled(uint32_t b) {
  float f = __uint_as_float((b & 0x7Fu) << 20) * 0x1p127f;
  f = __uint_as_float(__float_as_uint(f) + (112u << 23));
  const __nv_bfloat162 v = __floats2bfloat162_rn(f, f);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                   *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// One A-fragment step: 8 values of a prepacked word, scaled by the row-g and row-(g+8)
// block scales (as bf16x2 from e4m3_to_bf16x2_scaled).
__device__ __forceinline__ void dequant_a_fragment(uint32_t w, uint32_t scale_g, uint32_t scale_g8,
                                                   uint32_t (&a)[4]) {
  uint32_t raw[4];
  fp4x8_to_bf16x2_raw(w, raw);
  a[0] = bf16x2_mul(raw[0], scale_g);   // row g,   k +0 +1
  a[1] = bf16x2_mul(raw[1], scale_g8);  // row g+8, k +0 +1
  a[2] = bf16x2_mul(raw[2], scale_g);   // row g,   k +2 +3
  a[3] = bf16x2_mul(raw[3], scale_g8);  // row g+8, k +2 +3
}
#endif

}  // namespace fp4moe::kernels
