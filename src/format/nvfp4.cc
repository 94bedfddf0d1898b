// NVFP4 block quantization (ModelOpt weight recipe, W4A4 activation recipe) and
// dequantization. Arithmetic is float32 where the recipe is float32, so that codes and scales
// agree element for element with ModelOpt and the GPU quantizers - with two exceptions, equal
// in value or better, that format.h names (a block ratio below E4M3's smallest subnormal; -0.0).
#include <algorithm>
#include <cmath>

#include "fp4moe/error.h"
#include "fp4moe/format.h"
#include "format/block_matrix_shape.h"

namespace fp4moe {
namespace {

void check_matrix_input(std::span<const float> w, int64_t rows, int64_t cols, int block,
                        const char* what) {
  FP4MOE_CHECK(rows >= 0 && cols >= 0, what, ": negative shape [", rows, ", ", cols, "]");
  FP4MOE_CHECK(cols % block == 0, what, ": K = ", cols, " is not a multiple of the block size ",
               block);
  const int64_t n = checked_size(rows, cols, what);
  FP4MOE_CHECK(static_cast<int64_t>(w.size()) == n, what, ": buffer holds ", w.size(),
               " elements, shape [", rows, ", ", cols, "] needs ", n);
  for (size_t i = 0; i < w.size(); ++i) {
    FP4MOE_CHECK(std::isfinite(w[i]), what, ": element ", i, " (row ", i / std::max<int64_t>(cols, 1),
                 ", col ", i % std::max<int64_t>(cols, 1), ") is ", w[i],
                 "; only finite values can be quantized");
  }
}

float block_amax(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace

float nvfp4_global_scale_for_amax(float amax) {
  FP4MOE_CHECK(std::isfinite(amax) && amax >= 0.0f, "amax must be finite and >= 0, got ", amax);
  if (amax == 0.0f) return 1.0f;
  const float g = amax / (kE2m1Max * kE4m3Max);
  FP4MOE_CHECK(g > 0.0f, "amax ", amax, " is below what an NVFP4 global scale can hold (amax / ",
               kE2m1Max * kE4m3Max, " underflows float32)");
  return g;
}

Nvfp4Matrix quantize_nvfp4(std::span<const float> w, int64_t rows, int64_t cols) {
  check_matrix_input(w, rows, cols, kNvfp4BlockSize, "quantize_nvfp4");
  float amax = 0.0f;
  for (float v : w) amax = std::max(amax, std::fabs(v));
  return quantize_nvfp4_with_global(w, rows, cols, nvfp4_global_scale_for_amax(amax));
}

Nvfp4Matrix quantize_nvfp4_with_global(std::span<const float> w, int64_t rows, int64_t cols,
                                       float global_scale) {
  check_matrix_input(w, rows, cols, kNvfp4BlockSize, "quantize_nvfp4");
  FP4MOE_CHECK(std::isfinite(global_scale) && global_scale > 0.0f,
               "quantize_nvfp4: global scale must be finite and > 0, got ", global_scale);
  FP4MOE_CHECK(std::isfinite(kE2m1Max * global_scale), "quantize_nvfp4: global scale ", global_scale,
               " is too large (6 x global scale overflows float32)");
  Nvfp4Matrix q;
  q.rows = rows;
  q.cols = cols;
  q.global_scale = global_scale;
  q.data.assign(static_cast<size_t>(rows * cols / 2), 0);
  q.block_scales.assign(static_cast<size_t>(rows * cols / kNvfp4BlockSize), 0);
  const float six_global = kE2m1Max * global_scale;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / kNvfp4BlockSize; ++b) {
      const float* x = w.data() + r * cols + b * kNvfp4BlockSize;
      float ratio = block_amax(x, kNvfp4BlockSize) / six_global;
      if (ratio == 0.0f) ratio = 1.0f;
      ratio = std::clamp(ratio, kE4m3MinSubnormal, kE4m3Max);
      const uint8_t scale = e4m3_from_float(ratio);
      q.block_scales[r * (cols / kNvfp4BlockSize) + b] = scale;
      const float denom = e4m3_to_float(scale) * global_scale;
      for (int i = 0; i < kNvfp4BlockSize; ++i) {
        fp4_set_code(q.data.data(), r * cols + b * kNvfp4BlockSize + i,
                     e2m1_from_float(x[i] / denom));
      }
    }
  }
  return q;
}

Nvfp4Matrix quantize_nvfp4_activations(std::span<const float> x, int64_t rows, int64_t cols,
                                       float input_scale) {
  check_matrix_input(x, rows, cols, kNvfp4BlockSize, "quantize_nvfp4_activations");
  FP4MOE_CHECK(std::isfinite(input_scale) && input_scale > 0.0f,
               "quantize_nvfp4_activations: input_scale must be finite and > 0, got ",
               input_scale);
  Nvfp4Matrix q;
  q.rows = rows;
  q.cols = cols;
  q.global_scale = input_scale;
  q.data.assign(static_cast<size_t>(rows * cols / 2), 0);
  q.block_scales.assign(static_cast<size_t>(rows * cols / kNvfp4BlockSize), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / kNvfp4BlockSize; ++b) {
      const float* v = x.data() + r * cols + b * kNvfp4BlockSize;
      const uint8_t sf = e4m3_from_float(block_amax(v, kNvfp4BlockSize) / kE2m1Max / input_scale);
      q.block_scales[r * (cols / kNvfp4BlockSize) + b] = sf;
      const float sf_value = e4m3_to_float(sf);
      const float multiplier = sf_value == 0.0f ? 0.0f : 1.0f / (sf_value * input_scale);
      for (int i = 0; i < kNvfp4BlockSize; ++i) {
        fp4_set_code(q.data.data(), r * cols + b * kNvfp4BlockSize + i,
                     e2m1_from_float(v[i] * multiplier));
      }
    }
  }
  return q;
}

