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
// Prepacked words come in pairs: words 2h and 2h + 1 of a lane's chunk (MMA k steps 2h, 2h + 1)
// hold 16 values V0..V15 that become the 8 bf16x2 registers of those two m16n8k16 A-fragment
// steps (step 2h: reg0 = V0|V1, reg1 = V2|V3, reg2 = V4|V5, reg3 = V6|V7; step 2h + 1: reg4..7
// = V8|V9 .. V14|V15; low half = first; reg 0, 2 rows g, reg 1, 3 rows g + 8, reg 0, 1 k +0,+1,
// reg 2, 3 k +2,+3). Bit positions of each value's (m, e0, e1, s) in the pair (w0 = bits 0-31,
// w1 = 32-63), and the one view of the pair each register masks with M = 0x81C081C0:
//   V0   6 39 40 15 | V1  22 55 56 31    reg0 = (w0 & 0x80408040) | (w1 & 0x01800180)
//   V2  46 47  0  7 | V3  62 63 16 23    reg1 = prmt(w0, w1, 0x2705) & M   (bytes 5 0 7 2)
//   V4  24 25 26  1 | V5   8  9 10 17    reg2 = rotl(w0, 14) & M
//   V6   2  3  4 11 | V7  18 19 20 27    reg3 = (w0 << 4) & M
//   V8  28 29 30  5 | V9  12 13 14 21    reg4 = rotl(w0, 10) & M
//   V10 32 33 34 41 | V11 48 49 50 57    reg5 = (w1 << 6) & M
//   V12 58 59 60 35 | V13 42 43 44 51    reg6 = rotl(w1, 12) & M
//   V14 36 37 38 45 | V15 52 53 54 61    reg7 = (w1 << 2) & M
// Every bit of the pair is used once. 16 instructions per 16 values: 9 LOP3, 3 SHF.L.W and one
// PRMT on the ALU pipe, the three left shifts free for ptxas to issue as IMAD.SHL on the FMA
// pipe. A single word needs 9 per 8 values (7 ALU-pipe, 2 IMAD.SHL: the layout before this one),
// and no pair does it in fewer than 16 nor with fewer than four ALU-pipe views
// (scripts/fp4_layout_search.py). What bounds the loops is the ALU pipe together with issue:
// in tools/dequant_overlap.cu (H200) this pair took 21.2-23.0 cycles a word with mma.sync
// against 22.2-24.0 for the word layout, and 271 cycles a 64-K chunk of prefill dequantization
// against 288, where a pair of all-ALU views (also 16 instructions) was slower than the word
// layout (docs/PERFORMANCE.md, decode section).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace fp4moe::kernels {

inline constexpr float kDequantEpilogueFactor = 128.0f;  // 2^7

// The bit of the word pair that register `reg` (0..7) reads at bit p (p in M), by its view above.
__host__ __device__ constexpr int fp4_pair_view_bit(int reg, int p) {
  switch (reg) {
    case 0: return (0x80408040u >> p & 1u) ? p : 32 + p;
    case 1: return 8 * ((0x2705 >> (4 * (p / 8))) & 7) + p % 8;
    case 2: return (p + 32 - 14) % 32;
    case 3: return p - 4;
    case 4: return (p + 32 - 10) % 32;
    case 5: return 32 + p - 6;
    case 6: return 32 + (p + 32 - 12) % 32;
    default: return 32 + p - 2;
  }
}

// Value slot v (0..15) -> bit positions of (m, e0, e1, sign) in the prepacked word pair.
struct Fp4BitSlot {
  int m, e0, e1, s;
};
__host__ __device__ constexpr Fp4BitSlot fp4_pair_slot(int v) {
  const int reg = v / 2, half = 16 * (v & 1);
  return {fp4_pair_view_bit(reg, 6 + half), fp4_pair_view_bit(reg, 7 + half), fp4_pair_view_bit(reg, 8 + half),
          fp4_pair_view_bit(reg, 15 + half)};
}

// The slots tile the pair: each bit belongs to exactly one value.
constexpr bool fp4_pair_slots_tile() {
  uint64_t seen = 0;
  for (int v = 0; v < 16; ++v) {
    const Fp4BitSlot p = fp4_pair_slot(v);
    for (int bit : {p.m, p.e0, p.e1, p.s}) {
      if (bit < 0 || bit > 63 || (seen >> bit & 1u)) return false;
      seen |= uint64_t{1} << bit;
    }
  }
  return seen == ~uint64_t{0};
}
static_assert(fp4_pair_slots_tile());

