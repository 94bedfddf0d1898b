// The GPU's routing against the float64 reference's, for the routing and the layer tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fp4moe/moe.h"

namespace fp4moe::test {

// ids and weights [T, k] as the GPU routed them, against route_reference on the same logits and
// correction bias (empty: zeros). Each slot holds the reference's expert, its weight within
// weight_tol x (1 + |weight|); float32 (GPU) and float64 (reference) scores may order a near-tie
// differently, so a differing expert passes only where the two experts' choice scores differ, by
// less than 1e-6 of the larger (an exact tie is broken by the lower index on both sides), or,
// with expert groups, where the last kept group and the first dropped one score as close and the
// GPU's expert is of a group scoring at least the last kept one less that (a near-tie of groups
// swaps a whole group's experts); and only on a few tokens
// (rounding, not a wrong choice). Such a token's weights are not compared. Ids out of [0, E)
// fail before anything is looked up with them.
inline void expect_routing_matches_reference(const RoutingConfig& cfg, const std::vector<float>& logits,
                                             std::span<const float> bias, int64_t T, int E,
                                             const std::vector<int32_t>& ids, const std::vector<float>& weights,
                                             double weight_tol, const std::string& where) {
  const int k = cfg.top_k;
  ASSERT_EQ(ids.size(), static_cast<size_t>(T * k)) << where;
  ASSERT_EQ(weights.size(), ids.size()) << where;
  for (int64_t i = 0; i < T * k; ++i)
    ASSERT_TRUE(ids[i] >= 0 && ids[i] < E) << where << ": token " << i / k << " slot " << i % k << " id " << ids[i];
  const bool softmax = cfg.mode == RoutingMode::kSoftmaxTopK;
  const Routing ref = route_reference(cfg, logits, T, E, softmax ? std::span<const float>{} : bias);
  auto choice = [&](int64_t t, int e) {
    const double l = logits[t * E + e];
    if (softmax) return l;  // softmax selects by logit
    return 1.0 / (1.0 + std::exp(-l)) + (bias.empty() ? 0.0 : bias[e]);
  };
  const bool grouped = !softmax && cfg.topk_group < cfg.n_group;
  // How far apart two choice scores may be and still swap by float32 rounding: 1e-6 relative to
  // the larger (a few float32 ulps; a correction bias of 16 puts one ulp at 1.9e-6).
  auto rounding = [](double a, double b) { return 1e-6 * std::max({1.0, std::fabs(a), std::fabs(b)}); };
  // Whether expert e is of a group that near-ties the last kept one of token t, or beats it:
  // where the topk_group-th group score and the next differ by rounding, float32 may keep either.
  auto of_tied_group = [&](int64_t t, int e) {
    if (!grouped) return false;
    std::vector<double> c(E);
    for (int x = 0; x < E; ++x) c[x] = choice(t, x);
    const std::vector<double> group_score = expert_group_scores(c, cfg.n_group);
    std::vector<double> sorted = group_score;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double last_kept = sorted[cfg.topk_group - 1];
    // (an exact tie of groups, like one of experts, is broken by the lower index on both sides)
    const double gap = last_kept - sorted[cfg.topk_group], tol = rounding(last_kept, sorted[cfg.topk_group]);
    return gap > 0 && gap < tol && group_score[e / (E / cfg.n_group)] >= last_kept - tol;
  };
  int64_t near_ties = 0;  // tokens
  for (int64_t t = 0; t < T; ++t) {
    // A near-tie swaps an expert at the top-k boundary: the token's normalized weights then all
    // differ from the reference's (its sum holds another expert's score), so none is compared.
    bool swapped = false;
    for (int j = 0; j < k; ++j) {
      const int64_t i = t * k + j;
      if (ids[i] == ref.ids[i]) continue;
      swapped = true;
      // An exact tie (equal scores: equal logits and biases) is no rounding: both break it by the
      // lower index, and a GPU that does not fails here.
      const double gap = std::fabs(choice(t, ids[i]) - choice(t, ref.ids[i]));
      EXPECT_TRUE((gap > 0 && gap < rounding(choice(t, ids[i]), choice(t, ref.ids[i]))) || of_tied_group(t, ids[i]))
          << where << ": token " << t << " slot " << j << ": GPU chose " << ids[i] << ", reference " << ref.ids[i]
          << " (choice scores " << gap << " apart" << (grouped ? ", no near-tie of groups" : "") << ")";
    }
    if (swapped) {
      ++near_ties;
      continue;
    }
    for (int j = 0; j < k; ++j) {
      const int64_t i = t * k + j;
      EXPECT_NEAR(weights[i], ref.weights[i], weight_tol * (1 + std::fabs(ref.weights[i])))
          << where << ": token " << t << " slot " << j;
    }
  }
  EXPECT_LE(near_ties, 2 + T * k / 2000) << where << ": too many tokens with near-ties to be rounding";
}

}  // namespace fp4moe::test
