// The tuner's judgement of a candidate's output: the first tokens against the reference, every
// token's row against the heuristic plan's - one wrong row among many is found and named.
#include "tune/output_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/tune.h"

namespace fp4moe {
namespace {

constexpr int64_t kHidden = 96;

// [rows, kHidden] values of both signs, as bf16 bits, and the same values as doubles.
std::vector<uint16_t> random_rows(int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<uint16_t> out(rows * kHidden);
  for (auto& v : out) v = Bf16::from_float(d(rng)).bits;
  return out;
}

std::vector<std::vector<double>> as_reference(const std::vector<uint16_t>& bits, int64_t rows) {
  std::vector<std::vector<double>> ref(rows, std::vector<double>(kHidden));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < kHidden; ++h) ref[r][h] = Bf16::from_bits(bits[r * kHidden + h]).to_float();
  return ref;
}

// Each value of the row times factor, rounded to bf16.
void scale_row(std::vector<uint16_t>& v, int64_t row, double factor) {
  for (int64_t h = 0; h < kHidden; ++h) {
    uint16_t& b = v[row * kHidden + h];
    b = Bf16::from_float(static_cast<float>(Bf16::from_bits(b).to_float() * factor)).bits;
  }
}

TEST(OutputCheck, EqualOutputsDifferByNothing) {
  const std::vector<uint16_t> a = random_rows(40, 1);
  const RowDifference d = worst_row_difference(a, a, kHidden);
  EXPECT_EQ(d.rel, 0.0);
  EXPECT_EQ(d.row, 0);
  EXPECT_EQ(rel_error_vs_reference(a, kHidden, as_reference(a, 4)), 0.0);
}

TEST(OutputCheck, OneWrongRowAmongManyIsFoundWhereTheWholeOutputHidesIt) {
  constexpr int64_t kRows = 1024;
  const std::vector<uint16_t> want = random_rows(kRows, 2);
  std::vector<uint16_t> got = want;
  // Row 777 a fifth short, as if one of a token's nine contributions (top-8 and the shared
  // expert) were left out.
  scale_row(got, 777, 0.8);
  const RowDifference d = worst_row_difference(got, want, kHidden);
  EXPECT_EQ(d.row, 777);
  EXPECT_NEAR(d.rel, 0.2, 3e-3);
  // The whole output's relative error is ~0.2 / sqrt(1024): under the 1e-2 bound.
  EXPECT_LT(rel_error_vs_reference(got, kHidden, as_reference(want, kRows)), 1e-2);
  // The reference check of the first tokens alone does not see it.
  EXPECT_EQ(rel_error_vs_reference(got, kHidden, as_reference(want, 4)), 0.0);
}

TEST(OutputCheck, RoundingSizedDifferencesStayUnderTheTunersRowBound) {
  // Every other value one bf16 step away (2^-8 to 2^-7 of it): as far as two correct plans'
  // roundings could put them, and farther than they do.
  const std::vector<uint16_t> want = random_rows(64, 3);
  std::vector<uint16_t> got = want;
  for (size_t i = 0; i < got.size(); i += 2) got[i] = static_cast<uint16_t>(got[i] + 1);
  const RowDifference d = worst_row_difference(got, want, kHidden);
  EXPECT_GT(d.rel, 0.0);
  EXPECT_LT(d.rel, TuneOptions{}.max_row_rel_error / 2);
}

TEST(OutputCheck, NonFiniteValuesAreInfinitelyWrong) {
  const std::vector<uint16_t> want = random_rows(8, 4);
  std::vector<uint16_t> got = want;
  got[5 * kHidden + 17] = 0x7FC0;  // NaN in row 5
  const RowDifference d = worst_row_difference(got, want, kHidden);
  EXPECT_EQ(d.row, 5);
  EXPECT_TRUE(std::isinf(d.rel));
  got = want;
  got[1 * kHidden + 3] = 0xFF80;  // -Inf in row 1, one of the reference's rows
  EXPECT_TRUE(std::isinf(rel_error_vs_reference(got, kHidden, as_reference(want, 2))));
  EXPECT_TRUE(std::isinf(worst_row_difference(want, got, kHidden).rel));  // in want too
}

TEST(OutputCheck, TheFirstNonFiniteRowIsNamed) {
  std::vector<uint16_t> v = random_rows(6, 7);
  EXPECT_EQ(first_non_finite_row(v, kHidden), -1);
  v[4 * kHidden + kHidden - 1] = 0x7F80;  // +Inf, the last value of row 4
  EXPECT_EQ(first_non_finite_row(v, kHidden), 4);
  v[2 * kHidden] = 0xFFFF;  // the 0xFF poison (a NaN), the first value of row 2
  EXPECT_EQ(first_non_finite_row(v, kHidden), 2);
  EXPECT_THROW(first_non_finite_row(v, 0), Error);
}

TEST(OutputCheck, ZeroRowsAreJudgedByTheirAbsoluteDifference) {
  std::vector<uint16_t> want(3 * kHidden, 0), got = want;
  EXPECT_EQ(worst_row_difference(got, want, kHidden).rel, 0.0);
  got[2 * kHidden] = Bf16::from_float(1e-6f).bits;
  const RowDifference d = worst_row_difference(got, want, kHidden);
  EXPECT_EQ(d.row, 2);
  EXPECT_NEAR(d.rel, 1e-6, 1e-8);
}

TEST(OutputCheck, MismatchedShapesAreRefused) {
  const std::vector<uint16_t> a = random_rows(4, 5);
  EXPECT_THROW(worst_row_difference(a, random_rows(3, 5), kHidden), Error);
  EXPECT_THROW(worst_row_difference(a, a, 0), Error);
  EXPECT_THROW(worst_row_difference(a, a, kHidden + 1), Error);
  EXPECT_THROW(rel_error_vs_reference(a, kHidden, as_reference(random_rows(5, 6), 5)), Error);
  std::vector<std::vector<double>> short_row = as_reference(a, 2);
  short_row[1].pop_back();
  EXPECT_THROW(rel_error_vs_reference(a, kHidden, short_row), Error);
}

}  // namespace
}  // namespace fp4moe
