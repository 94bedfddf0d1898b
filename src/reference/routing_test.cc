// Reference routing: hand-computed cases for both modes, tie-breaking, groups, validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "fp4moe/error.h"
#include "fp4moe/moe.h"

namespace fp4moe {
namespace {

TEST(Routing, SoftmaxTopKHandComputedWithTies) {
  RoutingConfig c{RoutingMode::kSoftmaxTopK, 2, 1, 1, false, 1.0f};
  // Experts 1 and 3 tie at the top: the lower index ranks first.
  const std::vector<float> logits = {1, 3, 2, 3};
  const Routing r = route_reference(c, logits, 1, 4, {});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3}));
  const double z = std::exp(1) + 2 * std::exp(3) + std::exp(2);
  EXPECT_NEAR(r.weights[0], std::exp(3) / z, 1e-7);
  EXPECT_NEAR(r.weights[1], std::exp(3) / z, 1e-7);
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.0f;
  const Routing n = route_reference(c, logits, 1, 4, {});
  EXPECT_FLOAT_EQ(n.weights[0], 1.0f);  // 0.5 * 2
  EXPECT_FLOAT_EQ(n.weights[1], 1.0f);
}

// Logits hundreds apart: both losers' probabilities underflow to 0 in double, which ranked by
// probability read as a tie (the lower index); by logit, -800 beats -1000, as on the GPU.
TEST(Routing, SoftmaxRanksByLogitWhereProbabilitiesUnderflow) {
  const RoutingConfig c{RoutingMode::kSoftmaxTopK, 2, 1, 1, false, 1.0f};
  const Routing r = route_reference(c, std::vector<float>{0, -1000, -800}, 1, 3, {});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(r.weights, (std::vector<float>{1.0f, 0.0f}));
}

// A -inf logit masks its expert: softmax gives it probability 0 and chooses it only where fewer
// than top_k logits are finite (weight 0, the lowest index first); the sigmoid scores it 0, so
// its bias alone ranks it.
TEST(Routing, MinusInfinityMasksItsExpert) {
  const float kMasked = -INFINITY;
  const RoutingConfig soft{RoutingMode::kSoftmaxTopK, 3, 1, 1, true, 2.0f};
  const Routing a = route_reference(soft, std::vector<float>{kMasked, 1, kMasked, 2, 0}, 1, 5, {});
  EXPECT_EQ(a.ids, (std::vector<int32_t>{3, 1, 4}));
  const double z = std::exp(2) + std::exp(1) + 1;
  EXPECT_NEAR(a.weights[0], 2 * std::exp(2) / z, 1e-6);
  const Routing b = route_reference(soft, std::vector<float>{kMasked, kMasked, 7, kMasked, kMasked}, 1, 5, {});
  EXPECT_EQ(b.ids, (std::vector<int32_t>{2, 0, 1}));
  EXPECT_EQ(b.weights, (std::vector<float>{2.0f, 0.0f, 0.0f}));
  const RoutingConfig sig{RoutingMode::kSigmoidNoAuxTc, 2, 1, 1, false, 1.0f};
  const std::vector<float> bias = {0, 0.9f, 0, 0};
  const Routing c = route_reference(sig, std::vector<float>{0, kMasked, 1, kMasked}, 1, 4, bias);
  EXPECT_EQ(c.ids, (std::vector<int32_t>{1, 2}));  // 0 + 0.9 beats sigmoid(1) = 0.731
  EXPECT_EQ(c.weights[0], 0.0f);
  EXPECT_NEAR(c.weights[1], 1 / (1 + std::exp(-1.0)), 1e-6);
  // Every expert masked: the sigmoid routes on the bias (weights 0); softmax has nothing to route
  // on and refuses, naming the token.
  const Routing d = route_reference(sig, std::vector<float>(4, kMasked), 1, 4, bias);
  EXPECT_EQ(d.ids, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(d.weights, (std::vector<float>{0.0f, 0.0f}));
  std::vector<float> rows(10, 0.5f);
  std::fill(rows.begin() + 5, rows.end(), kMasked);
  try {
    route_reference(soft, rows, 2, 5, {});
    ADD_FAILURE() << "a softmax row of -inf only was routed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("every logit of token 1 is -inf"), std::string::npos) << e.what();
  }
}

TEST(Routing, SigmoidNoAuxTcBiasChoosesScoresWeigh) {
  RoutingConfig c{RoutingMode::kSigmoidNoAuxTc, 2, 1, 1, false, 2.5f};
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
  // Without bias: experts 2 then 1. A bias of +1 on expert 3 lifts it to the top of the choice.
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 1.0f};
  const Routing r = route_reference(c, logits, 1, 4, bias);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 2}));
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  EXPECT_NEAR(r.weights[0], 2.5 * sig(-1.0), 1e-6);  // the un-biased score weighs
  EXPECT_NEAR(r.weights[1], 2.5 * sig(2.0), 1e-6);
  c.norm_topk_prob = true;
  const Routing n = route_reference(c, logits, 1, 4, bias);
  EXPECT_NEAR(n.weights[0], 2.5 * sig(-1.0) / (sig(-1.0) + sig(2.0)), 1e-6);
  EXPECT_NEAR(n.weights[0] + n.weights[1], 2.5, 1e-6);
}

