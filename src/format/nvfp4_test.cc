// Block quantization: NVFP4 (ModelOpt weights, W4A4 activations) and MXFP4 against the
// NumPy + ml_dtypes oracle, element for element; shape errors; round trips; error statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/rng.h"
#include "fp4moe/error.h"
#include "fp4moe/format.h"
#include "support/oracle.h"

namespace fp4moe {
namespace {

std::vector<float> gaussian(int64_t n, double std, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.normal() * std);
  return v;
}

struct Case {
  int64_t rows, cols;
  double std;
  bool zero_blocks, outliers;
};

class Nvfp4VsOracle : public ::testing::TestWithParam<Case> {};

TEST_P(Nvfp4VsOracle, CodesScalesAndGlobalAgreeExactly) {
  const Case c = GetParam();
  std::vector<float> w = gaussian(c.rows * c.cols, c.std, 100 + c.rows * 7 + c.cols);
  Rng rng(5);
  if (c.zero_blocks)  // some all-zero blocks exercise the zero-block rule
    for (int64_t b = 0; b < c.rows * c.cols / 16; b += 5) std::fill_n(w.begin() + b * 16, 16, 0.0f);
  if (c.outliers)  // a few large values push other blocks into subnormal E4M3 scales
    for (int i = 0; i < 4; ++i) w[rng.below(w.size())] = static_cast<float>(5000 * c.std);
  const Nvfp4Matrix q = quantize_nvfp4(w, c.rows, c.cols);
  const std::vector<uint8_t> ref = test::run_oracle(
      "nvfp4", w, std::to_string(c.rows) + " " + std::to_string(c.cols));
  ASSERT_EQ(ref.size(), 4 + q.block_scales.size() + q.data.size());
  float glob;
  std::memcpy(&glob, ref.data(), 4);
  EXPECT_EQ(q.global_scale, glob);
  int bad_scales = 0, bad_codes = 0;
  for (size_t i = 0; i < q.block_scales.size(); ++i) bad_scales += q.block_scales[i] != ref[4 + i];
  const uint8_t* codes = ref.data() + 4 + q.block_scales.size();
  for (size_t i = 0; i < q.data.size(); ++i) bad_codes += q.data[i] != codes[i];
  EXPECT_EQ(bad_scales, 0) << "of " << q.block_scales.size() << " block scales";
  EXPECT_EQ(bad_codes, 0) << "of " << q.data.size() << " code bytes";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Nvfp4VsOracle,
    ::testing::Values(Case{1, 16, 1.0, false, false}, Case{7, 48, 1e-3, false, false},
                      Case{64, 256, 1.0, true, false}, Case{33, 1024, 1e3, false, true},
                      Case{128, 512, 0.02, true, true}, Case{3, 2048, 1e-30, false, false}),
    [](const ::testing::TestParamInfo<Case>& i) {
      const Case& c = i.param;
      std::string n = std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_std" +
                      std::to_string(static_cast<int>(std::log10(c.std)) + 40);
      if (c.zero_blocks) n += "_zero_blocks";
      if (c.outliers) n += "_outliers";
      return n;
    });

// The W4A4 activation recipe against the oracle's NumPy float32 arithmetic, byte for byte: an
// ordinary input scale, zero blocks (scale 0), a scale so small that every block saturates
// (scale 448, codes clipped to 6), one that puts the block scales among E4M3's subnormals, and
// one so large that they round to 0 on data that is not zero. A zero scale's codes are +-0
// (0x0, or 0x8 for a negative element), on both sides.
TEST(Nvfp4ActivationsVsOracle, CodesAndScalesAgreeExactly) {
  struct ActCase {
    int64_t rows, cols;
    double std;
    float input_scale;
  };
  int subnormal_scales = 0;
  for (const ActCase& c : {ActCase{4, 64, 1.0, 0.01f}, ActCase{33, 512, 3.0, 0.0625f}, ActCase{8, 256, 1.0, 1e-5f},
                           ActCase{8, 256, 1.0, 60.0f}, ActCase{8, 256, 1.0, 2e3f}, ActCase{16, 128, 1e-3, 3.7e-4f}}) {
    std::vector<float> x = gaussian(c.rows * c.cols, c.std, 900 + c.rows + c.cols);
    for (int64_t b = 0; b < c.rows * c.cols / 16; b += 7) std::fill_n(x.begin() + b * 16, 16, 0.0f);
    const Nvfp4Matrix q = quantize_nvfp4_activations(x, c.rows, c.cols, c.input_scale);
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.9g", c.input_scale);  // round-trips a float exactly
    const std::vector<uint8_t> ref =
        test::run_oracle("nvfp4_act", x, std::to_string(c.rows) + " " + std::to_string(c.cols) + " " + scale);
    ASSERT_EQ(ref.size(), q.block_scales.size() + q.data.size()) << "input scale " << scale;
    int bad_scales = 0, bad_codes = 0;
    for (size_t i = 0; i < q.block_scales.size(); ++i) bad_scales += q.block_scales[i] != ref[i];
    for (size_t i = 0; i < q.data.size(); ++i) bad_codes += q.data[i] != ref[q.block_scales.size() + i];
    EXPECT_EQ(bad_scales, 0) << "of " << q.block_scales.size() << " block scales, input scale " << scale;
    EXPECT_EQ(bad_codes, 0) << "of " << q.data.size() << " code bytes, input scale " << scale;
    EXPECT_EQ(q.global_scale, c.input_scale);
    for (uint8_t s : q.block_scales) subnormal_scales += s != 0 && (s & 0x78) == 0;  // exponent field 0
  }
  EXPECT_GT(subnormal_scales, 0) << "no case reached E4M3's subnormal scales";
}

TEST(Mxfp4VsOracle, CodesAndScalesAgreeExactly) {
  for (auto [rows, cols, std] : {std::tuple{5, 64, 1.0}, std::tuple{64, 512, 1e-2},
                                 std::tuple{17, 256, 1e4}}) {
    std::vector<float> w = gaussian(rows * cols, std, rows + cols);
    std::fill_n(w.begin(), 32, 0.0f);  // a zero block
    const Mxfp4Matrix q = quantize_mxfp4(w, rows, cols);
    const std::vector<uint8_t> ref =
        test::run_oracle("mxfp4", w, std::to_string(rows) + " " + std::to_string(cols));
    ASSERT_EQ(ref.size(), q.block_scales.size() + q.data.size());
    EXPECT_TRUE(std::equal(q.block_scales.begin(), q.block_scales.end(), ref.begin()));
    EXPECT_TRUE(std::equal(q.data.begin(), q.data.end(), ref.begin() + q.block_scales.size()));
  }
}

TEST(Nvfp4, RejectsBadShapesAndNonFiniteValues) {
  std::vector<float> w(3 * 40, 1.0f);
  try {
    quantize_nvfp4(w, 3, 40);
    FAIL() << "K = 40 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of the block size 16"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(quantize_mxfp4(std::vector<float>(48, 1.0f), 1, 48), Error);  // 48 % 32
  EXPECT_THROW(quantize_nvfp4(std::vector<float>(31, 1.0f), 2, 16), Error);  // size mismatch
  std::vector<float> bad(32, 1.0f);
  bad[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(quantize_nvfp4(bad, 1, 32), Error);
  bad[17] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantize_nvfp4(bad, 1, 32), Error);
  EXPECT_THROW(quantize_nvfp4_activations(std::vector<float>(16, 1.0f), 1, 16, 0.0f), Error);
  // rows x cols past int64 once wrapped to the buffer's size and was read past it.
  EXPECT_THROW(quantize_nvfp4(std::vector<float>(16, 1.0f), (int64_t{1} << 60) + 1, 16), Error);
  EXPECT_THROW(quantize_mxfp4(std::vector<float>(32, 1.0f), (int64_t{1} << 59) + 1, 32), Error);
  // A global scale whose 6x overflows made every block "zero"; an amax too small for any
  // global scale underflowed to 0.
  EXPECT_THROW(quantize_nvfp4_with_global(std::vector<float>(16, 1.0f), 1, 16, 1e38f), Error);
  EXPECT_THROW(quantize_nvfp4(std::vector<float>(16, 1e-42f), 1, 16), Error);
}

// A matrix a caller put together whose buffers do not hold its shape: every read of it throws
// before it indexes past them (data is a quarter of what [4, 32] needs).
TEST(Nvfp4, MatricesWhoseBuffersDoNotFitTheirShapeAreRejected) {
  Nvfp4Matrix nv = quantize_nvfp4(gaussian(4 * 32, 1.0, 3), 4, 32);
  ASSERT_NO_THROW(nv.dequantize());
  EXPECT_THROW(nv.value(4, 0), Error);
  EXPECT_THROW(nv.value(0, -1), Error);
  nv.data.resize(16);
  EXPECT_THROW(nv.value(3, 31), Error);
  EXPECT_THROW(nv.dequantize(), Error);
  EXPECT_THROW(nv.dequantize_f64(), Error);
  Mxfp4Matrix mx = quantize_mxfp4(gaussian(4 * 32, 1.0, 4), 4, 32);
  ASSERT_NO_THROW(mx.dequantize());
  EXPECT_THROW(mx.value(0, 32), Error);
  mx.block_scales[2] = 0xFF;  // NaN
  EXPECT_THROW(mx.dequantize(), Error);
  EXPECT_TRUE(std::isnan(mx.value(2, 0))) << "row 2's block read with a NaN scale";  // not 2^128 x the code
  EXPECT_FALSE(std::isnan(mx.value(1, 0)));
  mx.block_scales[2] = 127;
  mx.data.resize(16);
  EXPECT_THROW(mx.value(3, 31), Error);
  EXPECT_THROW(mx.dequantize(), Error);
}

TEST(Nvfp4, ZeroBlockTakesScaleOneAndZeroMatrixIsValid) {
  std::vector<float> w(2 * 32, 0.0f);
  w[40] = 3.0f;
  const Nvfp4Matrix q = quantize_nvfp4(w, 2, 32);
  EXPECT_EQ(q.block_scales[0], e4m3_from_float(1.0f));  // zero block
  EXPECT_NEAR(q.value(1, 8), 3.0, 3e-6);  // 6 * 448 * (3 / 2688), rounded in float
  const Nvfp4Matrix z = quantize_nvfp4(std::vector<float>(64, 0.0f), 2, 32);
  EXPECT_EQ(z.global_scale, 1.0f);
  for (double v : z.dequantize_f64()) EXPECT_EQ(v, 0.0);
}

TEST(Nvfp4, RepresentableMatrixRoundTripsExactly) {
  // Blocks whose largest code is 6 keep their scale under requantization with the same global
  // scale, so dequantize -> quantize reproduces codes and scales bit for bit.
  Rng rng(9);
  Nvfp4Matrix q;
  q.rows = 8;
  q.cols = 64;
  q.global_scale = 0.0123f;
  q.data.resize(q.rows * q.cols / 2);
  q.block_scales.resize(q.rows * q.cols / 16);
  for (auto& b : q.data) b = static_cast<uint8_t>(rng.next_u64());
  for (int64_t b = 0; b < q.rows * q.cols / 16; ++b) {
    fp4_set_code(q.data.data(), b * 16 + rng.below(16), rng.below(2) ? 0x7 : 0xF);  // a +-6
    q.block_scales[b] = static_cast<uint8_t>(0x20 + rng.below(0x50));
  }
  // Canonicalise -0 (0x8) to +0: requantizing 0.0 gives code 0.
  for (int64_t i = 0; i < q.rows * q.cols; ++i)
    if (fp4_code_at(q.data.data(), i) == 0x8) fp4_set_code(q.data.data(), i, 0x0);
  const std::vector<float> deq = q.dequantize();
  const Nvfp4Matrix r = quantize_nvfp4_with_global(deq, q.rows, q.cols, q.global_scale);
  EXPECT_EQ(r.block_scales, q.block_scales);
  EXPECT_EQ(r.data, q.data);
}

TEST(Nvfp4, ActivationRecipeMatchesItsDefinition) {
  const std::vector<float> x = gaussian(4 * 64, 1.0, 3);
  const float input_scale = 3.0f / (6.0f * 448.0f);
  const Nvfp4Matrix q = quantize_nvfp4_activations(x, 4, 64, input_scale);
  EXPECT_EQ(q.global_scale, input_scale);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t b = 0; b < 4; ++b) {
      float amax = 0;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[r * 64 + b * 16 + i]));
      const uint8_t sf = e4m3_from_float(amax / 6.0f / input_scale);
      ASSERT_EQ(q.block_scales[r * 4 + b], sf);
      const float mult = 1.0f / (e4m3_to_float(sf) * input_scale);
      for (int i = 0; i < 16; ++i)
        ASSERT_EQ(fp4_code_at(q.data.data(), r * 64 + b * 16 + i),
                  e2m1_from_float(x[r * 64 + b * 16 + i] * mult));
    }
  // Values beyond the calibrated range saturate the block scale at 448 and the codes at 6.
  std::vector<float> big(16, 1e4f);
  const Nvfp4Matrix s = quantize_nvfp4_activations(big, 1, 16, input_scale);
  EXPECT_EQ(s.block_scales[0], 0x7E);
  EXPECT_EQ(fp4_code_at(s.data.data(), 0), 0x7);
}

