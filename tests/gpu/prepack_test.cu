// The GPU prepack kernel against the host evaluation of the same layout functions, bit for
// bit, on shapes with padding in rows and in K, interleaved (FC1) and plain (FC2); and the
// layout itself against its definition for a few hand-picked elements; and the token order of
// the prefill family (fragment order) against where the prepack puts each weight.
#include <gtest/gtest.h>

#include <algorithm>

#include "fp4moe/synthetic.h"
#include "gpu_test_util.h"
#include "kernels/common/fragment_order.h"
#include "kernels/moe/prepack_layout.h"
#include "kernels/moe/weight_prep.h"

namespace fp4moe {
namespace {

struct Shape {
  int64_t rows, k;
  bool interleave;
};

class Prepack : public ::testing::TestWithParam<Shape> {};

TEST_P(Prepack, GpuMatchesHostBitForBit) {
  FP4MOE_REQUIRE_GPU();
  const Shape s = GetParam();
  const Nvfp4Matrix m0 = make_synthetic_nvfp4(s.rows, s.k, 5, 0, WeightInit::kRandomCodes);
  const Nvfp4Matrix m1 = make_synthetic_nvfp4(s.rows, s.k, 5, 1, WeightInit::kRandomCodes);
  const kernels::PrepackShape shape{s.interleave ? 2 * s.rows : s.rows, s.k};
  DeviceBuffer c0 = test::to_device(m0.data), c1 = test::to_device(m1.data);
  DeviceBuffer s0 = test::to_device(m0.block_scales), s1 = test::to_device(m1.block_scales);
  DeviceBuffer w(shape.weight_bytes()), sc(shape.scale_bytes());
  test::poison(w);
  test::poison(sc);
  kernels::launch_prepack({c0.get<uint8_t>(), s0.get<uint8_t>()}, {c1.get<uint8_t>(), s1.get<uint8_t>()},
                          s.rows, s.k, s.interleave, w.get<uint8_t>(), sc.get<uint8_t>(), nullptr);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint32_t> gw = test::to_host<uint32_t>(w, shape.weight_bytes() / 4);
  const std::vector<uint8_t> gs = test::to_host<uint8_t>(sc, shape.scale_bytes());
  const kernels::Nvfp4View views[2] = {{m0.data.data(), m0.block_scales.data()},
                                       {m1.data.data(), m1.block_scales.data()}};
  int64_t bad = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(gw.size()); ++i) {
    const int st = i & 3, lane = (i >> 2) & 31, c = (i >> 7) & 3;
    const int64_t blk = i >> 9;
    const uint32_t want = kernels::prepack_word(views, s.rows, s.k, s.interleave,
                                                blk % shape.rowtiles(), blk / shape.rowtiles(), c, lane, st);
    bad += gw[i] != want;
  }
  for (int64_t i = 0; i < static_cast<int64_t>(gs.size()); ++i) {
    const int b = i & 7, lane = (i >> 3) & 31;
    const int64_t blk = i >> 8;
    bad += gs[i] != kernels::prepack_scale(views, s.rows, s.k, s.interleave, blk % shape.rowtiles(),
                                           blk / shape.rowtiles(), lane, b);
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Prepack,
                         ::testing::Values(Shape{16, 256, false}, Shape{40, 48, false},
                                           Shape{24, 400, true}, Shape{256, 6144, true},
                                           Shape{6144, 272, false}),
                         [](const auto& i) {
                           return std::to_string(i.param.rows) + "x" + std::to_string(i.param.k) +
                                  (i.param.interleave ? "_gate_up" : "");
                         });

TEST(PrepackLayout, HandPickedElementsLandWhereTheLayoutSays) {
  // Row 9 (= g 1 + 8), K 70: kgroup 0, chunk 1 (64..127), t = (70-64)/16 = 0, step 1 (k0 68),
  // offset 2 -> slot V6 (row g+8, k+2) of step 1, i.e. V14 of the pair of steps 0 and 1 of lane
  // 4g+t = 4: word 1 of the pair holds all four of its bits (dequant_nvfp4.cuh: 36 37 38 45).
  Nvfp4Matrix m = make_synthetic_nvfp4(16, 256, 1, 0, WeightInit::kRandomCodes);
  const kernels::Nvfp4View v{m.data.data(), m.block_scales.data()};
  const uint64_t pair = kernels::prepack_pair(&v, 16, 256, false, 0, 0, 1, 4, 0);
  const uint32_t code = fp4_code_at(m.data.data(), 9 * 256 + 70);
  EXPECT_EQ(pair & kernels::fp4_pair_place(0xF, 14), kernels::fp4_pair_place(code, 14));
  EXPECT_EQ(kernels::fp4_pair_place(0xF, 14), uint64_t{0x2070} << 32);
  // Its scale: block 70 / 16 = 4 = 4c + t with c = 1, t = 0: lane 4 byte 2c + 1 = 3.
  EXPECT_EQ(kernels::prepack_scale(&v, 16, 256, false, 0, 0, 4, 3),
            kernels::e4m3_to_ue5m3(m.block_scales[9 * 16 + 4]));
  // Interleaved FC1: packed row 12 of tile 0 is up row 4.
  EXPECT_EQ(kernels::prepack_source_row(12, 8, true).matrix, 1);
  EXPECT_EQ(kernels::prepack_source_row(12, 8, true).row, 4);
  EXPECT_EQ(kernels::prepack_source_row(20, 8, true).row, -1);  // gate row 12 >= 8: padding
}

TEST(FragmentOrder, PutsEveryTokenElementInTheSlotOfItsWeightInTheWgmmaFragment) {
  // One nonzero weight at a time (row r, K k of chunk 1): find the (lane, step, slot) of the
  // prepacked words that holds it, then the k slot of wgmma's register fragment that slot feeds
  // (lane (g, t): registers V0V1 = row g, slots 2t, 2t+1; V2V3 = row g+8, the same slots;
  // V4V5 = row g, 2t+8, 2t+9; V6V7 = row g+8). The token element k must sit at that position of
  // k step `step` in fragment order: 64 + 16 * step + slot.
  constexpr int64_t kRows = 16, kK = 256;
  Nvfp4Matrix m = make_synthetic_nvfp4(kRows, kK, 1, 0, WeightInit::kRandomCodes);
  std::fill(m.block_scales.begin(), m.block_scales.end(), uint8_t{0x38});  // E4M3 1.0
  const kernels::Nvfp4View v{m.data.data(), m.block_scales.data()};
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t k = 64; k < 128; ++k) {
      std::fill(m.data.begin(), m.data.end(), uint8_t{0});
      m.data[(r * kK + k) / 2] = (k & 1) ? 0x50 : 0x05;  // code 5 (1.5) at (r, k)
      int found = 0;
      for (int lane = 0; lane < 32; ++lane)
        for (int step = 0; step < 4; ++step) {
          // The word pair of steps 2h, 2h + 1 (h = step / 2).
          const uint64_t pair = kernels::prepack_pair(&v, kRows, kK, false, 0, 0, 1, lane, step / 2);
          for (int slot_v = 0; slot_v < 8; ++slot_v) {
            const int pv = 8 * (step & 1) + slot_v;  // the slot in the pair
            if ((pair & kernels::fp4_pair_place(0xF, pv)) != kernels::fp4_pair_place(5, pv)) continue;
            ++found;
            const int g = lane >> 2, t = lane & 3, reg = slot_v / 2;
            EXPECT_EQ(r, g + ((reg & 1) ? 8 : 0)) << "row of slot " << slot_v;
            const int kslot = 2 * t + (reg >= 2 ? 8 : 0) + (slot_v & 1);
            EXPECT_EQ(kernels::fragment_order_position(k), 64 + 16 * step + kslot)
                << "row " << r << " k " << k << ": lane " << lane << " step " << step << " slot " << slot_v;
            EXPECT_EQ(kernels::fragment_order_element(64 + 16 * step + kslot), k);
          }
        }
      EXPECT_EQ(found, 1) << "row " << r << " k " << k;
    }
  EXPECT_EQ(kernels::fragment_order_pitch(144), 192);
  EXPECT_EQ(kernels::fragment_order_pitch(6144), 6144);
}

}  // namespace
}  // namespace fp4moe
