// MXFP4 (OCP Microscaling Formats v1.0, section 6.3): block 32, power-of-two UE8M0 scale.
#include <algorithm>
#include <cmath>

#include "fp4moe/error.h"
#include "fp4moe/format.h"
#include "format/block_matrix_shape.h"

namespace fp4moe {

Mxfp4Matrix quantize_mxfp4(std::span<const float> w, int64_t rows, int64_t cols) {
  FP4MOE_CHECK(rows >= 0 && cols >= 0, "quantize_mxfp4: negative shape");
  FP4MOE_CHECK(cols % kMxfp4BlockSize == 0, "quantize_mxfp4: K = ", cols,
               " is not a multiple of the block size ", kMxfp4BlockSize);
  const int64_t n = checked_size(rows, cols, "quantize_mxfp4");
  FP4MOE_CHECK(static_cast<int64_t>(w.size()) == n, "quantize_mxfp4: buffer holds ",
               w.size(), " elements, shape needs ", n);
  Mxfp4Matrix q;
  q.rows = rows;
  q.cols = cols;
  q.data.assign(static_cast<size_t>(rows * cols / 2), 0);
  q.block_scales.assign(static_cast<size_t>(rows * cols / kMxfp4BlockSize), 0);
  constexpr int kE2m1MaxExponent = 2;  // 6 = 1.5 * 2^2
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / kMxfp4BlockSize; ++b) {
      const float* x = w.data() + r * cols + b * kMxfp4BlockSize;
      float amax = 0.0f;
      for (int i = 0; i < kMxfp4BlockSize; ++i) {
        FP4MOE_CHECK(std::isfinite(x[i]), "quantize_mxfp4: element (", r, ", ",
                     b * kMxfp4BlockSize + i, ") is ", x[i], "; only finite values can be quantized");
        amax = std::max(amax, std::fabs(x[i]));
      }
      int shared_exp = 0;
      if (amax > 0.0f) {
        int e = 0;
        std::frexp(amax, &e);  // amax = f * 2^e, f in [0.5, 1): floor(log2(amax)) = e - 1
        shared_exp = std::clamp(e - 1 - kE2m1MaxExponent, -127, 127);
      }
      q.block_scales[r * (cols / kMxfp4BlockSize) + b] = static_cast<uint8_t>(shared_exp + 127);
      for (int i = 0; i < kMxfp4BlockSize; ++i) {
        const float scaled = std::ldexp(x[i], -shared_exp);
        fp4_set_code(q.data.data(), r * cols + b * kMxfp4BlockSize + i, e2m1_from_float(scaled));
      }
    }
  }
  return q;
}

namespace {
// The shape and the buffers' sizes: what every read of an element relies on.
void check_holds_shape(const Mxfp4Matrix& m, const char* what) {
  detail::check_block_matrix_shape(m.rows, m.cols, m.data.size(), m.block_scales.size(), kMxfp4BlockSize, what, "MXFP4",
                                   "data", "block_scales");
}

// Element (r, c) of a matrix whose shape and buffers have been checked.
double value_of(const Mxfp4Matrix& m, int64_t r, int64_t c) {
  const double e = e2m1_to_float(fp4_code_at(m.data.data(), r * m.cols + c));
  const uint8_t s = m.block_scales[r * (m.cols / kMxfp4BlockSize) + c / kMxfp4BlockSize];
  return e * ue8m0_to_float(s);  // a NaN scale (0xff) gives NaN, as the scale's own decode does
}
}  // namespace

void Mxfp4Matrix::validate(const char* what) const {
  check_holds_shape(*this, what);
  // UE8M0 0xFF is NaN (OCP MX v1.0, 5.4.1).
  for (size_t i = 0; i < block_scales.size(); ++i)
    FP4MOE_CHECK(block_scales[i] != 0xFF, what, ": block scale ", i, " is NaN (0xff)");
}

double Mxfp4Matrix::value(int64_t r, int64_t c) const {
  check_holds_shape(*this, "Mxfp4Matrix::value");  // (not validate's scan of every scale: one element)
  FP4MOE_CHECK(r >= 0 && r < rows && c >= 0 && c < cols, "Mxfp4Matrix::value: (", r, ", ", c,
               ") is outside the matrix [", rows, ", ", cols, "]");
  return value_of(*this, r, c);
}

std::vector<float> Mxfp4Matrix::dequantize() const {
  validate("Mxfp4Matrix::dequantize");
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = static_cast<float>(value_of(*this, r, c));
  return out;
}

}  // namespace fp4moe
