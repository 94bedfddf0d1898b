// GPU routing and permutation against the reference routing, for the single-CTA (T <= 32: the
// decode steps) and multi-CTA paths, both modes, with and without groups and a shared expert; and the
// permutation's invariants (offsets, row <-> pair maps are inverse, every pair placed once, each
// expert's rows in token order). And the top-k from per-lane sorted lists (route_token's kSorted
// path, which the small-batch and fused families run inside their kernels) against the scan the
// routing kernels run: the same experts and weights, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fp4moe/hw.h"
#include "fp4moe/synthetic.h"
#include "gpu_test_util.h"
#include "routing_check.h"
#include "kernels/moe/route_token.cuh"
#include "kernels/moe/routing.cuh"

namespace fp4moe {
namespace {

struct Case {
  RoutingConfig cfg;
  int experts;
  int64_t tokens;
  bool shared;
  bool ties = false;  // logits on a grid of 0.5: many equal scores, the index breaks the tie
  bool far = false;   // every 7th logit at +-80..119 (the sigmoid saturates; below -87 its
                      // denominator passes 2^126) and token 0's every logit below -87
  bool masked = false;  // experts masked by -inf logits (make_masked)
};

// Far logits as `far` asks: the same ones the sorted-list test below gives the routing.
void make_far(std::vector<float>& logits, int experts) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (i % 7 == 0) logits[i] = (i % 3 == 0 ? 1.0f : -1.0f) * (80.0f + static_cast<float>(i % 40));
  for (int e = 0; e < experts; ++e) logits[e] = -90.0f - static_cast<float>(e % 13);
}

// Masked experts as `masked` asks: every 3rd logit -inf, and token 0's all but its last -
// softmax must then choose masked experts, at weight 0, the lowest indices first; the sigmoid
// ranks them by their bias alone. (A softmax row of -inf only is the layer test's: NaN.)
void make_masked(std::vector<float>& logits, int experts) {
  for (size_t i = 0; i < logits.size(); i += 3) logits[i] = -INFINITY;
  for (int e = 0; e + 1 < experts; ++e) logits[e] = -INFINITY;
  logits[experts - 1] = 1.0f;  // (the every-3rd mask may have hit it)
}

// The correction bias both tests give the sigmoid mode: small, varied, of both signs.
std::vector<float> test_bias(int experts) {
  std::vector<float> bias(experts);
  for (int e = 0; e < experts; ++e) bias[e] = 0.01f * static_cast<float>((e * 7) % 11) - 0.05f;
  return bias;
}

class GpuRouting : public ::testing::TestWithParam<Case> {};

TEST_P(GpuRouting, MatchesReferenceAndPermutationIsConsistent) {
  FP4MOE_REQUIRE_GPU();
  const Case c = GetParam();
  const int E = c.experts, k = c.cfg.top_k, slots = k + (c.shared ? 1 : 0);
  const int64_t T = c.tokens, P = T * slots;
  std::vector<float> logits = make_router_logits(T, E, 17 + T);
  if (c.ties)
    for (float& x : logits) x = std::round(2.0f * x) / 2.0f;
  if (c.far) make_far(logits, E);
  if (c.masked) make_masked(logits, E);
  const std::vector<float> bias = test_bias(E);
  DeviceBuffer dl = test::to_device(logits), db = test::to_device(bias);
  DeviceBuffer ids(T * k * 4), w(T * k * 4), off((E + 2) * 4), rt(P * 4), rw(P * 4), pr(P * 4),
      chunk_counts(kernels::routing_scratch_ints(E) * 4);
  for (DeviceBuffer* b : {&ids, &w, &off, &rt, &rw, &pr}) test::poison(*b);
  kernels::RoutingParams p = kernels::routing_params_for(c.cfg, E, T);
  p.logits = dl.get<float>();
  p.correction_bias = db.get<float>();
  p.shared_expert = c.shared;
  p.topk_ids = ids.get<int>();
  p.topk_weights = w.get<float>();
  p.expert_offsets = off.get<int>();
  p.row_token = rt.get<int>();
  p.row_weight = rw.get<float>();
  p.pair_row = pr.get<int>();
  p.chunk_counts = chunk_counts.get<int>();
  // As the layer launches it: on sm_90+ the multi-CTA path's second kernel is a programmatic
  // dependent launch of the first, which it must wait for.
  kernels::launch_routing(p, nullptr, /*pdl=*/test::gpu().sm >= 90);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<int> gid = test::to_host<int>(ids, T * k);
  const std::vector<float> gw = test::to_host<float>(w, T * k);
  test::expect_routing_matches_reference(c.cfg, logits, bias, T, E, gid, gw, 2e-6, "routing");
  if (HasFatalFailure()) return;  // an id out of range: the checks below would index with it

  const std::vector<int> offsets = test::to_host<int>(off, E + 2);
  const std::vector<int> row_token = test::to_host<int>(rt, P);
  const std::vector<float> row_weight = test::to_host<float>(rw, P);
  const std::vector<int> pair_row = test::to_host<int>(pr, P);
  const int groups = E + (c.shared ? 1 : 0);
  EXPECT_EQ(offsets[0], 0);
  EXPECT_EQ(offsets[groups], P);
  std::vector<int> seen(P, 0);
  for (int64_t t = 0; t < T; ++t) {
    for (int j = 0; j < slots; ++j) {
      const int row = pair_row[t * slots + j];
      ASSERT_GE(row, 0);
      ASSERT_LT(row, P);
      ++seen[row];
      EXPECT_EQ(row_token[row], t);
      const int e = j < k ? gid[t * k + j] : E;
      EXPECT_GE(row, offsets[e]) << "pair in the wrong expert range";
      EXPECT_LT(row, offsets[e + 1]);
      EXPECT_EQ(row_weight[row], j < k ? gw[t * k + j] : 1.0f);
    }
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
  // Deterministic order: each expert's rows are its pairs in token order (a token has one pair
  // per expert at most), so the rows - and the GEMMs' tiles and stream-K cuts over them - are the
  // same on every run.
  for (int e = 0; e < groups; ++e)
    for (int row = offsets[e] + 1; row < offsets[e + 1]; ++row)
      ASSERT_LT(row_token[row - 1], row_token[row]) << "expert " << e << ": rows out of token order at row " << row;
}

INSTANTIATE_TEST_SUITE_P(
    Modes, GpuRouting,
    ::testing::Values(
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 1, true},
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 64, true},
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 3000, true},
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 20000, true},  // chunks of 157 tokens
        Case{{RoutingMode::kSigmoidNoAuxTc, 6, 1, 1, true, 1.0f}, 1024, 300, true},  // 32 per lane, multi-CTA
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 8, 4, true, 2.5f}, 256, 200, false},
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 8, 4, true, 2.5f}, 256, 700, true},
        Case{{RoutingMode::kSoftmaxTopK, 2, 1, 1, false, 1.0f}, 8, 100, false},
        Case{{RoutingMode::kSoftmaxTopK, 6, 1, 1, true, 1.0f}, 60, 1000, false},
        Case{{RoutingMode::kSigmoidNoAuxTc, 4, 1, 1, true, 1.0f}, 512, 33, false},
        Case{{RoutingMode::kSigmoidNoAuxTc, 6, 1, 1, true, 1.0f}, 1024, 5, false},  // 32 experts per lane, one CTA
        Case{{RoutingMode::kSoftmaxTopK, 8, 1, 1, true, 1.0f}, 64, 7, false, true},
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 65, true, true},
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 3000, true, false, true},
        Case{{RoutingMode::kSoftmaxTopK, 4, 1, 1, true, 1.0f}, 160, 40, false, false, true},
        Case{{RoutingMode::kSoftmaxTopK, 8, 1, 1, true, 1.0f}, 256, 7, false, false, false, true},
        Case{{RoutingMode::kSoftmaxTopK, 6, 1, 1, true, 1.0f}, 60, 1000, false, false, false, true},
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 64, true, false, false, true},
        Case{{RoutingMode::kSigmoidNoAuxTc, 8, 8, 4, true, 2.5f}, 256, 700, true, false, false, true}),
    [](const auto& i) {
      const Case& c = i.param;
      return std::string(c.cfg.mode == RoutingMode::kSoftmaxTopK ? "softmax" : "sigmoid") + "_E" +
             std::to_string(c.experts) + "_k" + std::to_string(c.cfg.top_k) + "_g" +
             std::to_string(c.cfg.n_group) + "_T" + std::to_string(c.tokens) +
             (c.shared ? "_shared" : "") + (c.ties ? "_ties" : "") + (c.far ? "_far" : "") +
             (c.masked ? "_masked" : "");
    });

