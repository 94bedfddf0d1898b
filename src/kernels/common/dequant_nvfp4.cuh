// NVFP4 -> BF16 dequantization in registers, for weights prepacked into kernel order
// (src/kernels/moe/prepack_layout.h describes the layout; this file and the prepacker must agree).
//
// The trick: an E2M1 nibble s.e1.e0.m placed into a bf16 as  sign -> bit 15,
// e1.e0 -> exponent bits 8..7, m -> mantissa bit 6  reads as  e2m1 * 2^-126  exactly, for the
// subnormal 0.5 (exponent 0) too. The block scale becomes the bf16 scale * 2^119 (exact;
// largest 448 * 2^119 < 2^128), and one bf16x2 multiply gives
//   (e2m1 * 2^-126) * (scale * 2^119) = e2m1 * scale * 2^-7,
// exact in bf16 (at most 5 significant bits) and never subnormal (>= 2^-17). The epilogue
// multiplies the fp32 accumulator by kDequantEpilogueFactor * global scale.
//
// Block scales are prepacked as "UE5M3": the E4M3 value (1 + f/8) * 2^e, e in [-9, 8], stored
// normalized as (e + 9) << 3 | f - subnormal E4M3 scales become normal here, so that the bf16
// of scale * 2^119 is  (code << 4) + (237 << 7)  (exponent e + 246 = (e + 9) + 237), two
// instructions for a duplicated bf16x2 (PRMT, IMAD) instead of a float conversion.
// Prepacked 32-bit word = 8 values V0..V7 -> the 4 bf16x2 registers of one m16n8k16
// A-fragment step (reg0 = V0|V1, reg1 = V2|V3, reg2 = V4|V5, reg3 = V6|V7; low half = first).
// Bit positions of each value's (m, e0, e1, s) in the word:
//   V0  6  7  8 15 | V1 22 23 24 31      reg0 = w & M                      (M = 0x81C081C0)
//   V2  2  3  4 11 | V3 18 19 20 27      reg1 = (w << 4) & M
//   V4 28 29 30  5 | V5 12 13 14 21      reg2 = rotl(w, 10) & M
//   V6  0  1 10  9 | V7 16 17 26 25      reg3 = (w << 6 & 0x80C080C0) | (w >> 2 & 0x01000100)
// Every bit of the word is used once. No four shifts or rotations of the pattern M tile 32
// bits (a search over all of them, and over byte permutes, says so), so one register takes two
// pieces; with reg0 unshifted, three layouts do it in two, this is one of them: 9 LOP3 / SHF /
// IMAD.SHL per 8 values (ptxas, sm_90a) against 11 for a layout of shifts only (three pieces)
// and 16 for the plain nibble order. In the decode family a word feeds one MMA (8-token tiles), so
// these instructions are most of what the SM issues per MMA. Two words laid out together take 16
// per 16 values at best (scripts/fp4_layout_search.py bounds both), one fewer a word, but all on
// the ALU pipe, where this layout puts 7 there and 2 (IMAD.SHL) on the FMA pipe; timed in
// tools/dequant_overlap.cu, such a pair was slower in both families' loops, and this layout with
// its rotation and right shift as IMAD.WIDE / IMAD.HI slower still (docs/PERFORMANCE.md).
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
    case 2: return {2, 3, 4, 11};
    case 3: return {18, 19, 20, 27};
    case 4: return {28, 29, 30, 5};
    case 5: return {12, 13, 14, 21};
    case 6: return {0, 1, 10, 9};
    default: return {16, 17, 26, 25};
  }
}

// The slots tile the word: each bit belongs to exactly one value.
constexpr bool fp4_word_slots_tile() {
  uint32_t seen = 0;
  for (int v = 0; v < 8; ++v) {
    const Fp4BitSlot p = fp4_word_slot(v);
    for (int bit : {p.m, p.e0, p.e1, p.s}) {
      if (seen >> bit & 1u) return false;
      seen |= 1u << bit;
    }
  }
  return seen == 0xFFFFFFFFu;
}
static_assert(fp4_word_slots_tile());

// Host and device: place E2M1 code `code` (s.e1.e0.m) into slot v of a prepacked word.
__host__ __device__ constexpr uint32_t fp4_word_place(uint32_t code, int v) {
  const Fp4BitSlot p = fp4_word_slot(v);
  return ((code & 1u) << p.m) | (((code >> 1) & 1u) << p.e0) | (((code >> 2) & 1u) << p.e1) |
         (((code >> 3) & 1u) << p.s);
}

// E4M3 code (positive, finite) -> UE5M3 code (see above). Host and device (the prepacker).
__host__ __device__ constexpr uint8_t e4m3_to_ue5m3(uint8_t e4m3) {
  const int e = (e4m3 >> 3) & 0xF, m = e4m3 & 7;
  if (e > 0) return static_cast<uint8_t>((e4m3 & 0x7F) + 16);  // (E - 7 + 9) << 3 | M
  // Subnormal m * 2^-9: normalize. m = 1 -> 2^-9; 2, 3 -> (1, 1.5) * 2^-8; 4..7 -> (1 + (m-4)/4) * 2^-7.
  if (m == 0) return 0;
  if (m == 1) return 0;
  if (m < 4) return static_cast<uint8_t>((1 << 3) | ((m - 2) << 2));
  return static_cast<uint8_t>((2 << 3) | ((m - 4) << 1));
}

