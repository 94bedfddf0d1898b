#include "tune/output_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "common/bf16_compare.h"
#include "fp4moe/bf16.h"
#include "fp4moe/error.h"

namespace fp4moe {

int64_t first_non_finite_row(const std::vector<uint16_t>& out, int64_t hidden) {
  FP4MOE_CHECK(hidden > 0, "first_non_finite_row: hidden must be > 0, got ", hidden);
  // bf16 NaN and Inf: every exponent bit set.
  const auto it = std::find_if(out.begin(), out.end(), [](uint16_t v) { return (v & 0x7F80) == 0x7F80; });
  return it == out.end() ? -1 : static_cast<int64_t>(it - out.begin()) / hidden;
}

double rel_error_vs_reference(const std::vector<uint16_t>& out, int64_t hidden,
                              const std::vector<std::vector<double>>& ref) {
  FP4MOE_CHECK(hidden > 0 && out.size() >= ref.size() * static_cast<size_t>(hidden),
               "rel_error_vs_reference: ", ref.size(), " reference rows of ", hidden, " need ",
               ref.size() * hidden, " output values, got ", out.size());
  double num = 0, den = 0;
  for (size_t t = 0; t < ref.size(); ++t) {
    FP4MOE_CHECK(ref[t].size() == static_cast<size_t>(hidden), "rel_error_vs_reference: reference row ", t,
                 " holds ", ref[t].size(), " values, not ", hidden);
    for (int64_t h = 0; h < hidden; ++h) {
      const double v = Bf16::from_bits(out[t * hidden + h]).to_float();
      if (!std::isfinite(v)) return std::numeric_limits<double>::infinity();
      num += (v - ref[t][h]) * (v - ref[t][h]);
      den += ref[t][h] * ref[t][h];
    }
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

RowDifference worst_row_difference(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                                   int64_t hidden) {
  FP4MOE_CHECK(hidden > 0 && got.size() == want.size() && got.size() % hidden == 0,
               "worst_row_difference: outputs of ", got.size(), " and ", want.size(),
               " values are not the same whole rows of ", hidden);
  RowDifference worst;
  const std::span<const uint16_t> g(got), w(want);
  for (int64_t r = 0; r < static_cast<int64_t>(got.size()) / hidden; ++r) {
    const double rel = bf16_rel_error(g.subspan(r * hidden, hidden), w.subspan(r * hidden, hidden));
    if (worst.row < 0 || rel > worst.rel) worst = {r, rel};
    if (std::isinf(rel)) break;  // the first non-finite row: nothing can be farther
  }
  return worst;
}

}  // namespace fp4moe