namespace {
// The shape and the buffers' sizes: what every read of an element relies on.
void check_holds_shape(const Nvfp4Matrix& m, const char* what) {
  detail::check_block_matrix_shape(m.rows, m.cols, m.data.size(), m.block_scales.size(), kNvfp4BlockSize, what, "NVFP4",
                                   "weight", "weight_scale");
}

// Element (r, c) of a matrix whose shape and buffers have been checked.
double value_of(const Nvfp4Matrix& m, int64_t r, int64_t c) {
  const double e = e2m1_to_float(fp4_code_at(m.data.data(), r * m.cols + c));
  const double s = e4m3_to_float(m.block_scales[r * m.blocks_per_row() + c / kNvfp4BlockSize]);
  return e * s * static_cast<double>(m.global_scale);
}
}  // namespace

double Nvfp4Matrix::value(int64_t r, int64_t c) const {
  check_holds_shape(*this, "Nvfp4Matrix::value");  // (not validate's scan of every scale: one element)
  FP4MOE_CHECK(r >= 0 && r < rows && c >= 0 && c < cols, "Nvfp4Matrix::value: (", r, ", ", c,
               ") is outside the matrix [", rows, ", ", cols, "]");
  return value_of(*this, r, c);
}

std::vector<double> Nvfp4Matrix::dequantize_f64() const {
  validate("Nvfp4Matrix::dequantize_f64");
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = value_of(*this, r, c);
  return out;
}

std::vector<float> Nvfp4Matrix::dequantize() const {
  validate("Nvfp4Matrix::dequantize");
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = static_cast<float>(value_of(*this, r, c));
  return out;
}

void Nvfp4Matrix::validate(const char* what) const {
  check_holds_shape(*this, what);
  FP4MOE_CHECK(std::isfinite(global_scale) && global_scale > 0.0f, what,
               ": weight_scale_2 must be finite and > 0, got ", global_scale);
  const int64_t per_row = cols / 16;
  for (size_t i = 0; i < block_scales.size(); ++i) {
    FP4MOE_CHECK((block_scales[i] & 0x7F) != 0x7F, what, ": weight_scale [", static_cast<int64_t>(i) / per_row, ", ",
                 static_cast<int64_t>(i) % per_row, "] (row, block of 16) is NaN (0x", std::hex,
                 static_cast<int>(block_scales[i]), ")");
  }
}

QuantError quantization_error(std::span<const float> original, std::span<const float> dequant) {
  FP4MOE_CHECK(original.size() == dequant.size(), "quantization_error: sizes differ (",
               original.size(), " vs ", dequant.size(), ")");
  QuantError e;
  double num = 0, den = 0;
  for (size_t i = 0; i < original.size(); ++i) {
    const double d = static_cast<double>(dequant[i]) - original[i];
    num += d * d;
    den += static_cast<double>(original[i]) * original[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.rel_frobenius = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.rmse = original.empty() ? 0 : std::sqrt(num / static_cast<double>(original.size()));
  return e;
}

}  // namespace fp4moe
