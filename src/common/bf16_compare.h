// Relative Frobenius error between two bf16 outputs (bit patterns), infinite when either holds
// a NaN or Inf: how the benchmarks compare their paths, and how the tuner compares a candidate's
// rows with the heuristic plan's (tune/output_check.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "fp4moe/bf16.h"

namespace fp4moe {

// ||got - want|| / ||want|| over equal-length spans (||got - want|| where want is all zeros).
inline double bf16_rel_error(std::span<const uint16_t> got, std::span<const uint16_t> want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = Bf16::from_bits(got[i]).to_float(), y = Bf16::from_bits(want[i]).to_float();
    if (!std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<double>::infinity();
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace fp4moe
