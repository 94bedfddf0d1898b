// CLI11 checks with one-line messages of our own where CLI11's read badly: its
// NonNegativeNumber prints the range's upper end as a 300-digit double and, being a range
// comparison, lets NaN through.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

namespace fp4moe::cli {

// A finite number >= 0 (a skew, a duration).
inline const CLI::Validator FiniteNonNegative(
    [](std::string& text) -> std::string {
      double v = 0;
      try {
        size_t pos = 0;
        v = std::stod(text, &pos);
        if (pos != text.size()) return "'" + text + "' is not a number";
      } catch (const std::out_of_range&) {
        return "'" + text + "' is not a finite number >= 0";
      } catch (const std::exception&) {
        return "'" + text + "' is not a number";
      }
      return std::isfinite(v) && v >= 0 ? std::string{} : "'" + text + "' is not a finite number >= 0";
    },
    "FINITE >= 0");

}  // namespace fp4moe::cli
