// Roofline accounting against hand-computed cases.
#include "bench/roofline.h"

#include <gtest/gtest.h>

#include <limits>
#include <utility>

#include "fp4moe/error.h"

namespace fp4moe {
namespace {

TEST(Roofline, Glm5SingleTokenByHand) {
  const MoeConfig g = MoeConfig::glm5();
  // T = 1, 8 experts + the shared one: each expert 3 * 6144 * 2048 elements at 0.5625 B + 12 B.
  const LayerCost c = layer_cost(g, 1, 8);
  const double expert = 3.0 * 6144 * 2048 * 0.5625 + 12;  // 21233676 B
  EXPECT_DOUBLE_EQ(expert, 21233676.0);
  EXPECT_DOUBLE_EQ(c.weight_bytes, 9 * expert);
  EXPECT_DOUBLE_EQ(c.activation_bytes, 6144 * 2 + 256 * 4 + 6144 * 2);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 1 * 8 * 3 * 6144 * 2048 + 2.0 * 3 * 6144 * 2048);
  // On 4.5 TB/s and 790 TFLOPS: memory-bound, floor = bytes / BW.
  const Roofline r = roofline(c, 4.5e12, 790e12);
  EXPECT_TRUE(r.memory_bound);
  EXPECT_DOUBLE_EQ(r.floor_s, c.bytes / 4.5e12);
  EXPECT_NEAR(r.floor_s * 1e6, 42.47, 0.01);  // 191.1 MB / 4.5 TB/s
  EXPECT_NEAR(r.ridge, 175.56, 0.01);
}

TEST(Roofline, LargeBatchIsComputeBound) {
  const MoeConfig g = MoeConfig::glm5();
  const LayerCost c = layer_cost(g, 16384, 256);
  const Roofline r = roofline(c, 4.5e12, 790e12);
  EXPECT_FALSE(r.memory_bound);
  // 2 * 16384 * (8 + 1) * 3 * 6144 * 2048 = 11.13 TFLOP -> 14.1 ms at 790 TFLOPS.
  EXPECT_NEAR(c.flops, 1.1132e13, 1e10);
  EXPECT_NEAR(r.floor_s * 1e3, 14.09, 0.01);
  EXPECT_GT(r.intensity, r.ridge);
}

TEST(Roofline, CeilingsMustBeFiniteAndPositive) {
  const LayerCost c = layer_cost(MoeConfig::glm5(), 1, 8);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [bw, fl] : {std::pair{0.0, 790e12}, std::pair{4.5e12, 0.0}, std::pair{inf, 790e12},
                               std::pair{4.5e12, inf}, std::pair{nan, 790e12}, std::pair{4.5e12, nan}})
    EXPECT_THROW(roofline(c, bw, fl), Error) << bw << " " << fl;
  EXPECT_THROW(count_active_experts({0, 1}, 0), Error);
}

TEST(Roofline, Tp8AndNoSharedExpert) {
  MoeConfig t = MoeConfig::glm5_tp8();
  t.shared_intermediate = 0;
  const LayerCost c = layer_cost(t, 4, 30);
  EXPECT_DOUBLE_EQ(c.weight_bytes, 30 * (3.0 * 6144 * 256 * 0.5625 + 12));
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 4 * 8 * 3 * 6144 * 256);
  EXPECT_EQ(count_active_experts({3, 5, 3, 255, 5}, 256), 3);
  EXPECT_THROW(count_active_experts({256}, 256), Error);
  EXPECT_THROW(layer_cost(t, 1, 300), Error);
}

}  // namespace
}  // namespace fp4moe
