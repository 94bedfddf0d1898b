// CLI11 checks with one-line messages of our own where CLI11's read badly: its
// NonNegativeNumber prints the range's upper end as a 300-digit double and, being a range
// comparison, lets NaN through; its integer conversions wrap a negative unsigned and saturate,
// and read "010" as octal.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

namespace fp4moe::cli {

// The number `text` spells in full, or nullopt. strtod, not stod: a value that underflows to a
// subnormal or zero is a number (stod throws on it); one that overflows comes back infinite.
inline std::optional<double> number_of(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return v;
}

inline std::string number_text(double v) {
  std::ostringstream o;
  o << v;  // 60000, 0.5: not to_string's 60000.000000
  return o.str();
}

// A path: "" would read as the option not given (an output silently not written).
inline const CLI::Validator NonEmptyPath(
    [](std::string& text) -> std::string { return text.empty() ? "an empty path" : std::string{}; }, "PATH");

// A finite number in [lo, hi] (a duration, a margin): CLI::Range compares, and NaN compares false
// both ways, so it passes there.
inline CLI::Validator FiniteRange(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const std::optional<double> v = number_of(text);
        if (!v) return "'" + text + "' is not a number";
        return std::isfinite(*v) && *v >= lo && *v <= hi ? std::string{}
                                                         : "'" + text + "' is not a finite number in [" +
                                                               number_text(lo) + ", " + number_text(hi) + "]";
      },
      "FINITE in [" + number_text(lo) + ", " + number_text(hi) + "]");
}

// A decimal integer that T holds exactly: CLI11 reads "-1" into an unsigned seed as 2^64 - 1 and
// saturates a 30-digit width to INT64_MAX, which the later range message then quotes instead of
// what was typed. Given with ->transform (not ->check, whose validators see a copy): it rewrites
// the text in plain decimal, which CLI11's base-0 conversion cannot read as octal.
template <typename T>
inline std::optional<T> whole_number_of(const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return v;
}

template <typename T>
inline CLI::Validator WholeNumber() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (const std::optional<T> v = whole_number_of<T>(text)) {
          text = std::to_string(*v);  // CLI11 converts in base 0: "010" would be read as octal 8
          return {};
        }
        // Digits (after an optional '-') that do not fit: the range; anything else ("+256",
        // "0x10", "1e3"): what an integer is here.
        const size_t first = !text.empty() && text[0] == '-' ? 1 : 0;
        if (text.size() > first && text.find_first_not_of("0123456789", first) == std::string::npos)
          return "'" + text + "' is not an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                 std::to_string(std::numeric_limits<T>::max()) + "]";
        return "'" + text + "' is not an integer (decimal digits" +
               (std::numeric_limits<T>::is_signed ? ", '-' before a negative one" : "") + ")";
      },
      "INTEGER");
}

// An integer in [lo, hi], typed in decimal: CLI::Range would read "010" as octal 8 (CLI11
// converts in base 0), "abc" and "1.5" as "not in range". Given with ->transform: it rewrites
// the text in plain decimal before CLI11 converts it.
inline std::optional<int64_t> integer_in(const std::string& text, int64_t lo, int64_t hi) {
  const std::optional<int64_t> v = whole_number_of<int64_t>(text);  // (no sign '+', no spaces)
  return v && *v >= lo && *v <= hi ? v : std::nullopt;
}

inline std::string not_integer_in(const std::string& text, int64_t lo, int64_t hi) {
  return "'" + text + "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

inline CLI::Validator IntegerIn(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const std::optional<int64_t> v = integer_in(text, lo, hi);
        if (!v) return not_integer_in(text, lo, hi);
        text = std::to_string(*v);
        return {};
      },
      "INTEGER in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// An integer in [lo, hi] that is a multiple of `step` (`why` names the step: a K that the
// block scales must tile).
inline CLI::Validator MultipleOf(int64_t lo, int64_t hi, int64_t step, const std::string& why) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const std::optional<int64_t> v = integer_in(text, lo, hi);
        if (!v) return not_integer_in(text, lo, hi);
        if (*v % step != 0) return text + " is not a multiple of " + why + " " + std::to_string(step);
        text = std::to_string(*v);
        return {};
      },
      "MULTIPLE OF " + std::to_string(step));
}

}  // namespace fp4moe::cli