// Host and device: place E2M1 code `code` (s.e1.e0.m) into slot v of a prepacked word pair.
__host__ __device__ constexpr uint64_t fp4_pair_place(uint32_t code, int v) {
  const Fp4BitSlot p = fp4_pair_slot(v);
  return (uint64_t{code & 1u} << p.m) | (uint64_t{(code >> 1) & 1u} << p.e0) |
         (uint64_t{(code >> 2) & 1u} << p.e1) | (uint64_t{(code >> 3) & 1u} << p.s);
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
// A prepacked word pair (16 E2M1 values) -> 8 bf16x2 registers holding e2m1 * 2^-126.
__device__ __forceinline__ void fp4x16_to_bf16x2_raw(uint32_t w0, uint32_t w1, uint32_t (&r)[8]) {
  constexpr uint32_t kMask = 0x81C081C0u;
  r[0] = (w0 & 0x80408040u) | (w1 & 0x01800180u);
  r[1] = __byte_perm(w0, w1, 0x2705) & kMask;
  r[2] = __funnelshift_l(w0, w0, 14) & kMask;  // SHF.L.W: the rotations' low bits wrap from the top
  r[3] = (w0 << 4) & kMask;
  r[4] = __funnelshift_l(w0, w0, 10) & kMask;
  r[5] = (w1 << 6) & kMask;
  r[6] = __funnelshift_l(w1, w1, 12) & kMask;
  r[7] = (w1 << 2) & kMask;
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

// Eight raw registers (reg0..7 above) scaled by the row-g and row-(g+8) block scales (the pair
// from ue5m3_pair_to_bf16x2_scaled) into the A fragments of k steps 2h (a0) and 2h + 1 (a1).
__device__ __forceinline__ void scale_a_fragment_pair(const uint32_t (&raw)[8], uint32_t scales, uint32_t (&a0)[4],
                                                      uint32_t (&a1)[4]) {
  a0[0] = bf16x2_mul_lo(raw[0], scales);  // step 2h:     row g,   k +0 +1
  a0[1] = bf16x2_mul_hi(raw[1], scales);  //              row g+8, k +0 +1
  a0[2] = bf16x2_mul_lo(raw[2], scales);  //              row g,   k +2 +3
  a0[3] = bf16x2_mul_hi(raw[3], scales);  //              row g+8, k +2 +3
  a1[0] = bf16x2_mul_lo(raw[4], scales);  // step 2h + 1
  a1[1] = bf16x2_mul_hi(raw[5], scales);
  a1[2] = bf16x2_mul_lo(raw[6], scales);
  a1[3] = bf16x2_mul_hi(raw[7], scales);
}

// Two A-fragment steps (k steps 2h, 2h + 1) from a prepacked word pair.
__device__ __forceinline__ void dequant_a_fragment_pair(uint32_t w0, uint32_t w1, uint32_t scales, uint32_t (&a0)[4],
                                                        uint32_t (&a1)[4]) {
  uint32_t raw[8];
  fp4x16_to_bf16x2_raw(w0, w1, raw);
  scale_a_fragment_pair(raw, scales, a0, a1);
}

// Pair h (words 2h, 2h + 1) of a lane's 16-byte word group of a 64-K chunk (word s: k step s, in
// fragment order). h is a compile-time constant in the callers' unrolled loops.
__device__ __forceinline__ uint2 word_pair(uint4 w, int h) {
  return h == 0 ? make_uint2(w.x, w.y) : make_uint2(w.z, w.w);
}

// The A fragments of k steps 2h and 2h + 1 from pair h of a lane's word group.
__device__ __forceinline__ void dequant_a_fragment_half(uint4 w, int h, uint32_t scales, uint32_t (&a0)[4],
                                                        uint32_t (&a1)[4]) {
  const uint2 pair = word_pair(w, h);
  dequant_a_fragment_pair(pair.x, pair.y, scales, a0, a1);
}

// The whole group as the A fragments of the chunk's 4 k steps, all under the same block scales.
__device__ __forceinline__ void dequant_a_fragments(uint4 w, uint32_t scales, uint32_t (&a)[4][4]) {
  dequant_a_fragment_half(w, 0, scales, a[0], a[1]);
  dequant_a_fragment_half(w, 1, scales, a[2], a[3]);
}
#endif

}  // namespace fp4moe::kernels