// One warp per token: route_token's scan and its sorted lists, each pair into its own buffers.
__global__ void route_both_ways(kernels::RoutingParams p, int* ids_scan, float* w_scan, int* ids_sorted,
                                float* w_sorted) {
  const int tok = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (tok >= p.tokens) return;
  int id;
  float w;
  kernels::routing_device::route_token<8, /*kSorted=*/false>(p, tok, lane, id, w);
  if (lane < p.top_k) ids_scan[tok * p.top_k + lane] = id, w_scan[tok * p.top_k + lane] = w;
  kernels::routing_device::route_token<8, /*kSorted=*/true>(p, tok, lane, id, w);
  if (lane < p.top_k) ids_sorted[tok * p.top_k + lane] = id, w_sorted[tok * p.top_k + lane] = w;
}

struct SortedCase {
  RoutingConfig cfg;
  int experts;  // up to 256: 8 a lane
  int logit_kind;  // 0: router logits; 1: on a grid of 0.5 (exact ties); 2: some far below -87 (the
                   // sigmoid's denominator past 2^126, the division's rare path) and far above;
                   // 3: masked experts (-inf logits)
};

class GpuRoutingSorted : public ::testing::TestWithParam<SortedCase> {};

TEST_P(GpuRoutingSorted, SortedListsEqualTheScan) {
  FP4MOE_REQUIRE_GPU();
  const SortedCase c = GetParam();
  const int E = c.experts, k = c.cfg.top_k;
  const int T = 4096;
  std::vector<float> logits = make_router_logits(T, E, 91 + c.logit_kind);
  if (c.logit_kind == 1)
    for (float& x : logits) x = std::round(2.0f * x) / 2.0f;
  if (c.logit_kind == 2) make_far(logits, E);  // token 0's choice is the bias alone
  if (c.logit_kind == 3) make_masked(logits, E);
  DeviceBuffer dl = test::to_device(logits), db = test::to_device(test_bias(E));
  DeviceBuffer ids_a(T * k * 4), w_a(T * k * 4), ids_b(T * k * 4), w_b(T * k * 4);
  for (DeviceBuffer* b : {&ids_a, &w_a, &ids_b, &w_b}) test::poison(*b);
  kernels::RoutingParams p = kernels::routing_params_for(c.cfg, E, T);
  p.logits = dl.get<float>();
  p.correction_bias = c.cfg.mode == RoutingMode::kSoftmaxTopK ? nullptr : db.get<float>();
  route_both_ways<<<T / 4, 128>>>(p, ids_a.get<int>(), w_a.get<float>(), ids_b.get<int>(), w_b.get<float>());
  FP4MOE_CUDA_CHECK(cudaGetLastError());
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int> ia = test::to_host<int>(ids_a, T * k), ib = test::to_host<int>(ids_b, T * k);
  const std::vector<uint32_t> wa = test::to_host<uint32_t>(w_a, T * k), wb = test::to_host<uint32_t>(w_b, T * k);
  for (int i = 0; i < T * k; ++i) {
    ASSERT_EQ(ia[i], ib[i]) << "token " << i / k << " slot " << i % k;
    ASSERT_EQ(wa[i], wb[i]) << "token " << i / k << " slot " << i % k << ": weights differ in their bits";
    ASSERT_GE(ia[i], 0);
    ASSERT_LT(ia[i], E);
  }
  // The scan itself is the routing kernels' (checked against the reference above, far logits and
  // ties included); with the far logits, the weights of a token whose every score underflows are
  // finite too.
  if (c.logit_kind == 2 && c.cfg.mode == RoutingMode::kSigmoidNoAuxTc) {
    const std::vector<float> w0 = test::to_host<float>(w_a, k);
    for (float x : w0) EXPECT_TRUE(std::isfinite(x));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, GpuRoutingSorted,
    ::testing::Values(SortedCase{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 0},
                      SortedCase{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 1},
                      SortedCase{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 2},
                      SortedCase{{RoutingMode::kSigmoidNoAuxTc, 8, 8, 4, true, 2.5f}, 256, 0},
                      SortedCase{{RoutingMode::kSigmoidNoAuxTc, 6, 1, 1, true, 1.0f}, 200, 1},
                      SortedCase{{RoutingMode::kSoftmaxTopK, 8, 1, 1, false, 1.0f}, 64, 1},
                      SortedCase{{RoutingMode::kSoftmaxTopK, 4, 1, 1, true, 1.0f}, 160, 2},
                      SortedCase{{RoutingMode::kSoftmaxTopK, 8, 1, 1, true, 1.0f}, 256, 3},
                      SortedCase{{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, 256, 3}),
    [](const auto& i) {
      const SortedCase& c = i.param;
      return std::string(c.cfg.mode == RoutingMode::kSoftmaxTopK ? "softmax" : "sigmoid") + "_E" +
             std::to_string(c.experts) + "_k" + std::to_string(c.cfg.top_k) + "_g" +
             std::to_string(c.cfg.n_group) +
             (c.logit_kind == 1 ? "_ties" : c.logit_kind == 2 ? "_far" : c.logit_kind == 3 ? "_masked" : "");
    });

// The launch's own check (host code: runs without a GPU too) refuses what the config refuses: a
// caller of launch_routing that skips MoeConfig::validate must not get an excluded expert chosen
// twice, or a group scored from one expert.
TEST(GpuRoutingShape, RefusesWhatTheConfigRefuses) {
  EXPECT_NO_THROW(kernels::check_routing_shape(256, 8, 8, 4));
  EXPECT_TRUE(test::throws_error_naming([] { kernels::check_routing_shape(64, 10, 8, 1); },
                                        "top_k 10 exceeds the 8 experts of the 1 kept groups"));
  EXPECT_TRUE(test::throws_error_naming([] { kernels::check_routing_shape(8, 2, 8, 4); },
                                        "group scores need at least 2 experts per group"));
  EXPECT_NO_THROW(kernels::check_routing_shape(8, 1, 1, 1));
}

}  // namespace
}  // namespace fp4moe
