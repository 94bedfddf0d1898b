// Scalar E2M1 / E4M3 / UE8M0 codecs (semantics in include/fp4moe/format.h).
//
// Round-to-nearest-even is done over the sorted table of representable magnitudes: the two
// neighbours of |x| are found, the nearer wins, and a tie goes to the code with a 0 in its
// last bit (the even mantissa). Midpoints of neighbouring E2M1 / E4M3 values have at most 6
// significant bits, so every comparison below is exact in float.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "fp4moe/format.h"

namespace fp4moe {
namespace {

constexpr std::array<float, 8> kE2m1Magnitudes = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

constexpr double e4m3_magnitude(int code) {
  const int e = (code >> 3) & 0xF;
  const int m = code & 0x7;
  if (e == 0) return m / 512.0;  // subnormal: m * 2^-9
  double v = 1.0 + m / 8.0;
  for (int i = 7; i < e; ++i) v *= 2.0;
  for (int i = e; i < 7; ++i) v *= 0.5;
  return v;
}

// Magnitudes of the 127 finite non-negative E4M3 codes 0x00..0x7E, increasing with the code.
constexpr std::array<float, 127> make_e4m3_table() {
  std::array<float, 127> t{};
  for (int c = 0; c < 127; ++c) t[c] = static_cast<float>(e4m3_magnitude(c));
  return t;
}
constexpr std::array<float, 127> kE4m3Magnitudes = make_e4m3_table();

// Index of the nearest table entry to a (a >= 0, finite), ties to the even index; values at
// or beyond the last entry saturate to it.
template <size_t N>
int round_to_table(const std::array<float, N>& table, float a) {
  if (a >= table[N - 1]) return static_cast<int>(N - 1);
  // upper_bound: first entry > a.
  size_t lo = 0, hi = N - 1;  // invariant: table[lo] <= a < table[hi]
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if (table[mid] <= a) lo = mid; else hi = mid;
  }
  const float below = table[lo], above = table[hi];
  const float midpoint = below + (above - below) * 0.5f;  // exact (see file comment)
  if (a < midpoint) return static_cast<int>(lo);
  if (a > midpoint) return static_cast<int>(hi);
  return static_cast<int>((lo % 2 == 0) ? lo : hi);
}

}  // namespace

uint8_t e2m1_from_float(float x) {
  if (std::isnan(x)) return 0x7;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);  // Inf saturates through the table
  return static_cast<uint8_t>(sign | round_to_table(kE2m1Magnitudes, a));
}

float e2m1_to_float(uint8_t code) {
  const float m = kE2m1Magnitudes[code & 0x7];
  return (code & 0x8) ? -m : m;
}

uint8_t e4m3_from_float(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  return static_cast<uint8_t>(sign | round_to_table(kE4m3Magnitudes, std::fabs(x)));
}

float e4m3_to_float(uint8_t code) {
  if ((code & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  const float m = kE4m3Magnitudes[code & 0x7F];
  return (code & 0x80) ? -m : m;
}

uint8_t ue8m0_from_float(float x) {
  if (!(x > 0.0f) || std::isinf(x)) return 0xFF;  // NaN, zero, negative, Inf
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t exponent = bits >> 23;  // sign is 0
  const uint32_t mantissa = bits & 0x7FFFFFu;
  if (exponent == 0) {
    // float subnormal: x < 2^-126. Below 2^-127 nothing is representable: clamp to code 0.
    // In [2^-127, 2^-126) the neighbours are codes 0 and 1; 1.5 * 2^-127 and up round up.
    const float r = x / std::ldexp(1.0f, -127);
    if (r < 1.5f) return 0x00;
    return 0x01;
  }
  const uint32_t code = exponent + (mantissa >= 0x400000u ? 1u : 0u);
  return code > 0xFE ? 0xFF : static_cast<uint8_t>(code);
}

float ue8m0_to_float(uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

}  // namespace fp4moe