TEST(Routing, GroupLimitedSelection) {
  // 8 experts in 4 groups of 2; the best 2 groups by (sum of their top-2 choice scores) compete.
  RoutingConfig c{RoutingMode::kSigmoidNoAuxTc, 2, 4, 2, true, 1.0f};
  // Group scores (sigmoid sums): g0 {0,1}: logits 5, -5; g1 {2,3}: 1, 1; g2 {4,5}: 4, -4;
  // g3 {6,7}: 0, 0. sums: g0 ~1.0000, g1 1.4621, g2 ~1.0000 (0.9820+0.0180), g3 1.0.
  // g1 is best; then g0 (0.99331+0.00669 = 1.0) vs g2 (0.98201+0.01799 = 1.0) vs g3 (1.0): all
  // equal to rounding in exact arithmetic, so use distinct values instead:
  const std::vector<float> logits = {5, -2, 1, 1, 4, -4, 0, 0};
  // g0: 0.99331+0.11920 = 1.1125; g1: 1.4621; g2: 1.0; g3: 1.0 -> groups g1, g0.
  // Expert 4 (sigmoid 0.982) is excluded although it beats experts 2 and 3.
  const Routing r = route_reference(c, logits, 1, 8, {});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2}));
  RoutingConfig all = c;
  all.topk_group = 4;
  EXPECT_EQ(route_reference(all, logits, 1, 8, {}).ids, (std::vector<int32_t>{0, 4}));
  // The correction bias enters the group scores: +0.3 on g2's experts makes its choice scores
  // 0.98201 + 0.3 and 0.01799 + 0.3, its sum 1.6000, the best group; g1 (1.4621) stays, g0
  // (1.1125) is dropped. Among g1 and g2: expert 4 (1.282), then experts 2 and 3 (0.73106 each,
  // an exact tie: the lower index) before expert 5 (0.318). The weights are the unbiased
  // sigmoids, normalized: 0.98201 / (0.98201 + 0.73106) and 0.73106 / (...).
  const std::vector<float> bias = {0, 0, 0, 0, 0.3f, 0.3f, 0, 0};
  const Routing b = route_reference(c, logits, 1, 8, bias);
  EXPECT_EQ(b.ids, (std::vector<int32_t>{4, 2}));
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  EXPECT_NEAR(b.weights[0], sig(4) / (sig(4) + sig(1)), 1e-6);
  EXPECT_NEAR(b.weights[1], sig(1) / (sig(4) + sig(1)), 1e-6);
}

