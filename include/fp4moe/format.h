// fp4moe/format.h - NVFP4 and MXFP4: scalar codecs, block quantization, dequantization.
//
// Scalar codecs (the OCP MX and NVIDIA NVFP4 definitions):
//   E2M1  4 bits, s.ee.m, bias 1: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives; no Inf/NaN.
//   E4M3  8 bits "e4m3fn": s.eeee.mmm, bias 7, max 448, NaN = s.1111.111, no Inf.
//   UE8M0 8 bits, unsigned power of two 2^(e-127); 0xFF = NaN.
// Encoding rounds to nearest, ties to even (the candidate whose code has a 0 in its last bit).
// Non-finite inputs, documented per codec:
//   e2m1_from_float  : |x| > 6 and +-Inf saturate to +-6 (cvt.rn.satfinite semantics);
//                      NaN -> +6 (0x7): E2M1 has no NaN; quantizers reject NaN before this.
//   e4m3_from_float  : |x| > 448 and +-Inf saturate to +-448 (satfinite); NaN -> 0x7F.
//   ue8m0_from_float : nearest power of two, a mantissa of exactly 1.5 rounds up (as
//                      ml_dtypes' float8_e8m0fnu does); x < 2^-127 -> 0x00 (2^-127);
//                      NaN, Inf, x <= 0 and x beyond 2^127 -> 0xFF (NaN).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fp4moe {

// ---- scalar codecs -----------------------------------------------------------------------------
uint8_t e2m1_from_float(float x);
float e2m1_to_float(uint8_t code);  // uses the low 4 bits
uint8_t e4m3_from_float(float x);
float e4m3_to_float(uint8_t code);
uint8_t ue8m0_from_float(float x);
float ue8m0_to_float(uint8_t code);

inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE4m3MinSubnormal = 1.0f / 512.0f;  // 2^-9
inline constexpr int kNvfp4BlockSize = 16;
inline constexpr int kMxfp4BlockSize = 32;

// ---- packed FP4 element access -----------------------------------------------------------------
// Two E2M1 codes per byte, the lower index in the low nibble.
inline uint8_t fp4_code_at(const uint8_t* packed, int64_t i) {
  const uint8_t b = packed[i >> 1];
  return (i & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xF);
}
inline void fp4_set_code(uint8_t* packed, int64_t i, uint8_t code) {
  uint8_t& b = packed[i >> 1];
  b = (i & 1) ? static_cast<uint8_t>((b & 0x0F) | (code << 4))
              : static_cast<uint8_t>((b & 0xF0) | (code & 0xF));
}

// ---- NVFP4 -------------------------------------------------------------------------------------
// A [rows, cols] matrix quantized along cols (the GEMM's reduction dimension K), in the
// checkpoint layout: data U8 [rows, cols/2], block_scales E4M3 [rows, cols/16] row-major,
// global_scale F32 ("weight_scale_2").
struct Nvfp4Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> data;
  std::vector<uint8_t> block_scales;
  float global_scale = 1.0f;

  int64_t blocks_per_row() const { return cols / kNvfp4BlockSize; }
  // e2m1(code) * e4m3(block scale) * global_scale, evaluated in double (exact); throws where
  // (r, c) or the buffers do not fit the shape.
  double value(int64_t r, int64_t c) const;
  // The dequantized matrix, row-major [rows, cols]; validate()s first.
  std::vector<float> dequantize() const;
  std::vector<double> dequantize_f64() const;
  // Throws fp4moe::Error when the shapes of data/scales do not match rows and cols.
  void validate(const char* what) const;
};

// The NVIDIA ModelOpt weight recipe (float32 arithmetic, as ModelOpt does it):
//   global = amax(W) / (6 * 448)                     (an all-zero matrix takes global 1.0)
//   ratio  = amax(block) / (6 * global); a zero block takes ratio 1.0;
//   scale  = e4m3_rne(clamp(ratio, 2^-9, 448))
//   code   = e2m1_rne_satfinite(x / (float(scale) * global))
// Byte for byte ModelOpt's except in two cases: a block whose ratio lies below 2^-9 (amax under
// ~2.2e-6 of the matrix's) takes scale 2^-9 here, where a plain cast to E4M3 can round the
// ratio to a zero scale (and the block's values to 0 or NaN); and -0.0 keeps its sign (code
// 0x8), where a sign taken as x < 0 gives 0x0 - the same value.
// Throws when cols is not a multiple of 16 or any element is NaN or Inf.
Nvfp4Matrix quantize_nvfp4(std::span<const float> w, int64_t rows, int64_t cols);
// The same with a given global scale (used when several tensors share one).
Nvfp4Matrix quantize_nvfp4_with_global(std::span<const float> w, int64_t rows, int64_t cols,
                                       float global_scale);
float nvfp4_global_scale_for_amax(float amax);

// Activation quantization with a calibrated per-tensor input_scale (the Blackwell W4A4 recipe
// of the TensorRT-LLM / vLLM kernels):
//   sf   = e4m3_rne_satfinite(amax(block) / 6 / input_scale)      (may be 0 for a zero block)
//   code = e2m1_rne_satfinite(x * (1 / (float(sf) * input_scale))), 0 where sf == 0.
// The result's global_scale is input_scale. Throws on non-finite input or input_scale <= 0.
Nvfp4Matrix quantize_nvfp4_activations(std::span<const float> x, int64_t rows, int64_t cols,
                                       float input_scale);

// ---- MXFP4 (OCP Microscaling v1.0) -------------------------------------------------------------
// Block 32, UE8M0 scale, no tensor scale:
//   shared_exp = floor(log2(amax(block))) - 2  (2 = emax of E2M1), clamped to [-127, 127];
//   a zero block takes exponent 0 (scale 1.0); code = e2m1_rne_satfinite(x / 2^shared_exp).
struct Mxfp4Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> data;          // [rows, cols/2]
  std::vector<uint8_t> block_scales;  // [rows, cols/32] UE8M0

  // 2^(scale - 127) * e2m1(code); throws where (r, c) or the buffers do not fit the shape.
  double value(int64_t r, int64_t c) const;
  // Throws fp4moe::Error where the buffers do not hold [rows, cols] or a scale is NaN (0xFF).
  std::vector<float> dequantize() const;
  void validate(const char* what) const;
};
Mxfp4Matrix quantize_mxfp4(std::span<const float> w, int64_t rows, int64_t cols);

// ---- error statistics --------------------------------------------------------------------------
struct QuantError {
  double rel_frobenius = 0;  // ||q - x|| / ||x||
  double max_abs = 0;
  double rmse = 0;
};
QuantError quantization_error(std::span<const float> original, std::span<const float> dequant);

}  // namespace fp4moe