#ifdef __CUDACC__
// 8 prepacked E2M1 values -> 4 bf16x2 registers holding e2m1 * 2^-126.
__device__ __forceinline__ void fp4x8_to_bf16x2_raw(uint32_t w, uint32_t (&r)[4]) {
  constexpr uint32_t kMask = 0x81C081C0u;
  r[0] = w & kMask;
  r[1] = (w << 4) & kMask;
  r[2] = __funnelshift_l(w, w, 10) & kMask;  // SHF.L.W: V4's bits wrap from the top
  r[3] = ((w << 6) & 0x80C080C0u) | ((w >> 2) & 0x01000100u);  // V6/V7's e1 apart from the rest
}

// Scale bytes 2p and 2p + 1 (pair p = 0, 1) of `word`, the UE5M3 codes of rows g and g+8 ->
// one bf16x2: row g's scale * 2^119 in the low half, row g+8's in the high half. PRMT places the
// bytes in the low byte of each half; *16 + (237 << 7) builds each bf16 (one LEA). The multiply
// takes each half broadcast (bf16x2_mul_lo / _hi: HMUL2's .H0_H0 / .H1_H1 operand selectors, no
// instruction), so both rows' scales cost two instructions, not four.
__device__ __forceinline__ uint32_t ue5m3_pair_from_prmt(uint32_t pair_bytes) {
  return pair_bytes * 16u + ((237u << 7) | (237u << 23));
}
template <int kPair>
__device__ __forceinline__ uint32_t ue5m3_pair_to_bf16x2_scaled(uint32_t word) {
  static_assert(kPair == 0 || kPair == 1, "two pairs of scale bytes per word");
  uint32_t bytes;
  asm("prmt.b32 %0, %1, 0, %2;\n" : "=r"(bytes) : "r"(word), "n"((2 * kPair) | (4 << 4) | ((2 * kPair + 1) << 8) | (4 << 12)));
  return ue5m3_pair_from_prmt(bytes);
}

// The same with the pair chosen at run time (the prefill family's K step is not unrolled).
__device__ __forceinline__ uint32_t ue5m3_pair_to_bf16x2_scaled(uint32_t word, uint32_t pair) {
  uint32_t bytes;
  asm("prmt.b32 %0, %1, 0, %2;\n" : "=r"(bytes) : "r"(word), "r"((2 * pair) | (4u << 4) | ((2 * pair + 1) << 8) | (4u << 12)));
  return ue5m3_pair_from_prmt(bytes);
}

// a * (the low half of s, in both halves); a * (the high half of s, in both halves).
__device__ __forceinline__ uint32_t bf16x2_mul_lo(uint32_t a, uint32_t s) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                   __low2bfloat162(*reinterpret_cast<const __nv_bfloat162*>(&s)));
  return *reinterpret_cast<const uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t bf16x2_mul_hi(uint32_t a, uint32_t s) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                   __high2bfloat162(*reinterpret_cast<const __nv_bfloat162*>(&s)));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// The block scales of rows g and g+8 for 64-K chunk c (0..3) of a K group, as one bf16x2 pair
// (above), from a lane's 8 scale bytes (prepack_layout.h: byte 2c is row g's, 2c + 1 row
// g+8's). c is a compile-time constant once the caller's chunk loop is unrolled.
__device__ __forceinline__ uint32_t chunk_scales(uint2 sc8, int c) {
  const uint32_t word = c < 2 ? sc8.x : sc8.y;
  return (c & 1) ? ue5m3_pair_to_bf16x2_scaled<1>(word) : ue5m3_pair_to_bf16x2_scaled<0>(word);
}

// One A-fragment step: 8 values of a prepacked word, scaled by the row-g and row-(g+8) block
// scales (the pair from ue5m3_pair_to_bf16x2_scaled).
__device__ __forceinline__ void dequant_a_fragment(uint32_t w, uint32_t scales, uint32_t (&a)[4]) {
  uint32_t raw[4];
  fp4x8_to_bf16x2_raw(w, raw);
  a[0] = bf16x2_mul_lo(raw[0], scales);  // row g,   k +0 +1
  a[1] = bf16x2_mul_hi(raw[1], scales);  // row g+8, k +0 +1
  a[2] = bf16x2_mul_lo(raw[2], scales);  // row g,   k +2 +3
  a[3] = bf16x2_mul_hi(raw[3], scales);  // row g+8, k +2 +3
}

// A lane's 16-byte word group of a 64-K chunk (word s: k step s, in fragment order) as the A
// fragments of the chunk's 4 k steps, all under the same pair of block scales.
__device__ __forceinline__ void dequant_a_fragments(uint4 w, uint32_t scales, uint32_t (&a)[4][4]) {
  dequant_a_fragment(w.x, scales, a[0]);
  dequant_a_fragment(w.y, scales, a[1]);
  dequant_a_fragment(w.z, scales, a[2]);
  dequant_a_fragment(w.w, scales, a[3]);
}
#endif

}  // namespace fp4moe::kernels
