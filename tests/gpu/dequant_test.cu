// The register dequantization against exact host arithmetic: every E2M1 code in every slot of
// the prepacked word pair, with every finite positive E4M3 block scale (subnormal scales and the
// E2M1 subnormal 0.5 included) in its prepacked UE5M3 form, read from either pair of a scale
// word by each of the kernels' ways of reading it. Expected: e2m1 * e4m3 * 2^-7, bit
// exact in bf16.
#include <gtest/gtest.h>

#include <cmath>

#include "common/rng.h"
#include "fp4moe/format.h"
#include "gpu_test_util.h"
#include "kernels/common/dequant_nvfp4.cuh"

namespace fp4moe {
namespace {

// The scales of rows g and g+8 from pair `pair` (bytes 2 pair, 2 pair + 1) of a scale word: by
// the compile-time pair (the decode families: kRuntimePair false) or the pair chosen at run time
// (the prefill family, whose K step is not unrolled).
template <bool kRuntimePair>
__global__ void dequant_pairs(const uint2* pairs, const uint32_t* scale_words, int pair, int n, uint32_t* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t scales;
  if constexpr (kRuntimePair) scales = kernels::ue5m3_pair_to_bf16x2_scaled(scale_words[i], static_cast<uint32_t>(pair));
  else scales = pair == 0 ? kernels::ue5m3_pair_to_bf16x2_scaled<0>(scale_words[i])
                          : kernels::ue5m3_pair_to_bf16x2_scaled<1>(scale_words[i]);
  uint32_t a0[4], a1[4];
  kernels::dequant_a_fragment_pair(pairs[i].x, pairs[i].y, scales, a0, a1);
  for (int r = 0; r < 4; ++r) {
    out[8 * i + r] = a0[r];
    out[8 * i + 4 + r] = a1[r];
  }
}

// Each of the four ways to read the scales (pair 0 or 1, compile-time or run-time), the other
// pair's bytes random (they must not matter).
TEST(Dequant, EveryCodeEverySlotEveryScaleIsExact) {
  FP4MOE_REQUIRE_GPU();
  for (const bool runtime_pair : {false, true}) {
    for (const int pair : {0, 1}) {
      std::vector<uint32_t> words, scale_words;  // words: 2 per pair (w0, w1)
      std::vector<uint8_t> codes;                // 16 per pair
      std::vector<uint8_t> scale_g, scale_g8;    // the E4M3 codes of rows g and g+8, per pair
      Rng rng(3 + 2 * pair + runtime_pair);
      for (int sc = 1; sc < 0x7F; ++sc) {
        for (int c = 0; c < 16; ++c) {
          // Code c in every slot; the row-g+8 scale is another random finite code.
          uint64_t fp4 = 0;
          for (int v = 0; v < 16; ++v) {
            const uint8_t code = static_cast<uint8_t>((c + 3 * v) & 0xF);
            codes.push_back(code);
            fp4 |= kernels::fp4_pair_place(code, v);
          }
          words.push_back(static_cast<uint32_t>(fp4));
          words.push_back(static_cast<uint32_t>(fp4 >> 32));
          const uint8_t other = static_cast<uint8_t>(1 + rng.below(0x7E));
          scale_g.push_back(static_cast<uint8_t>(sc));
          scale_g8.push_back(other);
          const uint32_t ours = kernels::e4m3_to_ue5m3(static_cast<uint8_t>(sc)) |
                                (static_cast<uint32_t>(kernels::e4m3_to_ue5m3(other)) << 8);
          const uint32_t junk = static_cast<uint32_t>(rng.below(0x10000));
          scale_words.push_back(pair == 0 ? ours | junk << 16 : junk | ours << 16);
        }
      }
      const int n = static_cast<int>(scale_words.size());
      DeviceBuffer dw = test::to_device(words), ds = test::to_device(scale_words), dout(n * 32);
      test::poison(dout);
      const int blocks = (n + 127) / 128;
      if (runtime_pair) dequant_pairs<true><<<blocks, 128>>>(dw.get<uint2>(), ds.get<uint32_t>(), pair, n, dout.get<uint32_t>());
      else dequant_pairs<false><<<blocks, 128>>>(dw.get<uint2>(), ds.get<uint32_t>(), pair, n, dout.get<uint32_t>());
      FP4MOE_CUDA_CHECK_LAUNCH();
      const std::vector<uint32_t> out = test::to_host<uint32_t>(dout, n * 8);
      int bad = 0;
      for (int i = 0; i < n; ++i) {
        for (int v = 0; v < 16; ++v) {
          // reg r = v / 2 (low half = even v); regs 0-3 step 2h, 4-7 step 2h + 1. Rows: even regs
          // row g, odd regs row g+8.
          const int reg = v / 2;
          const uint16_t bits = static_cast<uint16_t>(v % 2 ? out[8 * i + reg] >> 16 : out[8 * i + reg]);
          const uint8_t scale_code = reg % 2 == 0 ? scale_g[i] : scale_g8[i];
          const double expected =
              std::ldexp(static_cast<double>(e2m1_to_float(codes[16 * i + v])) * e4m3_to_float(scale_code), -7);
          const double got = Bf16::from_bits(bits).to_float();
          if (got != expected || std::signbit(got) != std::signbit(expected)) {
            if (++bad < 10)
              ADD_FAILURE() << (runtime_pair ? "run-time" : "compile-time") << " pair " << pair << ": code "
                            << int(codes[16 * i + v]) << " slot " << v << " scale 0x" << std::hex << int(scale_code)
                            << std::dec << ": got " << got << ", expected " << expected;
          }
        }
      }
      EXPECT_EQ(bad, 0) << "of " << n * 16 << " values, " << (runtime_pair ? "run-time" : "compile-time")
                        << " pair " << pair;
    }
  }
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
