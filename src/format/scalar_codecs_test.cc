// Scalar codecs: exhaustive over every E2M1, E4M3 and UE8M0 code, every rounding tie,
// saturation, non-finite inputs, and element-for-element agreement with ml_dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/rng.h"
#include "fp4moe/format.h"
#include "support/oracle.h"

namespace fp4moe {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// E4M3 value from its fields, written independently of the codec's table.
double e4m3_by_formula(int code) {
  const int s = code >> 7, e = (code >> 3) & 0xF, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return s ? -mag : mag;
}

TEST(E2m1, AllSixteenCodesDecode) {
  const float expected[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c)), expected[c]) << "code " << c;
    EXPECT_EQ(std::signbit(e2m1_to_float(static_cast<uint8_t>(c))), c >= 8) << "code " << c;
    EXPECT_EQ(e2m1_from_float(expected[c]), c) << "round trip of code " << c;
  }
}

TEST(E2m1, EveryTieRoundsToEven) {
  // Midpoints between neighbours and the even (mantissa 0) code each must land on.
  struct Tie { float x; uint8_t code; };
  const Tie ties[] = {{0.25f, 0x0}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4},
                      {2.5f, 0x4},  {3.5f, 0x6},  {5.0f, 0x6}};
  for (const Tie& t : ties) {
    EXPECT_EQ(e2m1_from_float(t.x), t.code) << t.x;
    EXPECT_EQ(e2m1_from_float(-t.x), t.code | 0x8) << -t.x;
    // Just off the tie, the nearer neighbour wins.
    const float up = std::nextafter(t.x, kInf), down = std::nextafter(t.x, 0.0f);
    EXPECT_EQ(e2m1_to_float(e2m1_from_float(up)) >= t.x, true) << up;
    EXPECT_EQ(e2m1_to_float(e2m1_from_float(down)) <= t.x, true) << down;
  }
}

TEST(E2m1, SaturatesAndDefinesNonFinite) {
  EXPECT_EQ(e2m1_from_float(6.0f), 0x7);
  EXPECT_EQ(e2m1_from_float(6.5f), 0x7);
  EXPECT_EQ(e2m1_from_float(1e30f), 0x7);
  EXPECT_EQ(e2m1_from_float(-1e30f), 0xF);
  EXPECT_EQ(e2m1_from_float(kInf), 0x7);
  EXPECT_EQ(e2m1_from_float(-kInf), 0xF);
  EXPECT_EQ(e2m1_from_float(kNaN), 0x7);
  EXPECT_EQ(e2m1_from_float(1e-30f), 0x0);
  EXPECT_EQ(e2m1_from_float(-1e-30f), 0x8);  // -0
}

TEST(E4m3, All256CodesDecode) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), e4m3_by_formula(c)) << "code " << c;
    EXPECT_EQ(e4m3_from_float(v), c) << "round trip of code " << c;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
}

TEST(E4m3, EveryTieRoundsToEven) {
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = e4m3_to_float(static_cast<uint8_t>(c));
    const float hi = e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = lo + (hi - lo) / 2;
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2) << "inexact midpoint";
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(e4m3_from_float(mid), even) << "tie between codes " << c << " and " << c + 1;
    EXPECT_EQ(e4m3_from_float(-mid), even | 0x80);
    EXPECT_EQ(e4m3_from_float(std::nextafter(mid, kInf)), c + 1);
    EXPECT_EQ(e4m3_from_float(std::nextafter(mid, 0.0f)), c);
  }
}

TEST(E4m3, SaturatesAndDefinesNonFinite) {
  EXPECT_EQ(e4m3_from_float(448.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(464.0f), 0x7E);  // the tie with the would-be 480 rounds down anyway
  EXPECT_EQ(e4m3_from_float(500.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7E);
  EXPECT_EQ(e4m3_from_float(kInf), 0x7E);
  EXPECT_EQ(e4m3_from_float(-kInf), 0xFE);
  EXPECT_EQ(e4m3_from_float(kNaN), 0x7F);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);  // tie 0 vs 2^-9: even is 0
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.5f, -10)), 0x01);
}

