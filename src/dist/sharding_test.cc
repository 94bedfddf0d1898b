// Sharding arithmetic (CPU): slices reassemble to the whole, TP shards' reference layers sum to
// the whole layer's, EP shards partition the experts, and bad splits are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "fp4moe/error.h"
#include "fp4moe/sharding.h"
#include "fp4moe/synthetic.h"

namespace fp4moe {
namespace {

MoeConfig small_config() {
  MoeConfig c;
  c.name = "shard-test";
  c.hidden = 96;
  c.intermediate = 128;
  c.num_experts = 8;
  c.routing.top_k = 3;
  c.shared_intermediate = 128;
  return c;
}

MoeWeights small_weights(const MoeConfig& c) {
  SyntheticOptions so;
  so.seed = 11;
  so.init = WeightInit::kQuantizedGaussian;
  return make_synthetic_moe(c, so);
}

TEST(Sharding, TensorSlicesReassembleTheMatrices) {
  const MoeConfig c = small_config();
  const MoeWeights full = small_weights(c);
  const int P = 4;
  std::vector<uint8_t> gate, gate_scales;
  std::vector<std::vector<uint8_t>> down_rows(c.hidden);
  for (int r = 0; r < P; ++r) {
    const MoeWeights s = shard_weights(full, {ShardMode::kTensor, r, P});
    ASSERT_EQ(s.config.intermediate, c.intermediate / P);
    const ExpertWeights& e = s.experts[5];
    EXPECT_EQ(e.gate.rows, c.intermediate / P);
    EXPECT_EQ(e.down.cols, c.intermediate / P);
    EXPECT_EQ(e.gate.global_scale, full.experts[5].gate.global_scale);
    gate.insert(gate.end(), e.gate.data.begin(), e.gate.data.end());
    gate_scales.insert(gate_scales.end(), e.gate.block_scales.begin(), e.gate.block_scales.end());
    for (int64_t row = 0; row < c.hidden; ++row)
      down_rows[row].insert(down_rows[row].end(), e.down.data.begin() + row * (e.down.cols / 2),
                            e.down.data.begin() + (row + 1) * (e.down.cols / 2));
  }
  EXPECT_EQ(gate, full.experts[5].gate.data);
  EXPECT_EQ(gate_scales, full.experts[5].gate.block_scales);
  std::vector<uint8_t> down;
  for (const auto& r : down_rows) down.insert(down.end(), r.begin(), r.end());
  EXPECT_EQ(down, full.experts[5].down.data);
}

TEST(Sharding, TensorShardsOutputsSumToTheWholeLayer) {
  const MoeConfig c = small_config();
  const MoeWeights full = small_weights(c);
  const int64_t T = 7;
  const std::vector<float> hidden = make_hidden_states(T, c.hidden, 3);
  const std::vector<float> logits = make_router_logits(T, c.num_experts, 4);
  const Routing routing = route_reference(c.routing, logits, T, c.num_experts, full.correction_bias);
  const std::vector<double> whole = moe_reference(full, hidden, T, routing);
  for (int P : {2, 4}) {
    std::vector<double> sum(whole.size(), 0.0);
    for (int r = 0; r < P; ++r) {
      const std::vector<double> part = moe_reference(shard_weights(full, {ShardMode::kTensor, r, P}), hidden, T, routing);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < sum.size(); ++i) {
      num += (sum[i] - whole[i]) * (sum[i] - whole[i]);
      den += whole[i] * whole[i];
    }
    ASSERT_GT(den, 0.0);
    EXPECT_LT(std::sqrt(num / den), 1e-12) << "P = " << P;
  }
}

TEST(Sharding, ExpertShardsPartitionTheExperts) {
  const MoeConfig c = small_config();
  const MoeWeights full = small_weights(c);
  const int P = 4;
  std::vector<int> owners(c.num_experts, 0);
  for (int r = 0; r < P; ++r) {
    const MoeWeights s = shard_weights(full, {ShardMode::kExpert, r, P});
    EXPECT_EQ(s.config.intermediate, c.intermediate);
    ASSERT_TRUE(s.shared.has_value());
    const IndexRange mine = ep_experts(c.num_experts, {ShardMode::kExpert, r, P});
    for (int e = 0; e < c.num_experts; ++e) {
      const bool local = e >= mine.begin && e < mine.end;
      EXPECT_EQ(s.experts[e].materialized(), local) << "rank " << r << " expert " << e;
      if (local) {
        ++owners[e];
        EXPECT_EQ(s.experts[e].down.data, full.experts[e].down.data);
      }
    }
  }
  for (int e = 0; e < c.num_experts; ++e) EXPECT_EQ(owners[e], 1) << "expert " << e;
}

TEST(Sharding, RefusesSplitsThatDoNotDivide) {
  const MoeConfig c = small_config();  // I = 128: TP 16 would leave 8 columns, half a block
  auto message = [&](Shard s) {
    try {
      validate_shard(c, s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({ShardMode::kTensor, 0, 16}).find("multiples of 16"), std::string::npos);
  EXPECT_NE(message({ShardMode::kExpert, 0, 3}).find("do not split evenly"), std::string::npos);
  EXPECT_NE(message({ShardMode::kTensor, 2, 2}).find("rank 2"), std::string::npos);
  EXPECT_EQ(message({ShardMode::kTensor, 7, 8}), "accepted");
  EXPECT_THROW(slice_cols(small_weights(c).experts[0].down, {8, 24}), Error);
  // The index helpers check their split themselves (world 0 divided by zero).
  EXPECT_THROW(tp_columns(256, Shard{ShardMode::kTensor, 0, 0}), Error);
  EXPECT_THROW(ep_experts(8, Shard{ShardMode::kExpert, 0, 0}), Error);
  EXPECT_THROW(tp_columns(100, Shard{ShardMode::kTensor, 0, 3}), Error);  // would drop column 99
  // Weights whose expert list or bytes disagree with their config are refused, not read past.
  MoeWeights short_list = small_weights(c);
  short_list.experts.resize(2);
  EXPECT_THROW(shard_weights(short_list, Shard{ShardMode::kExpert, 1, 2}), Error);
  Nvfp4Matrix lying = small_weights(c).experts[0].down;
  lying.data.resize(16);
  EXPECT_THROW(slice_rows(lying, {0, 1}), Error);
}

}  // namespace
}  // namespace fp4moe
