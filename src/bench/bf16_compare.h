// Relative Frobenius error between two bf16 outputs (bit patterns), infinite when either holds
// a NaN or Inf: how the benchmarks compare their paths.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "fp4moe/bf16.h"

namespace fp4moe {

inline double bf16_rel_error(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = Bf16::from_bits(got[i]).to_float(), y = Bf16::from_bits(want[i]).to_float();
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace fp4moe