TEST(Routing, RejectsBadInput) {
  RoutingConfig c{RoutingMode::kSoftmaxTopK, 2, 1, 1, true, 1.0f};
  EXPECT_THROW(route_reference(c, std::vector<float>(7), 2, 4, {}), Error);
  EXPECT_THROW(route_reference(c, std::vector<float>(8), 2, 4, std::vector<float>(3)), Error);
  std::vector<float> nan_logits(8, 0.0f);
  nan_logits[3] = std::nanf("");
  EXPECT_THROW(route_reference(c, nan_logits, 2, 4, {}), Error);
  nan_logits[3] = INFINITY;  // -inf masks an expert; +inf means nothing
  EXPECT_THROW(route_reference(c, nan_logits, 2, 4, {}), Error);
  c.top_k = 5;
  EXPECT_THROW(route_reference(c, std::vector<float>(8), 2, 4, {}), Error);
  // NaN orders nothing: a bias or scaling factor of NaN once chose the worst experts silently.
  c.top_k = 2;
  RoutingConfig g{RoutingMode::kSigmoidNoAuxTc, 2, 1, 1, true, 1.0f};
  const std::vector<float> logits = {-3, -2, 3, 4};
  EXPECT_THROW(route_reference(g, logits, 1, 4, std::vector<float>{0, 0, std::nanf(""), 0}), Error);
  EXPECT_THROW(route_reference(g, logits, 1, 4, std::vector<float>{0, 0, 0, INFINITY}), Error);
  g.routed_scaling_factor = std::nanf("");
  EXPECT_THROW(route_reference(g, logits, 1, 4, {}), Error);
  g.routed_scaling_factor = -2.0f;
  EXPECT_THROW(route_reference(g, logits, 1, 4, {}), Error);
  // top_k beyond the experts of the selected groups (it read past its id list).
  RoutingConfig few{RoutingMode::kSigmoidNoAuxTc, 3, 4, 1, true, 1.0f};
  EXPECT_THROW(route_reference(few, std::vector<float>(8, 0.5f), 1, 8, {}), Error);
  // tokens x experts past int64 wrapped to a size that matched an empty logits span.
  EXPECT_THROW(route_reference(c, {}, int64_t{1} << 62, 4, {}), Error);
  // The group scores, public on their own: no experts (it read the first of an empty group), a
  // NaN (no order to sort by), groups that do not divide the experts.
  EXPECT_THROW(expert_group_scores({}, 1), Error);
  EXPECT_THROW(expert_group_scores(std::vector<double>{1, std::nan(""), 2, 3}, 2), Error);
  EXPECT_THROW(expert_group_scores(std::vector<double>{1, 2, 3}, 2), Error);
  EXPECT_EQ(expert_group_scores(std::vector<double>{1, 4, 2, 3}, 2), (std::vector<double>{5, 5}));
}

TEST(MoeConfigTest, PresetsAndValidation) {
  const MoeConfig g = MoeConfig::glm5();
  EXPECT_EQ(g.hidden, 6144);
  EXPECT_EQ(g.intermediate, 2048);
  EXPECT_EQ(g.num_experts, 256);
  EXPECT_EQ(g.routing.top_k, 8);
  EXPECT_FLOAT_EQ(g.routing.routed_scaling_factor, 2.5f);
  EXPECT_EQ(MoeConfig::glm5_tp8().intermediate, 256);
  EXPECT_EQ(MoeConfig::deepseek_v3().routing.n_group, 8);
  EXPECT_THROW(MoeConfig::preset("glm6"), Error);
  MoeConfig bad = g;
  bad.hidden = 6000 + 4;
  EXPECT_THROW(bad.validate(), Error);
  bad = g;
  bad.routing.n_group = 3;  // does not divide 256
  EXPECT_THROW(bad.validate(), Error);
  bad = g;
  bad.routing.top_k = 300;
  EXPECT_THROW(bad.validate(), Error);
  // Softmax top-k has no groups: a config with them would be routed as if it had none.
  bad = MoeConfig::deepseek_v3();
  bad.routing.mode = RoutingMode::kSoftmaxTopK;
  try {
    bad.validate();
    ADD_FAILURE() << "softmax with n_group 8 validated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax top-k routing has no expert groups (n_group = 8, topk_group = 4"),
              std::string::npos)
        << e.what();
  }
  bad.routing.n_group = bad.routing.topk_group = 1;
  EXPECT_NO_THROW(bad.validate());
}

}  // namespace
}  // namespace fp4moe
