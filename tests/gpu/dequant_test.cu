// The register dequantization against exact host arithmetic: every E2M1 code in every slot of
// the prepacked word pair, with every finite positive E4M3 block scale (subnormal scales and the
// E2M1 subnormal 0.5 included) in its prepacked UE5M3 form. Expected: e2m1 * e4m3 * 2^-7, bit
// exact in bf16.
#include <gtest/gtest.h>

#include <cmath>

#include "common/rng.h"
#include "fp4moe/format.h"
#include "gpu_test_util.h"
#include "kernels/common/dequant_nvfp4.cuh"

namespace fp4moe {
namespace {

__global__ void dequant_pairs(const uint2* pairs, const uint32_t* scale_codes, int n, uint32_t* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t a0[4], a1[4];
  kernels::dequant_a_fragment_pair(pairs[i].x, pairs[i].y, kernels::ue5m3_pair_to_bf16x2_scaled<0>(scale_codes[i]),
                                   a0, a1);
  for (int r = 0; r < 4; ++r) {
    out[8 * i + r] = a0[r];
    out[8 * i + 4 + r] = a1[r];
  }
}

TEST(Dequant, EveryCodeEverySlotEveryScaleIsExact) {
  FP4MOE_REQUIRE_GPU();
  std::vector<uint32_t> words, scales;  // words: 2 per pair (w0, w1)
  std::vector<uint8_t> codes;           // 16 per pair
  Rng rng(3);
  for (int sc = 1; sc < 0x7F; ++sc) {
    for (int c = 0; c < 16; ++c) {
      // Code c in every slot; the row-g+8 scale is another random finite code.
      uint64_t pair = 0;
      for (int v = 0; v < 16; ++v) {
        const uint8_t code = static_cast<uint8_t>((c + 3 * v) & 0xF);
        codes.push_back(code);
        pair |= kernels::fp4_pair_place(code, v);
      }
      words.push_back(static_cast<uint32_t>(pair));
      words.push_back(static_cast<uint32_t>(pair >> 32));
      const uint32_t other = 1 + static_cast<uint32_t>(rng.below(0x7E));
      scales.push_back(kernels::e4m3_to_ue5m3(static_cast<uint8_t>(sc)) |
                       (static_cast<uint32_t>(kernels::e4m3_to_ue5m3(static_cast<uint8_t>(other))) << 8) |
                       (other << 16));  // bits 16..23: the E4M3 code of the row-g+8 scale, for the check
    }
  }
  const int n = static_cast<int>(scales.size());
  DeviceBuffer dw = test::to_device(words), ds = test::to_device(scales), dout(n * 32);
  test::poison(dout);
  dequant_pairs<<<(n + 127) / 128, 128>>>(dw.get<uint2>(), ds.get<uint32_t>(), n, dout.get<uint32_t>());
  FP4MOE_CUDA_CHECK_LAUNCH();
  const std::vector<uint32_t> out = test::to_host<uint32_t>(dout, n * 8);
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    for (int v = 0; v < 16; ++v) {
      // reg r = v / 2 (low half = even v); regs 0-3 step 2h, 4-7 step 2h + 1. Rows: even regs
      // row g, odd regs row g+8.
      const int reg = v / 2;
      const uint16_t bits = static_cast<uint16_t>(v % 2 ? out[8 * i + reg] >> 16 : out[8 * i + reg]);
      const uint8_t scale_code = (reg % 2 == 0) ? static_cast<uint8_t>(1 + i / 16)
                                                : static_cast<uint8_t>(scales[i] >> 16);
      const double expected =
          std::ldexp(static_cast<double>(e2m1_to_float(codes[16 * i + v])) * e4m3_to_float(scale_code), -7);
      const double got = Bf16::from_bits(bits).to_float();
      if (got != expected || std::signbit(got) != std::signbit(expected)) {
        if (++bad < 10)
          ADD_FAILURE() << "code " << int(codes[16 * i + v]) << " slot " << v << " scale 0x"
                        << std::hex << int(scale_code) << std::dec << ": got " << got
                        << ", expected " << expected;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << n * 16 << " values";
}

TEST(Dequant, Ue5m3EncodesEveryPositiveE4m3Exactly) {
  for (int c = 1; c < 0x7F; ++c) {
    const uint8_t u = kernels::e4m3_to_ue5m3(static_cast<uint8_t>(c));
    const double v = std::ldexp(1.0 + (u & 7) / 8.0, (u >> 3) - 9);
    EXPECT_EQ(v, static_cast<double>(e4m3_to_float(static_cast<uint8_t>(c)))) << "E4M3 code " << c;
  }
}

}  // namespace
}  // namespace fp4moe