TEST(Nvfp4, GaussianErrorStatistics) {
  // N(0,1) data: NVFP4's relative RMS error is about 9-10%, MXFP4's larger (power-of-two
  // scales, blocks of 32); the error is unbiased.
  const int64_t rows = 256, cols = 1024;
  const std::vector<float> w = gaussian(rows * cols, 1.0, 77);
  const QuantError nv = quantization_error(w, quantize_nvfp4(w, rows, cols).dequantize());
  const QuantError mx = quantization_error(w, quantize_mxfp4(w, rows, cols).dequantize());
  EXPECT_GT(nv.rel_frobenius, 0.07);
  EXPECT_LT(nv.rel_frobenius, 0.12);
  EXPECT_GT(mx.rel_frobenius, nv.rel_frobenius * 1.1);
  EXPECT_LT(mx.rel_frobenius, 0.2);
  const std::vector<float> d = quantize_nvfp4(w, rows, cols).dequantize();
  double bias = 0;
  for (size_t i = 0; i < w.size(); ++i) bias += d[i] - w[i];
  EXPECT_LT(std::fabs(bias / w.size()), 1e-3);
  std::printf("N(0,1) [%lld x %lld]: NVFP4 rel error %.4f (max %.3f), MXFP4 %.4f (max %.3f)\n",
              static_cast<long long>(rows), static_cast<long long>(cols), nv.rel_frobenius,
              nv.max_abs, mx.rel_frobenius, mx.max_abs);
}

}  // namespace
}  // namespace fp4moe
