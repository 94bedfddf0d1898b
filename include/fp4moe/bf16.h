// fp4moe/bf16.h - host-side bfloat16: the storage type of activations and outputs.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace fp4moe {

// bfloat16 as its 16 bits. Conversion from float rounds to nearest, ties to even; NaN stays a
// (quiet) NaN; overflow rounds to infinity, as IEEE rounding and the GPU's cvt.rn.bf16.f32 do.
struct Bf16 {
  uint16_t bits = 0;

  static constexpr Bf16 from_bits(uint16_t b) { return Bf16{b}; }
  static Bf16 from_float(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if (std::isnan(f)) return Bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
    const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
    return Bf16{static_cast<uint16_t>((u + rounding) >> 16)};
  }
  float to_float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};

// Rounds a float to the nearest bfloat16 value and returns it as float.
inline float round_to_bf16(float f) { return Bf16::from_float(f).to_float(); }

}  // namespace fp4moe