TEST(Ue8m0, AllCodesDecodeAndRoundTrip) {
  for (int c = 0; c < 255; ++c) {
    const float v = ue8m0_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(v, std::ldexp(1.0f, c - 127)) << "code " << c;
    EXPECT_EQ(ue8m0_from_float(v), c) << "round trip of code " << c;
  }
  EXPECT_TRUE(std::isnan(ue8m0_to_float(0xFF)));
  EXPECT_EQ(ue8m0_from_float(1.5f), 128);  // mantissa 1.5 rounds up
  EXPECT_EQ(ue8m0_from_float(1.49f), 127);
  EXPECT_EQ(ue8m0_from_float(3.0f), 129);
  EXPECT_EQ(ue8m0_from_float(std::ldexp(1.0f, -130)), 0);
  for (float bad : {0.0f, -1.0f, kInf, kNaN, 3e38f}) EXPECT_EQ(ue8m0_from_float(bad), 0xFF) << bad;
}

// Random values over many binades plus every tie, to agree with ml_dtypes code for code.
std::vector<float> probe_values(double lo_exp, double hi_exp, uint64_t seed, int n) {
  Rng rng(seed);
  std::vector<float> v;
  for (int i = 0; i < n; ++i) {
    const double mag = std::exp2(lo_exp + (hi_exp - lo_exp) * rng.uniform());
    v.push_back(static_cast<float>(rng.uniform() < 0.5 ? -mag : mag));
  }
  return v;
}

TEST(ScalarCodecsVsMlDtypes, E2m1AgreesOnRandomAndTieValues) {
  std::vector<float> v = probe_values(-4, 4, 11, 20000);
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 7.0f, 0.0f}) {
    v.push_back(t);
    v.push_back(-t);
  }
  const std::vector<uint8_t> ref = test::run_oracle("e2m1", v);
  ASSERT_EQ(ref.size(), v.size());
  int mismatches = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (e2m1_from_float(v[i]) != (ref[i] & 0xF) && ++mismatches < 10)
      ADD_FAILURE() << "x = " << v[i] << ": ours " << int(e2m1_from_float(v[i])) << ", ml_dtypes "
                    << int(ref[i]);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ScalarCodecsVsMlDtypes, E4m3AgreesInRangeAndSaturatesBeyond) {
  // ml_dtypes' cast does not saturate (beyond 464 it gives NaN); the satfinite codec does.
  std::vector<float> v = probe_values(-12, std::log2(464.0), 12, 40000);
  for (int c = 0; c < 0x7E; ++c) {  // every tie
    const float lo = e4m3_to_float(static_cast<uint8_t>(c)), hi = e4m3_to_float(static_cast<uint8_t>(c + 1));
    v.push_back(lo + (hi - lo) / 2);
  }
  const std::vector<uint8_t> ref = test::run_oracle("e4m3", v);
  ASSERT_EQ(ref.size(), v.size());
  int mismatches = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (e4m3_from_float(v[i]) != ref[i] && ++mismatches < 10)
      ADD_FAILURE() << "x = " << v[i] << ": ours " << int(e4m3_from_float(v[i])) << ", ml_dtypes "
                    << int(ref[i]);
  }
  EXPECT_EQ(mismatches, 0);
  const std::vector<float> beyond = {480.0f, 1000.0f, -5e5f};
  const std::vector<uint8_t> nan_codes = test::run_oracle("e4m3", beyond);
  for (size_t i = 0; i < beyond.size(); ++i) {
    EXPECT_EQ(nan_codes[i] & 0x7F, 0x7F) << "ml_dtypes gives NaN beyond the range";
    EXPECT_EQ(e4m3_from_float(beyond[i]) & 0x7F, 0x7E) << "ours saturates";
  }
}

TEST(ScalarCodecsVsMlDtypes, Ue8m0AgreesOnPositiveValues) {
  std::vector<float> v = probe_values(-120, 120, 13, 20000);
  for (auto& x : v) x = std::fabs(x);
  for (int e = -126; e < 127; e += 7) v.push_back(std::ldexp(1.5f, e));  // ties
  const std::vector<uint8_t> ref = test::run_oracle("e8m0", v);
  ASSERT_EQ(ref.size(), v.size());
  int mismatches = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (ue8m0_from_float(v[i]) != ref[i] && ++mismatches < 10)
      ADD_FAILURE() << "x = " << v[i] << ": ours " << int(ue8m0_from_float(v[i])) << ", ml_dtypes "
                    << int(ref[i]);
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace fp4moe
