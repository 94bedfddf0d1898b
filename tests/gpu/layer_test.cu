// The GPU MoE layer against the float64 CPU reference, on fresh random inputs, with the
// outputs poisoned before every run:
//   - every compiled tactic of every family (FC1 swiglu x FC2 finalize) on an odd shape (K a multiple
//     of 16 but not of the 256-wide K tile, rows not a multiple of the row tile); small
//     problems on a full grid exercise the stream-K fix-up of cut units; the small-batch family
//     (w4a16_gemv, its two GEMMs together) and the fused family (w4a16_fused, the whole layer in
//     one launch, sm_90+) at T in {1, 3, 8}; the fused family again on shapes that split FC1's K,
//     without a shared expert, with each routing mode, on one expert, at full size (glm5,
//     glm5-tp8), and as CUDA graph replays;
//   - the glm5 and glm5-tp8 presets at full size for T in {1, 3, 16, 64, 257, 1024};
//   - the prefill family (sm_90a) on glm5 for T in {128, 1000, 4096, 16384}, every tactic, the
//     whole batch run and every non-finite value counted, sampled tokens against the reference,
//     every token against the decode family's output;
//   - all tokens on one expert, softmax routing, group-limited routing (both also with the
//     small-batch family's in-kernel routing);
//   - bitwise identical output across repeated runs, in place (out = hidden), and with calls on
//     two streams or from two threads (ordered as if made one after another); two layers whose
//     prefill batches overlap on two streams finish; decode batches of different inputs back to
//     back equal their runs alone;
// The reference is given the GPU's own routing (ids and weights), so a near-tie that float32
// and float64 rank differently cannot fail a GEMM test; the routing is held to the reference's
// on its own (routing_check.h: near-ties allowed) at the presets' full size, and in
// routing_test. Before each run the routing's ids and weights are poisoned as the output is.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/heuristic.h"
#include "fp4moe/layer.h"
#include "fp4moe/resource_model.h"
#include "fp4moe/synthetic.h"
#include "gpu_test_util.h"
#include "routing_check.h"
#include "kernels/common/driver_entry_point.h"
#include "kernels/gemm/w4a16_registry.h"
#include "runtime/capture_mode.h"
#include "runtime/captured_graph.h"
#include "tune/output_check.h"

namespace fp4moe {
namespace {

using test::within_tolerance;

struct RunResult {
  std::vector<uint16_t> out;
  Routing routing;
};

struct RunOptions {
  // What the output holds before the run: NaN, so that a value the run left unwritten fails
  // every comparison; a finite value where the test needs to tell "wrote NaN" from "wrote
  // nothing" (1.0: 0x3F80).
  uint16_t out_fill = 0xFFFF;
  // reserve(tokens) first, then fill the routing's ids with -1 and its weights with NaN, so that
  // a run that routes nothing cannot pass on the ids a run before it left there. Off for the
  // tests that grow the workspace by the call itself, under one plan at a time.
  bool reserve_first = true;
};

// Runs the layer on hidden/logits (host) and returns the bf16 output and the GPU routing.
RunResult run_layer(GpuMoeLayer& layer, const std::vector<float>& hidden, const std::vector<float>& logits,
                    int64_t tokens, const LayerPlan* plan, const RunOptions& opt = {}) {
  const MoeConfig& cfg = layer.config();
  const int64_t slots = tokens * cfg.routing.top_k;
  DeviceBuffer dh = test::to_device(test::to_bf16_bits(hidden));
  DeviceBuffer dl = test::to_device(logits);
  DeviceBuffer dout = test::to_device(std::vector<uint16_t>(tokens * cfg.hidden, opt.out_fill));
  if (opt.reserve_first) {
    layer.reserve(tokens);
    // (after a call on another stream has ended; the memsets and the call below share the
    // legacy stream, which orders them)
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    FP4MOE_CUDA_CHECK(cudaMemset(const_cast<int32_t*>(layer.topk_ids()), 0xFF, slots * sizeof(int32_t)));
    FP4MOE_CUDA_CHECK(cudaMemset(const_cast<float*>(layer.topk_weights()), 0xFF, slots * sizeof(float)));
  }
  layer.forward(dh.get<uint16_t>(), dl.get<float>(), tokens, dout.get<uint16_t>(), nullptr, plan);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  RunResult r;
  r.out = test::to_host<uint16_t>(dout, tokens * cfg.hidden);
  r.routing.tokens = tokens;
  r.routing.top_k = cfg.routing.top_k;
  r.routing.ids = test::to_host(layer.topk_ids(), slots);
  r.routing.weights = test::to_host(layer.topk_weights(), slots);
  return r;
}

// Output vs the reference evaluated with the GPU's routing and its rounding of act: held to
// the tighter tolerances (within_tolerance).
test::Comparison check_against_reference(const MoeWeights& w, const std::vector<float>& hidden,
                                         int64_t tokens, const RunResult& r) {
  const std::vector<double> ref = moe_reference(w, hidden, tokens, r.routing, test::gpu_rounding());
  test::Comparison c = test::compare(test::bf16_to_double(r.out), ref, w.config.hidden);
  c.gpu_rounded_reference = true;
  return c;
}

struct LayerCase {
  MoeWeights weights;
  std::unique_ptr<GpuMoeLayer> layer;
};

MoeConfig odd_config() {
  MoeConfig c;
  c.name = "odd";
  c.hidden = 400;        // FC1 K: 25 blocks of 16, not a multiple of 256
  c.intermediate = 144;  // FC2 K (9 blocks of 16), and 2I = 288 rows: not a multiple of the
                         // 64/128-row tiles
  c.num_experts = 12;
  c.routing = RoutingConfig{RoutingMode::kSigmoidNoAuxTc, 3, 1, 1, true, 2.5f};
  c.shared_intermediate = 144;
  return c;
}

// A sigmoid-routed layer (one group, norm, scale 2.5) with a shared expert as wide as the others.
MoeConfig sigmoid_config(const char* name, int64_t hidden, int64_t intermediate, int experts, int top_k) {
  MoeConfig c;
  c.name = name;
  c.hidden = hidden;
  c.intermediate = intermediate;
  c.num_experts = experts;
  c.routing = RoutingConfig{RoutingMode::kSigmoidNoAuxTc, top_k, 1, 1, true, 2.5f};
  c.shared_intermediate = intermediate;
  return c;
}

LayerCase make_case(const MoeConfig& cfg, uint64_t seed) {
  LayerCase c;
  SyntheticOptions so;
  so.seed = seed;
  so.init = cfg.hidden * cfg.intermediate <= 1 << 20 ? WeightInit::kQuantizedGaussian
                                                     : WeightInit::kRandomCodes;
  c.weights = make_synthetic_moe(cfg, so);
  LayerOptions lo;
  lo.use_tuning_cache = false;  // tests exercise the documented heuristic, whatever is cached
  c.layer = GpuMoeLayer::create(c.weights, lo);
  return c;
}

std::vector<Tactic> tactics_of(Epilogue ep) {
  std::vector<Tactic> v;
  for (const auto& k : kernels::w4a16_kernels())
    if (k.tactic.epilogue == ep) v.push_back(k.tactic);
  return v;
}

// The families of our kernels this GPU runs: wgmma on sm_90a, the fused family on sm_90+.
std::vector<Family> families_here() {
  std::vector<Family> v{Family::kW4a16Mma, Family::kW4a16Gemv};
  if (test::gpu().has_wgmma()) v.push_back(Family::kW4a16Wgmma);
  if (test::gpu().sm >= 90) v.push_back(Family::kW4a16Fused);
  return v;
}

// A family's first FC1 and first FC2 tactic as a plan (the fused family's one kernel as both).
LayerPlan first_plan_of(Family family) {
  auto first = [&](Epilogue ep) {
    for (const Tactic& t : tactics_of(ep))
      if (t.family == family) return t;
    ADD_FAILURE() << "no " << to_string(family) << " tactic for " << to_string(ep);
    return Tactic{};
  };
  LayerPlan plan;
  plan.fc1 = first(Epilogue::kSwiglu);
  plan.fc2 = family == Family::kW4a16Fused ? plan.fc1 : first(Epilogue::kFinalize);
  plan.fc2.epilogue = Epilogue::kFinalize;
  return plan;
}

TEST(GpuLayer, EveryTacticMatchesReferenceOnOddShape) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(odd_config(), 31);
  const bool wgmma = test::gpu().has_wgmma();
  const bool sm90 = test::gpu().sm >= 90;
  uint64_t seed = 100;
  int plans = 0;
  // Within each family (w4a16_gemv runs its two GEMMs together, w4a16_fused both in one kernel:
  // the same shape for both; the stream-K and prefill families mix), every FC1 tactic with two FC2
  // tactics; the small-batch and fused families at the batches they take.
  for (const Family paired : {Family::kW4a16Mma, Family::kW4a16Gemv, Family::kW4a16Fused}) {
    if (paired == Family::kW4a16Fused && !sm90) continue;
    std::vector<Tactic> fc1 = tactics_of(Epilogue::kSwiglu), fc2 = tactics_of(Epilogue::kFinalize);
    for (auto* list : {&fc1, &fc2})
      std::erase_if(*list, [&](const Tactic& t) {
        const Family f = t.family == Family::kW4a16Wgmma ? Family::kW4a16Mma : t.family;
        return f != paired || (t.family == Family::kW4a16Wgmma && !wgmma);
      });
    ASSERT_FALSE(fc1.empty());
    ASSERT_EQ(fc1.size(), fc2.size());
    const bool small = paired != Family::kW4a16Mma;
    const std::vector<int64_t> batches = small ? std::vector<int64_t>{1, 3, 8} : std::vector<int64_t>{1, 3, 16, 64, 257};
    const std::vector<size_t> shifts = paired == Family::kW4a16Fused ? std::vector<size_t>{0} : std::vector<size_t>{0, 1, 3};
    for (int64_t tokens : batches) {
      for (size_t i = 0; i < fc1.size(); ++i) {
        for (size_t shift : shifts) {  // vary the pairing (the fused family: one kernel, no pairs)
          const LayerPlan plan{fc1[i], fc2[(i + shift) % fc2.size()]};
          const std::vector<float> hidden = make_hidden_states(tokens, c.weights.config.hidden, ++seed);
          const std::vector<float> logits = make_router_logits(tokens, c.weights.config.num_experts, seed);
          const RunResult r = run_layer(*c.layer, hidden, logits, tokens, &plan);
          const test::Comparison cmp = check_against_reference(c.weights, hidden, tokens, r);
          EXPECT_TRUE(within_tolerance(cmp))
              << format_tactic(plan.fc1) << " + " << format_tactic(plan.fc2) << " T=" << tokens;
          ++plans;
        }
      }
    }
  }
  EXPECT_GT(plans, 0);
}

// Block scales a checkpoint may hold that random weights never draw: zero (an all-zero block),
// negative zero, E4M3 subnormals (mantissa / 8 x 2^-6) and negative scales (the loader accepts
// every code but NaN; the prepack zeroes a zero scale's codes and moves a negative scale's sign
// into them). One block in five of every matrix gets one of them; each family runs its first
// FC1 and FC2 tactics against the reference.
TEST(GpuLayer, ZeroNegativeAndSubnormalBlockScales) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig cfg = odd_config();
  SyntheticOptions so;
  so.seed = 61;
  so.init = WeightInit::kQuantizedGaussian;
  MoeWeights w = make_synthetic_moe(cfg, so);
  constexpr uint8_t kOdd[] = {0x00, 0x80, 0x01, 0x03, 0x07, 0x86, 0xB8, 0xC4};
  size_t n = 0;
  auto perturb = [&](Nvfp4Matrix& m) {
    for (size_t b = 0; b < m.block_scales.size(); b += 5) m.block_scales[b] = kOdd[n++ % std::size(kOdd)];
  };
  for (ExpertWeights& e : w.experts)
    for (Nvfp4Matrix* m : {&e.gate, &e.up, &e.down}) perturb(*m);
  for (Nvfp4Matrix* m : {&w.shared->gate, &w.shared->up, &w.shared->down}) perturb(*m);
  ASSERT_GT(n, 1000u);
  LayerOptions lo;
  lo.use_tuning_cache = false;
  const std::unique_ptr<GpuMoeLayer> layer = GpuMoeLayer::create(w, lo);
  uint64_t seed = 700;
  int plans = 0;
  for (const Family family : families_here()) {
    const LayerPlan plan = first_plan_of(family);
    const bool small = family == Family::kW4a16Gemv || family == Family::kW4a16Fused;
    for (int64_t tokens : small ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{3, 257}) {
      const std::vector<float> hidden = make_hidden_states(tokens, cfg.hidden, ++seed);
      const std::vector<float> logits = make_router_logits(tokens, cfg.num_experts, seed);
      const RunResult r = run_layer(*layer, hidden, logits, tokens, &plan);
      const test::Comparison cmp = check_against_reference(w, hidden, tokens, r);
      std::printf("odd scales T=%lld %s + %s: rel error %.3e, worst token %.3e\n", static_cast<long long>(tokens),
                  format_tactic(plan.fc1).c_str(), format_tactic(plan.fc2).c_str(), cmp.rel_frobenius, cmp.worst_row_rel);
      EXPECT_TRUE(within_tolerance(cmp)) << format_tactic(plan.fc1) << " + " << format_tactic(plan.fc2) << " T=" << tokens;
      ++plans;
    }
  }
  EXPECT_GE(plans, 4);
}

class GpuLayerPreset : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuLayerPreset, HeuristicPlanMatchesReferenceAcrossBatchSizes) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig cfg = MoeConfig::preset(GetParam());
  LayerCase c = make_case(cfg, 7);
  uint64_t seed = 1000;
  for (int64_t tokens : {1, 3, 16, 64, 257, 1024}) {
    const std::vector<float> hidden = make_hidden_states(tokens, cfg.hidden, ++seed);
    const std::vector<float> logits = make_router_logits(tokens, cfg.num_experts, seed);
    const LayerPlan plan = c.layer->plan_for(tokens);
    const RunResult r = run_layer(*c.layer, hidden, logits, tokens, nullptr);
    // The GEMMs are held to the reference on the GPU's own routing: the routing on its own here,
    // at the preset's size (its expert count, scaling factor and correction bias as loaded).
    test::expect_routing_matches_reference(cfg.routing, logits, c.weights.correction_bias, tokens,
                                           cfg.num_experts, r.routing.ids, r.routing.weights, 1e-5,
                                           cfg.name + " T=" + std::to_string(tokens));
    if (HasFatalFailure()) return;
    const test::Comparison cmp = check_against_reference(c.weights, hidden, tokens, r);
    std::printf("%s T=%lld %s + %s: rel error %.3e, worst token %.3e\n", cfg.name.c_str(),
                static_cast<long long>(tokens), format_tactic(plan.fc1).c_str(),
                format_tactic(plan.fc2).c_str(), cmp.rel_frobenius, cmp.worst_row_rel);
    EXPECT_TRUE(within_tolerance(cmp)) << "T=" << tokens;
  }
  // Every tactic of the fused family (sm_90+) at the batches it takes, whatever the heuristic
  // picks there: at full size FC1's K (6144) is split into K chunks, summed by the last arrival.
  if (test::gpu().sm < 90) return;
  for (int64_t tokens : {1, 3, 8}) {
    const std::vector<float> hidden = make_hidden_states(tokens, cfg.hidden, ++seed);
    const std::vector<float> logits = make_router_logits(tokens, cfg.num_experts, seed);
    for (const Tactic& t : tactics_of(Epilogue::kSwiglu)) {
      if (t.family != Family::kW4a16Fused) continue;
      LayerPlan plan{t, t};
      plan.fc2.epilogue = Epilogue::kFinalize;
      const RunResult r = run_layer(*c.layer, hidden, logits, tokens, &plan);
      test::expect_routing_matches_reference(cfg.routing, logits, c.weights.correction_bias, tokens,
                                             cfg.num_experts, r.routing.ids, r.routing.weights, 1e-5,
                                             format_tactic(t) + " T=" + std::to_string(tokens));
      if (HasFatalFailure()) return;
      const test::Comparison cmp = check_against_reference(c.weights, hidden, tokens, r);
      std::printf("%s T=%lld %s: rel error %.3e, worst token %.3e\n", cfg.name.c_str(),
                  static_cast<long long>(tokens), format_tactic(t).c_str(), cmp.rel_frobenius, cmp.worst_row_rel);
      EXPECT_TRUE(within_tolerance(cmp)) << format_tactic(t) << " T=" << tokens;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, GpuLayerPreset, ::testing::Values("glm5", "glm5-tp8"),
                         [](const auto& i) {
                           std::string n = i.param;
                           for (auto& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

// Output rows of `samples` tokens against the reference run on those tokens alone with the GPU's
// routing; the non-finite count covers every token. The tokens: the first, the last, the last
// token of `samples` / 3 experts drawn at random (an expert's rows are in token order, so that
// token's row sits in the expert's last, partial token tile, where a tile's width and its box
// of rows change), the rest random.
test::Comparison check_sampled_tokens(const MoeWeights& w, const std::vector<float>& hidden, int64_t tokens,
                                      const RunResult& r, int samples, uint64_t seed) {
  const int64_t H = w.config.hidden, k = r.routing.top_k;
  std::vector<int64_t> last_token(w.config.num_experts, -1);
  for (int64_t i = 0; i < tokens * k; ++i) {
    const int32_t e = r.routing.ids[i];
    FP4MOE_CHECK(e >= 0 && e < w.config.num_experts, "token ", i / k, " routed to expert ", e);
    last_token[e] = i / k;
  }
  std::vector<int64_t> pick = {0, tokens - 1};
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto draw = [&state](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((state >> 33) % n);
  };
  auto add = [&pick](int64_t t) {
    if (t >= 0 && std::find(pick.begin(), pick.end(), t) == pick.end()) pick.push_back(t);
  };
  for (int i = 0; i < samples / 3; ++i) add(last_token[draw(last_token.size())]);
  while (static_cast<int>(pick.size()) < std::min<int64_t>(samples, tokens)) add(draw(tokens));
  const int64_t S = static_cast<int64_t>(pick.size());
  std::vector<float> sub_hidden(S * H);
  Routing sub{S, static_cast<int>(k), std::vector<int32_t>(S * k), std::vector<float>(S * k)};
  std::vector<uint16_t> sub_out(S * H);
  for (int64_t i = 0; i < S; ++i) {
    std::copy_n(hidden.begin() + pick[i] * H, H, sub_hidden.begin() + i * H);
    std::copy_n(r.routing.ids.begin() + pick[i] * k, k, sub.ids.begin() + i * k);
    std::copy_n(r.routing.weights.begin() + pick[i] * k, k, sub.weights.begin() + i * k);
    std::copy_n(r.out.begin() + pick[i] * H, H, sub_out.begin() + i * H);
  }
  test::Comparison cmp = check_against_reference(w, sub_hidden, S, RunResult{std::move(sub_out), std::move(sub)});
  cmp.non_finite = std::count_if(r.out.begin(), r.out.end(),
                                 [](uint16_t b) { return !std::isfinite(Bf16::from_bits(b).to_float()); });
  return cmp;
}

// A run that later runs are held to bit for bit, held to the reference first: two runs that
// agree could otherwise agree on values neither wrote (both outputs start as the same NaN) or on
// wrong ones. Every token where the float64 reference costs the CPU little (up to ~2^32 weight
// multiplies), sampled tokens above that.
void expect_matches_reference(const LayerCase& c, const std::vector<float>& hidden, int64_t tokens,
                              const RunResult& r, const std::string& what) {
  const MoeConfig& cfg = c.weights.config;
  const int64_t weights_per_token =
      3 * cfg.hidden * (cfg.routing.top_k * cfg.intermediate + cfg.shared_intermediate);
  const bool full = tokens * weights_per_token <= (int64_t{1} << 32);
  const test::Comparison cmp = full ? check_against_reference(c.weights, hidden, tokens, r)
                                    : check_sampled_tokens(c.weights, hidden, tokens, r, 24, tokens);
  EXPECT_TRUE(within_tolerance(cmp)) << what << " (T = " << tokens << (full ? ", every token)" : ", 24 tokens)");
}

TEST(GpuLayer, PrefillFamilyMatchesReferenceOnGlm5) {
  FP4MOE_REQUIRE_GPU();
  if (!test::gpu().has_wgmma()) GTEST_SKIP() << "the prefill family needs sm_90a";
  const MoeConfig cfg = MoeConfig::preset("glm5");
  LayerCase c = make_case(cfg, 17);
  std::vector<Tactic> fc1, fc2;
  for (const Tactic& t : tactics_of(Epilogue::kSwiglu)) if (t.family == Family::kW4a16Wgmma) fc1.push_back(t);
  for (const Tactic& t : tactics_of(Epilogue::kFinalize)) if (t.family == Family::kW4a16Wgmma) fc2.push_back(t);
  // Every prefill tactic the resource model lists is compiled in and runs here.
  ASSERT_EQ(fc1.size(), listed_tactics(Family::kW4a16Wgmma, Epilogue::kSwiglu).size());
  ASSERT_EQ(fc2.size(), listed_tactics(Family::kW4a16Wgmma, Epilogue::kFinalize).size());
  // Every token's row is also held to the decode family's output of the same batch (its widest
  // token tile, sampled tokens against the reference too): the reference sees only 24 tokens of
  // thousands, and a wrong unit (one expert's row block in one token tile) would rarely meet
  // one. Two correct plans differ by fp32 summation order and bf16 rounding alone.
  auto widest_decode_tactic = [](Epilogue ep) {
    Tactic widest;
    widest.tile_tokens = 0;
    for (const Tactic& t : tactics_of(ep))
      if (t.family == Family::kW4a16Mma && t.tile_tokens >= widest.tile_tokens) widest = t;
    return widest;
  };
  const LayerPlan decode{widest_decode_tactic(Epilogue::kSwiglu), widest_decode_tactic(Epilogue::kFinalize)};
  ASSERT_EQ(decode.fc1.epilogue, Epilogue::kSwiglu);
  ASSERT_EQ(decode.fc2.epilogue, Epilogue::kFinalize);
  uint64_t seed = 3000;
  for (int64_t tokens : {128, 1000, 4096, 16384}) {
    const std::vector<float> hidden = make_hidden_states(tokens, cfg.hidden, ++seed);
    const std::vector<float> logits = make_router_logits(tokens, cfg.num_experts, seed);
    const RunResult other = run_layer(*c.layer, hidden, logits, tokens, &decode);
    const test::Comparison other_cmp = check_sampled_tokens(c.weights, hidden, tokens, other, 24, seed);
    ASSERT_TRUE(within_tolerance(other_cmp)) << format_tactic(decode.fc1) << " + " << format_tactic(decode.fc2)
                                             << " T=" << tokens;
    for (size_t i = 0; i < fc1.size(); ++i) {
      const LayerPlan plan{fc1[i], fc2[(i + tokens) % fc2.size()]};
      const RunResult r = run_layer(*c.layer, hidden, logits, tokens, &plan);
      const test::Comparison cmp = check_sampled_tokens(c.weights, hidden, tokens, r, 24, seed + i);
      const RowDifference rows = worst_row_difference(r.out, other.out, cfg.hidden);
      std::printf("glm5 T=%lld %s + %s: rel error %.3e, worst token %.3e (24 sampled tokens); "
                  "every token against the decode family: worst %.3e (token %lld)\n",
                  static_cast<long long>(tokens), format_tactic(plan.fc1).c_str(), format_tactic(plan.fc2).c_str(),
                  cmp.rel_frobenius, cmp.worst_row_rel, rows.rel, static_cast<long long>(rows.row));
      EXPECT_TRUE(within_tolerance(cmp)) << format_tactic(plan.fc1) << " + " << format_tactic(plan.fc2) << " T=" << tokens;
      EXPECT_LT(rows.rel, test::kPlanRowTolerance) << format_tactic(plan.fc1) << " + " << format_tactic(plan.fc2) << " T="
                                         << tokens << ": token " << rows.row << " against the decode family";
    }
  }
}

// A prefill-sized batch where every token can be held to the reference (the glm5 test above
// samples 24): 128 tokens per expert on a narrow shape, so the shared stages at prefill size -
// the routing's chunked permutation, the gather, the fused finalize - meet the reference on every
// row. The heuristic's plan (the prefill family on sm_90a), and on sm_90a the first and the last
// prefill tactic in both GEMMs.
TEST(GpuLayer, PrefillSizedBatchMatchesReferenceOnEveryToken) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig cfg = sigmoid_config("prefill-every-token", 512, 256, 64, 8);
  LayerCase c = make_case(cfg, 53);
  constexpr int64_t kTokens = 1024;  // 128 per expert
  std::vector<LayerPlan> plans = {c.layer->plan_for(kTokens)};
  if (test::gpu().has_wgmma()) {
    std::vector<Tactic> fc1, fc2;
    for (const Tactic& t : tactics_of(Epilogue::kSwiglu)) if (t.family == Family::kW4a16Wgmma) fc1.push_back(t);
    for (const Tactic& t : tactics_of(Epilogue::kFinalize)) if (t.family == Family::kW4a16Wgmma) fc2.push_back(t);
    ASSERT_FALSE(fc1.empty());
    ASSERT_FALSE(fc2.empty());
    plans.push_back(LayerPlan{fc1.front(), fc2.back()});
    plans.push_back(LayerPlan{fc1.back(), fc2.front()});
  }
  uint64_t seed = 800;
  for (const LayerPlan& plan : plans) {
    const std::vector<float> hidden = make_hidden_states(kTokens, cfg.hidden, ++seed);
    const std::vector<float> logits = make_router_logits(kTokens, cfg.num_experts, seed);
    const RunResult r = run_layer(*c.layer, hidden, logits, kTokens, &plan);
    const test::Comparison cmp = check_against_reference(c.weights, hidden, kTokens, r);
    std::printf("prefill-sized T=%lld %s + %s: rel error %.3e, worst token %.3e (every token)\n",
                static_cast<long long>(kTokens), format_tactic(plan.fc1).c_str(), format_tactic(plan.fc2).c_str(),
                cmp.rel_frobenius, cmp.worst_row_rel);
    EXPECT_TRUE(within_tolerance(cmp)) << format_tactic(plan.fc1) << " + " << format_tactic(plan.fc2);
  }
}

TEST(GpuLayer, AllTokensOnOneExpertAndEmptyExperts) {
  FP4MOE_REQUIRE_GPU();
  MoeConfig cfg = odd_config();
  cfg.routing.top_k = 1;
  LayerCase c = make_case(cfg, 41);
  for (int64_t tokens : {2, 5, 200}) {  // T = 2: the small-batch family (narrow experts)
    const std::vector<float> hidden = make_hidden_states(tokens, cfg.hidden, 77 + tokens);
    std::vector<float> logits = make_router_logits(tokens, cfg.num_experts, 77 + tokens);
    for (int64_t t = 0; t < tokens; ++t) logits[t * cfg.num_experts + 5] = 50.0f;  // expert 5 wins
    const RunResult r = run_layer(*c.layer, hidden, logits, tokens, nullptr);
    for (int32_t id : r.routing.ids) ASSERT_EQ(id, 5);
    const test::Comparison cmp = check_against_reference(c.weights, hidden, tokens, r);
    EXPECT_TRUE(within_tolerance(cmp)) << "T=" << tokens;
  }
}

// One expert and no correction bias (empty means zeros): the routing reads E = 1 floats of the
// bias buffer, which must then hold a zero, not whatever the allocator left there. Freed
// allocations filled with NaN first, so that a buffer left unwritten is found.
TEST(GpuLayer, OneExpertWithoutCorrectionBias) {
  FP4MOE_REQUIRE_GPU();
  {
    std::vector<DeviceBuffer> junk;
    for (size_t bytes = 4; bytes <= 4096; bytes *= 2)
      for (int i = 0; i < 4; ++i) {
        junk.emplace_back(bytes);
        test::poison(junk.back());
      }
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  MoeConfig cfg = odd_config();
  cfg.num_experts = 1;
  cfg.routing.top_k = 1;
  SyntheticOptions so;
  so.seed = 61;
  MoeWeights w = make_synthetic_moe(cfg, so);
  w.correction_bias.clear();
  LayerOptions lo;
  lo.use_tuning_cache = false;
  std::unique_ptr<GpuMoeLayer> layer = GpuMoeLayer::create(w, lo);
  for (const int64_t tokens : {1, 3, 64}) {  // the fused or small-batch family, then the routing kernels
    const std::vector<float> hidden = make_hidden_states(tokens, cfg.hidden, 5 + tokens);
    const std::vector<float> logits = make_router_logits(tokens, cfg.num_experts, 5 + tokens);
    const RunResult r = run_layer(*layer, hidden, logits, tokens, nullptr);
    for (int32_t id : r.routing.ids) ASSERT_EQ(id, 0) << "T=" << tokens;
    const Routing ref = route_reference(cfg.routing, logits, tokens, cfg.num_experts, w.correction_bias);
    for (size_t i = 0; i < ref.weights.size(); ++i)
      EXPECT_NEAR(r.routing.weights[i], ref.weights[i], 1e-5) << "T=" << tokens;
    const test::Comparison cmp = check_against_reference(w, hidden, tokens, r);
    EXPECT_TRUE(within_tolerance(cmp)) << "T=" << tokens;
  }
}

TEST(GpuLayer, SoftmaxAndGroupLimitedRouting) {
  FP4MOE_REQUIRE_GPU();
  for (int variant = 0; variant < 2; ++variant) {
    MoeConfig cfg = odd_config();
    cfg.num_experts = 32;
    cfg.shared_intermediate = 0;
    if (variant == 0) cfg.routing = RoutingConfig{RoutingMode::kSoftmaxTopK, 4, 1, 1, true, 1.0f};
    else cfg.routing = RoutingConfig{RoutingMode::kSigmoidNoAuxTc, 4, 4, 2, true, 2.5f};
    LayerCase c = make_case(cfg, 50 + variant);
    // T = 2: the small-batch family routes inside FC1 (narrow experts); T = 37: the routing kernels.
    for (const int64_t tokens : {2, 37}) {
      const std::vector<float> hidden = make_hidden_states(tokens, cfg.hidden, 9);
      const std::vector<float> logits = make_router_logits(tokens, cfg.num_experts, 9);
      const RunResult r = run_layer(*c.layer, hidden, logits, tokens, nullptr);
      const Routing ref = route_reference(cfg.routing, logits, tokens, cfg.num_experts,
                                          c.weights.correction_bias);
      EXPECT_EQ(r.routing.ids, ref.ids) << "variant " << variant << " T=" << tokens;
      for (size_t i = 0; i < ref.weights.size(); ++i)
        EXPECT_NEAR(r.routing.weights[i], ref.weights[i], 1e-5) << "variant " << variant << " T=" << tokens;
      const test::Comparison cmp = check_against_reference(c.weights, hidden, tokens, r);
      EXPECT_TRUE(within_tolerance(cmp)) << "variant " << variant << " T=" << tokens;
    }
  }
}

// The fused family (w4a16_fused, sm_90+) on the shapes that take its other paths: K past the
// last whole K group in both GEMMs, FC1's K split into chunks (the last arrival sums them), FC2's
// whole-K items beside the last group's half ones (one covering an odd last half chunk), row
// blocks the matrix ends inside, no shared expert (every item waits for the routing), softmax
// and group-limited routing, all tokens on one expert; every tactic, batches 1..8, the routing
// against the reference's, then two more runs and a CUDA graph replay bitwise equal to the first.
TEST(GpuLayer, FusedFamilyMatchesReference) {
  FP4MOE_REQUIRE_GPU();
  if (test::gpu().sm < 90) GTEST_SKIP() << "the fused family needs sm_90+";
  std::vector<Tactic> fused;
  for (const Tactic& t : tactics_of(Epilogue::kSwiglu))
    if (t.family == Family::kW4a16Fused) fused.push_back(t);
  ASSERT_EQ(fused.size(), listed_tactics(Family::kW4a16Fused, Epilogue::kSwiglu).size());
  struct Case {
    const char* what;
    MoeConfig cfg;
    bool one_expert;
  };
  std::vector<Case> cases;
  cases.push_back({"K chunks and tails", sigmoid_config("chunks", 1552, 528, 40, 4), false});
  // FC2's K of 5 K groups: at k1024 three half chunks, so a wide FC2 item (fused_params.h) that
  // covers the last half chunk alone, with its K tail.
  cases.push_back({"FC2's last whole chunk a half", sigmoid_config("odd", 528, 1104, 16, 4), false});
  MoeConfig softmax = sigmoid_config("softmax", 1040, 1024, 32, 4);
  softmax.shared_intermediate = 0;
  softmax.routing = RoutingConfig{RoutingMode::kSoftmaxTopK, 4, 1, 1, true, 1.0f};
  cases.push_back({"softmax, no shared expert", softmax, false});
  MoeConfig grouped = sigmoid_config("grouped", 1040, 1024, 64, 6);
  grouped.routing = RoutingConfig{RoutingMode::kSigmoidNoAuxTc, 6, 8, 3, true, 2.5f};
  cases.push_back({"group-limited", grouped, false});
  cases.push_back({"one expert", sigmoid_config("one", 1040, 1024, 32, 1), true});
  uint64_t seed = 5000;
  for (const Case& k : cases) {
    LayerCase c = make_case(k.cfg, ++seed);
    const OwnedStream s;
    for (int64_t tokens : {1, 2, 5, 8}) {
      std::vector<float> hidden = make_hidden_states(tokens, k.cfg.hidden, ++seed);
      std::vector<float> logits = make_router_logits(tokens, k.cfg.num_experts, seed);
      if (k.one_expert)
        for (int64_t t = 0; t < tokens; ++t) logits[t * k.cfg.num_experts + 7] = 50.0f;
      const Routing ref_routing = route_reference(k.cfg.routing, logits, tokens, k.cfg.num_experts, c.weights.correction_bias);
      for (const Tactic& t : fused) {
        LayerPlan plan{t, t};
        plan.fc2.epilogue = Epilogue::kFinalize;
        const std::string where = std::string(k.what) + " " + format_tactic(t) + " T=" + std::to_string(tokens);
        const RunResult r = run_layer(*c.layer, hidden, logits, tokens, &plan);
        EXPECT_EQ(r.routing.ids, ref_routing.ids) << where;
        for (size_t i = 0; i < ref_routing.weights.size(); ++i)
          ASSERT_NEAR(r.routing.weights[i], ref_routing.weights[i], 1e-5) << where;
        const test::Comparison cmp = check_against_reference(c.weights, hidden, tokens, r);
        EXPECT_TRUE(within_tolerance(cmp)) << where;
        for (int rep = 0; rep < 2; ++rep)
          ASSERT_EQ(run_layer(*c.layer, hidden, logits, tokens, &plan).out, r.out) << where << " repeat " << rep;
        DeviceBuffer dh = test::to_device(test::to_bf16_bits(hidden));
        DeviceBuffer dl = test::to_device(logits);
        DeviceBuffer dout(tokens * k.cfg.hidden * 2);
        FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
        const CapturedGraph graph(s, [&](cudaStream_t st) {
          c.layer->forward(dh.get<uint16_t>(), dl.get<float>(), tokens, dout.get<uint16_t>(), st, &plan);
        });
        for (int rep = 0; rep < 2; ++rep) {
          test::poison(dout);
          FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
          graph.launch(s);
          FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
          ASSERT_EQ(test::to_host<uint16_t>(dout, tokens * k.cfg.hidden), r.out) << where << " graph replay " << rep;
        }
      }
    }
  }
}

// Fresh inputs of `tokens` tokens for the layer of `c`, and the plan the layer takes for them.
struct Batch {
  std::vector<float> hidden, logits;
  LayerPlan plan;
};
Batch make_batch(const LayerCase& c, int64_t tokens, uint64_t seed) {
  const MoeConfig& cfg = c.weights.config;
  return {make_hidden_states(tokens, cfg.hidden, seed), make_router_logits(tokens, cfg.num_experts, seed),
          c.layer->plan_for(tokens)};
}

TEST(GpuLayer, RepeatedRunsAreBitwiseIdentical) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(odd_config(), 61);
  for (int64_t tokens : {1, 3, 300}) {
    // Stream-K fix-ups and the finalize's arrival order vary run to run; the sums must not.
    // (T = 1: the small-batch family; T = 300: 75 tokens per expert, the prefill family on sm_90a.)
    const Batch in = make_batch(c, tokens, 5);
    const RunResult a = run_layer(*c.layer, in.hidden, in.logits, tokens, &in.plan);
    expect_matches_reference(c, in.hidden, tokens, a, "the first run");
    for (int rep = 0; rep < 3; ++rep) {
      // Between runs the intermediate buffers (activations, partial sums, per-slot rows) hold NaN:
      // a value read before this call writes it would show.
      if (rep > 0) c.layer->poison_workspace(tokens, in.plan, nullptr);
      const RunResult b = run_layer(*c.layer, in.hidden, in.logits, tokens, &in.plan);
      ASSERT_EQ(a.out, b.out) << "T=" << tokens << " run " << rep << (rep > 0 ? " (after poison_workspace)" : "");
    }
  }
}

// A virtual address range of two chunks mapped one at a time (what PyTorch's expandable
// segments do): the first chunk alone, then both. Driver calls through the runtime's entry points.
class TwoChunkRange {
 public:
  TwoChunkRange() {
    get(create_, "cuMemCreate");
    get(reserve_, "cuMemAddressReserve");
    get(map_, "cuMemMap");
    get(access_, "cuMemSetAccess");
    get(unmap_, "cuMemUnmap");
    get(release_, "cuMemRelease");
    get(free_, "cuMemAddressFree");
    PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
    get(granularity, "cuMemGetAllocationGranularity");
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = 0;
    check(granularity(&chunk_, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
    check(reserve_(&base_, 2 * chunk_, 0, 0, 0), "reserve");
    map_chunk(0);
  }
  ~TwoChunkRange() {
    for (int i = 0; i < 2; ++i)
      if (handle_[i]) {
        unmap_(base_ + i * chunk_, chunk_);
        release_(handle_[i]);
      }
    free_(base_, 2 * chunk_);
  }
  void map_chunk(int i) {
    check(create_(&handle_[i], chunk_, &prop_, 0), "create");
    check(map_(base_ + i * chunk_, chunk_, 0, handle_[i], 0), "map");
    CUmemAccessDesc d{};
    d.location = prop_.location;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(access_(base_ + i * chunk_, chunk_, &d, 1), "set access");
  }
  char* at(size_t offset) const { return reinterpret_cast<char*>(base_ + offset); }
  size_t chunk() const { return chunk_; }

 private:
  template <typename F>
  static void get(F& f, const char* name) {
    f = driver_entry_point<F>(name, 12000);
    FP4MOE_CHECK(f != nullptr, "the driver has no ", name);
  }
  static void check(CUresult r, const char* what) { FP4MOE_CHECK(r == CUDA_SUCCESS, "virtual memory: ", what, " failed: ", int(r)); }
  PFN_cuMemCreate_v10020 create_ = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve_ = nullptr;
  PFN_cuMemMap_v10020 map_ = nullptr;
  PFN_cuMemSetAccess_v10020 access_ = nullptr;
  PFN_cuMemUnmap_v10020 unmap_ = nullptr;
  PFN_cuMemRelease_v10020 release_ = nullptr;
  PFN_cuMemAddressFree_v10020 free_ = nullptr;
  CUmemAllocationProp prop_{};
  size_t chunk_ = 0;
  CUdeviceptr base_ = 0;
  CUmemGenericAllocationHandle handle_[2] = {0, 0};
};

// An array that runs past the last mapped byte (a batch larger than its buffer) is refused by
// name before a kernel writes past it; one that spans two pieces of a range mapped chunk by
// chunk is not (the pieces are one array to its owner), and computes the same output.
TEST(GpuLayer, ArraysPastTheirMappingAreRefused) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(odd_config(), 72);
  const MoeConfig& cfg = c.weights.config;
  const int64_t T = 4;
  const size_t rows_bytes = size_t(T * cfg.hidden * 2);
  const Batch in = make_batch(c, T, 11);
  const RunResult want = run_layer(*c.layer, in.hidden, in.logits, T, &in.plan);
  std::vector<uint16_t> hb(in.hidden.size());
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = Bf16::from_float(in.hidden[i]).bits;
  DeviceBuffer hidden(rows_bytes), logits(in.logits.size() * 4);
  FP4MOE_CUDA_CHECK(cudaMemcpy(hidden.get(), hb.data(), rows_bytes, cudaMemcpyHostToDevice));
  FP4MOE_CUDA_CHECK(cudaMemcpy(logits.get(), in.logits.data(), logits.bytes(), cudaMemcpyHostToDevice));
  TwoChunkRange range;
  ASSERT_GT(range.chunk(), rows_bytes);
  // Half of out's rows in the first chunk, the rest past it.
  uint16_t* const out = reinterpret_cast<uint16_t*>(range.at(range.chunk() - rows_bytes / 2 / 16 * 16));
  EXPECT_TRUE(test::throws_error_naming(
      [&] { c.layer->forward(hidden.get<uint16_t>(), logits.get<float>(), T, out, nullptr, &in.plan); },
      "forward: out ([T, H] bf16, T = 4: " + std::to_string(rows_bytes) + " bytes) runs past the end of its allocation"));
  EXPECT_TRUE(test::throws_error_naming(
      [&] {
        c.layer->forward(reinterpret_cast<uint16_t*>(range.at(range.chunk() - 16)), logits.get<float>(), T,
                         reinterpret_cast<uint16_t*>(range.at(0)), nullptr, &in.plan);
      },
      "forward: hidden ([T, H] bf16, T = 4: " + std::to_string(rows_bytes) + " bytes) runs past the end"));
  range.map_chunk(1);
  FP4MOE_CUDA_CHECK(cudaMemset(range.at(0), 0xFF, 2 * range.chunk()));
  c.layer->forward(hidden.get<uint16_t>(), logits.get<float>(), T, out, nullptr, &in.plan);
  std::vector<uint16_t> got(want.out.size());
  FP4MOE_CUDA_CHECK(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, want.out) << "the output written across the two mapped pieces";
}

// Decode batches of different inputs back to back on one stream, no host wait between them:
// each launch of a call waits for what the one before it wrote (on sm_90+ the GEMMs' CTAs are
// resident while the launch before them runs), so FC2 reading act rows before FC1 wrote them
// would read the previous batch's. Every output equals its batch run alone, bit for bit.
TEST(GpuLayer, BackToBackDecodeBatchesEqualTheirRunsAlone) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig cfg = sigmoid_config("back-to-back", 1536, 512, 64, 8);  // decode plans up to 8 tokens per expert
  LayerCase c = make_case(cfg, 103);
  // Past the small-batch family's range: narrow experts take it up to 4 tokens where DRAM gives
  // each SM under 31 GB/s (the H100), up to 3 elsewhere.
  const int64_t sizes[] = {kGemvMaxTokensNarrowLowBandwidth + 1, 24, 64};
  for (int64_t tokens : sizes) {
    constexpr int kInputs = 3, kCalls = 9;
    std::vector<Batch> in;
    std::vector<std::vector<uint16_t>> want;
    std::vector<DeviceBuffer> dh, dl, dout;
    for (int i = 0; i < kInputs; ++i) {
      in.push_back(make_batch(c, tokens, 300 + 7 * tokens + i));
      ASSERT_EQ(in[i].plan.fc1.family, Family::kW4a16Mma) << "T=" << tokens;
      ASSERT_EQ(in[i].plan.fc2.family, Family::kW4a16Mma) << "T=" << tokens;
      const RunResult r = run_layer(*c.layer, in[i].hidden, in[i].logits, tokens, &in[i].plan);
      const test::Comparison cmp = check_against_reference(c.weights, in[i].hidden, tokens, r);
      EXPECT_TRUE(within_tolerance(cmp)) << "T=" << tokens << " input " << i;
      want.push_back(r.out);
      dh.push_back(test::to_device(test::to_bf16_bits(in[i].hidden)));
      dl.push_back(test::to_device(in[i].logits));
    }
    for (int j = 0; j < kCalls; ++j) dout.emplace_back(tokens * cfg.hidden * 2);
    for (auto& o : dout) test::poison(o);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    for (int j = 0; j < kCalls; ++j) {
      const int i = j % kInputs;
      c.layer->forward(dh[i].get<uint16_t>(), dl[i].get<float>(), tokens, dout[j].get<uint16_t>(), nullptr, &in[i].plan);
    }
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    for (int j = 0; j < kCalls; ++j)
      EXPECT_EQ(test::to_host<uint16_t>(dout[j], tokens * cfg.hidden), want[j % kInputs]) << "T=" << tokens << " call " << j;
  }
}

// The clock accounting counts every launch of both GEMMs in each family (T = 1: the small-batch
// family, 5: decode, 300: prefill on sm_90a) and gives a clock a GPU can have, without changing
// a bit of the output; turned off, it counts nothing.
TEST(GpuLayer, ClockAccountingCountsEveryLaunch) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(odd_config(), 81);
  for (int64_t tokens : {1, 5, 300}) {
    const Batch in = make_batch(c, tokens, 9);
    const LayerPlan& plan = in.plan;
    const RunResult plain = run_layer(*c.layer, in.hidden, in.logits, tokens, &plan);
    expect_matches_reference(c, in.hidden, tokens, plain, "without the accounting");
    c.layer->set_clock_accounting(true);
    for (int rep = 0; rep < 3; ++rep) {
      const RunResult counted = run_layer(*c.layer, in.hidden, in.logits, tokens, &plan);
      ASSERT_EQ(plain.out, counted.out) << "T=" << tokens;
    }
    const SmClockAccount a = c.layer->read_clock_accounting();
    EXPECT_EQ(a.fc1_launches, 3) << "T=" << tokens << " " << format_tactic(plan.fc1);
    EXPECT_EQ(a.fc2_launches, 3) << "T=" << tokens << " " << format_tactic(plan.fc2);
    for (double ghz : {a.fc1_ghz, a.fc2_ghz}) {
      EXPECT_GT(ghz, 0.2) << "T=" << tokens;
      EXPECT_LT(ghz, 3.0) << "T=" << tokens;
    }
    std::printf("T=%lld %s / %s: SM clock %.3f / %.3f GHz\n", static_cast<long long>(tokens),
                format_tactic(plan.fc1).c_str(), format_tactic(plan.fc2).c_str(), a.fc1_ghz, a.fc2_ghz);
    c.layer->set_clock_accounting(false);
    run_layer(*c.layer, in.hidden, in.logits, tokens, &plan);
    const SmClockAccount off = c.layer->read_clock_accounting();
    EXPECT_EQ(off.fc1_launches + off.fc2_launches, 0) << "T=" << tokens;
  }
}

TEST(GpuLayer, RejectsBadInput) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(odd_config(), 71);
  // Rows (hidden, and out in place) and logits apart: a check that refuses overlapping arrays
  // must not be what refuses the calls below.
  DeviceBuffer buf(1 << 20), lg(1 << 20);
  FP4MOE_CUDA_CHECK(cudaMemset(buf.get(), 0, buf.bytes()));
  FP4MOE_CUDA_CHECK(cudaMemset(lg.get(), 0, lg.bytes()));
  EXPECT_THROW(c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 0, buf.get<uint16_t>(), nullptr),
               Error);
  LayerPlan bad = c.layer->plan_for(4);
  std::swap(bad.fc1, bad.fc2);  // wrong epilogues
  EXPECT_THROW(c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 4, buf.get<uint16_t>(), nullptr, &bad),
               Error);
  LayerPlan split = c.layer->plan_for(4);
  split.fc1.split_k = 3;  // the family schedules stream-K
  EXPECT_THROW(c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 4, buf.get<uint16_t>(), nullptr, &split),
               Error);
  LayerPlan missing = c.layer->plan_for(4);
  missing.fc1.tile_tokens = 24;  // not compiled
  EXPECT_THROW(c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 4, buf.get<uint16_t>(), nullptr, &missing),
               Error);
  // The small-batch family: both GEMMs or neither, and batches up to its tile.
  LayerPlan mixed = c.layer->plan_for(1);
  ASSERT_EQ(mixed.fc1.family, Family::kW4a16Gemv);
  mixed.fc2 = c.layer->plan_for(64).fc2;
  EXPECT_THROW(c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 1, buf.get<uint16_t>(), nullptr, &mixed),
               Error);
  const LayerPlan small = c.layer->plan_for(1);
  const int64_t limit = small.fc1.tile_tokens;
  const std::string over_limit =
      "takes batches of 1.." + std::to_string(limit) + " tokens, got " + std::to_string(limit + 1);
  EXPECT_TRUE(test::throws_error_naming(
      [&] { c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), limit + 1, buf.get<uint16_t>(), nullptr, &small); },
      over_limit));
  // The same under capture after reserve(limit): refused for the batch limit before the
  // workspace is looked at (it was refused as "must grow ... call reserve()", which no reserve()
  // cures).
  c.layer->reserve(limit);
  {
    const OwnedStream s;
    FP4MOE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const ::testing::AssertionResult refused = test::throws_error_naming(
        [&] { c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), limit + 1, buf.get<uint16_t>(), s, &small); },
        over_limit);
    cudaGraph_t g = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess) << "the refusal broke the capture";
    if (g) FP4MOE_CUDA_CHECK(cudaGraphDestroy(g));
    EXPECT_TRUE(refused);
  }
  // The fused family (sm_90+): one kernel, so the same shape for both GEMMs, and up to 8 tokens.
  if (test::gpu().sm >= 90) {
    std::vector<Tactic> fused;
    for (const Tactic& t : tactics_of(Epilogue::kSwiglu))
      if (t.family == Family::kW4a16Fused) fused.push_back(t);
    ASSERT_GE(fused.size(), 2u);
    LayerPlan two{fused[0], fused[1]};
    two.fc2.epilogue = Epilogue::kFinalize;
    EXPECT_THROW(c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 2, buf.get<uint16_t>(), nullptr, &two),
                 Error);
    LayerPlan one{fused[0], fused[0]};
    one.fc2.epilogue = Epilogue::kFinalize;
    EXPECT_THROW(c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 9, buf.get<uint16_t>(), nullptr, &one),
                 Error);
    LayerPlan half{fused[0], c.layer->plan_for(64).fc2};
    EXPECT_THROW(c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 2, buf.get<uint16_t>(), nullptr, &half),
                 Error);
  }
  MoeWeights unmat = c.weights;
  unmat.experts[3] = ExpertWeights{};
  EXPECT_THROW(GpuMoeLayer::create(unmat), Error);
  // Pointers the kernels cannot move 16 bytes at a time from.
  EXPECT_THROW(c.layer->forward(reinterpret_cast<uint16_t*>(buf.get<char>() + 2), lg.get<float>(), 4,
                                buf.get<uint16_t>(), nullptr),
               Error);
  EXPECT_THROW(c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 4,
                                reinterpret_cast<uint16_t*>(buf.get<char>() + 8), nullptr),
               Error);
  // out written over a part of the inputs: in place is out == hidden, nothing in between.
  const MoeConfig& cfg = c.weights.config;
  const int64_t rows_bytes = 4 * cfg.hidden * 2;
  ASSERT_LE(2 * rows_bytes + 16, static_cast<int64_t>(buf.bytes()));
  EXPECT_TRUE(test::throws_error_naming(
      [&] { c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 4, buf.get<uint16_t>() + 8, nullptr); },
      "forward: out overlaps hidden without being it"));
  EXPECT_TRUE(test::throws_error_naming(
      [&] {
        c.layer->forward(reinterpret_cast<uint16_t*>(buf.get<char>() + rows_bytes - 16), lg.get<float>(), 4,
                         buf.get<uint16_t>(), nullptr);
      },
      "forward: out overlaps hidden without being it"));
  EXPECT_TRUE(test::throws_error_naming(
      [&] {
        c.layer->forward(buf.get<uint16_t>(), reinterpret_cast<float*>(lg.get<char>() + 4 * cfg.num_experts * 4 - 4),
                         4, lg.get<uint16_t>(), nullptr);
      },
      "forward: out overlaps logits"));
  // Adjacent is apart: out right after hidden's last row runs.
  c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 4,
                   reinterpret_cast<uint16_t*>(buf.get<char>() + rows_bytes), nullptr);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  // Memory the kernels would fault on (a fault loses the process's CUDA context): named by
  // argument, under capture too (the query must not break a capture in global mode).
  std::vector<uint4> host_rows(1 << 16);
  uint16_t* const host = reinterpret_cast<uint16_t*>(host_rows.data());
  EXPECT_TRUE(test::throws_error_naming(
      [&] { c.layer->forward(host, lg.get<float>(), 4, buf.get<uint16_t>(), nullptr); },
      "forward: hidden is not CUDA memory"));
  {
    const OwnedStream s;
    FP4MOE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const ::testing::AssertionResult refused = test::throws_error_naming(
        [&] { c.layer->forward(buf.get<uint16_t>(), lg.get<float>(), 4, host, s); }, "forward: out is not CUDA memory");
    cudaGraph_t g = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess) << "the pointer query broke the capture";
    if (g) FP4MOE_CUDA_CHECK(cudaGraphDestroy(g));
    EXPECT_TRUE(refused);
  }
  void* pinned = nullptr;
  FP4MOE_CUDA_CHECK(cudaMallocHost(&pinned, 1 << 20));
  EXPECT_TRUE(test::throws_error_naming(
      [&] { c.layer->forward(buf.get<uint16_t>(), static_cast<float*>(pinned), 4, buf.get<uint16_t>(), nullptr); },
      "forward: logits is host memory"));
  FP4MOE_CUDA_CHECK(cudaFreeHost(pinned));
  if (test::cuda_environment().devices.size() > 1) {  // another GPU's memory
    FP4MOE_CUDA_CHECK(cudaSetDevice(1));
    DeviceBuffer other(1 << 20);
    FP4MOE_CUDA_CHECK(cudaSetDevice(0));
    EXPECT_TRUE(test::throws_error_naming(
        [&] { c.layer->forward(other.get<uint16_t>(), lg.get<float>(), 4, buf.get<uint16_t>(), nullptr); },
        "forward: hidden is memory of GPU 1, not of the layer's GPU 0"));
  }
  // More slots than the routing's warp has lanes: refused at creation, whichever family would run
  // (the small-batch family routes inside FC1, without the routing launch's check).
  MoeConfig wide_k = odd_config();
  wide_k.num_experts = 64;
  wide_k.routing.top_k = 40;
  SyntheticOptions so;
  so.init = WeightInit::kRandomCodes;
  EXPECT_THROW(GpuMoeLayer::create(make_synthetic_moe(wide_k, so)), Error);
  // The layer still runs after the refusals (no CUDA error left behind for the next check).
  const Batch in = make_batch(c, 4, 9);
  // run_gpu_layer's inputs are float: one beyond bf16's range would enter the layer as infinity.
  std::vector<float> too_big = in.hidden;
  too_big[c.weights.config.hidden + 5] = 3.4e38f;
  try {
    run_gpu_layer(*c.layer, too_big, in.logits, 4, 0);
    ADD_FAILURE() << "3.4e38 entered the layer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(token 1) is 3.4e+38, beyond bf16's range"), std::string::npos) << e.what();
  }
  const RunResult r = run_layer(*c.layer, in.hidden, in.logits, 4, &in.plan);
  const test::Comparison after = check_against_reference(c.weights, in.hidden, 4, r);
  EXPECT_TRUE(within_tolerance(after));
}

// A token whose logits hold a NaN or +inf: its output row is NaN (never a routing id out
// of range, never a crash or a CUDA error), the other tokens' rows are as without it (within
// float32 summation order: the poisoned tokens' routing moves the stream-K cuts), in every family
// (T = 3: small batch, 12: decode, 300: prefill on sm_90a).
TEST(GpuLayer, NonFiniteLogitsPoisonTheirTokenOnly) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(odd_config(), 81);
  const int E = c.weights.config.num_experts;
  const int64_t H = c.weights.config.hidden;
  for (int64_t tokens : {3, 12, 300}) {
    const Batch in = make_batch(c, tokens, 13);
    const RunResult clean = run_layer(*c.layer, in.hidden, in.logits, tokens, &in.plan);
    expect_matches_reference(c, in.hidden, tokens, clean, "finite logits");
    for (const float bad : {std::nanf(""), INFINITY}) {
      std::vector<float> logits = in.logits;
      std::fill(logits.begin() + E, logits.begin() + 2 * E, bad);  // token 1: the whole row
      logits[2 * E + 5] = bad;                                       // token 2: one expert
      // The output starts at 1.0, not NaN: a poisoned token's NaN must be written, not left.
      const RunResult r = run_layer(*c.layer, in.hidden, logits, tokens, &in.plan, {.out_fill = 0x3F80});
      for (int32_t id : r.routing.ids) ASSERT_TRUE(id >= 0 && id < E) << "T=" << tokens << " id " << id;
      double num = 0, den = 0;
      for (int64_t t = 0; t < tokens; ++t) {
        const bool poisoned = t == 1 || t == 2;
        for (int64_t h = 0; h < H; ++h) {
          const double v = Bf16::from_bits(r.out[t * H + h]).to_float();
          if (poisoned) {
            ASSERT_FALSE(std::isfinite(v)) << "T=" << tokens << " token " << t << " col " << h;
          } else {
            ASSERT_TRUE(std::isfinite(v)) << "T=" << tokens << " token " << t << " col " << h;
            const double want = Bf16::from_bits(clean.out[t * H + h]).to_float();
            num += (v - want) * (v - want);
            den += want * want;
          }
        }
      }
      EXPECT_LT(std::sqrt(num / den), 1e-3) << "T=" << tokens << ": the clean tokens changed";
    }
  }
}

// A logit of -inf masks its expert (docs/ROUTING.md), in both routing modes and every family
// (its first FC1 and FC2 tactics; the small-batch and fused families route inside their kernels
// from per-lane sorted lists, the others in the routing kernels' scan): a quarter of the experts
// masked on every token, and token 0 left with one finite logit, so that softmax must choose two
// masked experts (weight 0, the lowest indices first; the scan once marked a chosen expert -inf
// and could choose a masked one twice) and the sigmoid sees a row of -inf but one. The routing
// equals the reference's, and so does the output. Then a softmax token whose every logit is -inf
// (softmax of nothing, which the host entry points refuse): its row is NaN, its ids in range.
// And run_gpu_layer's own checks: -inf taken, +inf and a softmax row of -inf only refused.
TEST(GpuLayer, MinusInfinityLogitsMaskTheirExperts) {
  FP4MOE_REQUIRE_GPU();
  for (const RoutingMode mode : {RoutingMode::kSoftmaxTopK, RoutingMode::kSigmoidNoAuxTc}) {
    MoeConfig cfg = odd_config();
    if (mode == RoutingMode::kSoftmaxTopK) cfg.routing = RoutingConfig{mode, 3, 1, 1, true, 1.0f};
    LayerCase c = make_case(cfg, 91);
    const int E = cfg.num_experts, k = cfg.routing.top_k;
    const int64_t H = cfg.hidden;
    uint64_t seed = 900;
    for (const Family family : families_here()) {
      const LayerPlan plan = first_plan_of(family);
      const bool small = family == Family::kW4a16Gemv || family == Family::kW4a16Fused;
      for (int64_t tokens : small ? std::vector<int64_t>{1, 5} : std::vector<int64_t>{5, 300}) {
        const std::string where = std::string(mode == RoutingMode::kSoftmaxTopK ? "softmax " : "sigmoid ") +
                                  format_tactic(plan.fc1) + " T=" + std::to_string(tokens);
        const std::vector<float> hidden = make_hidden_states(tokens, H, ++seed);
        std::vector<float> logits = make_router_logits(tokens, E, seed);
        for (int64_t t = 0; t < tokens; ++t)
          for (int e = 0; e < E; ++e)
            if (t == 0 ? e != 5 : (e + t) % 4 == 0) logits[t * E + e] = -INFINITY;
        const RunResult r = run_layer(*c.layer, hidden, logits, tokens, &plan);
        test::expect_routing_matches_reference(cfg.routing, logits, c.weights.correction_bias, tokens, E,
                                               r.routing.ids, r.routing.weights, 1e-5, where);
        if (HasFatalFailure()) return;
        if (mode == RoutingMode::kSoftmaxTopK) {  // token 0: expert 5, then masked 0 and 1 at weight 0
          for (int j = 0; j < k; ++j) {
            EXPECT_EQ(r.routing.ids[j], j == 0 ? 5 : j - 1) << where << " slot " << j;
            if (j > 0) EXPECT_EQ(r.routing.weights[j], 0.0f) << where << " slot " << j;
          }
        }
        const test::Comparison cmp = check_against_reference(c.weights, hidden, tokens, r);
        EXPECT_TRUE(within_tolerance(cmp)) << where;
        if (mode != RoutingMode::kSoftmaxTopK) continue;
        // Token 0 without an expert: NaN, the others as before.
        logits[5] = -INFINITY;
        const RunResult bad = run_layer(*c.layer, hidden, logits, tokens, &plan, {.out_fill = 0x3F80});
        for (int32_t id : bad.routing.ids) ASSERT_TRUE(id >= 0 && id < E) << where << " id " << id;
        for (int64_t h = 0; h < H; ++h)
          ASSERT_TRUE(std::isnan(Bf16::from_bits(bad.out[h]).to_float())) << where << ": token 0, col " << h;
        for (int64_t i = H; i < tokens * H; ++i)
          ASSERT_TRUE(std::isfinite(Bf16::from_bits(bad.out[i]).to_float())) << where << ": token " << i / H;
      }
    }
    // run_gpu_layer, the host entry point: -inf is a logit it takes, +inf one it refuses by name,
    // and, in softmax, a row of -inf only.
    const int64_t tokens = 3;
    const std::vector<float> hidden = make_hidden_states(tokens, H, 77);
    std::vector<float> logits = make_router_logits(tokens, E, 77);
    for (int e = 0; e < E; e += 2) logits[E + e] = -INFINITY;
    const GpuLayerRun run = run_gpu_layer(*c.layer, hidden, logits, tokens, 0);
    test::expect_routing_matches_reference(cfg.routing, logits, c.weights.correction_bias, tokens, E, run.routing.ids,
                                           run.routing.weights, 1e-5, "run_gpu_layer");
    auto refused = [&](const std::vector<float>& bad_logits, const std::string& needle) {
      EXPECT_TRUE(test::throws_error_naming([&] { run_gpu_layer(*c.layer, hidden, bad_logits, tokens, 0); }, needle));
    };
    std::vector<float> plus_inf = logits;
    plus_inf[2 * E + 3] = INFINITY;
    refused(plus_inf, "logit (token 2, expert 3) is inf");
    std::vector<float> none_left = logits;
    std::fill(none_left.begin() + 2 * E, none_left.end(), -INFINITY);
    if (mode == RoutingMode::kSoftmaxTopK) {
      refused(none_left, "every logit of token 2 is -inf");
    } else {  // the sigmoid routes such a row on the bias alone, at weight 0
      const GpuLayerRun all = run_gpu_layer(*c.layer, hidden, none_left, tokens, 0);
      for (int j = 0; j < k; ++j) EXPECT_EQ(all.routing.weights[2 * k + j], 0.0f) << "slot " << j;
    }
  }
}

// A graph captured at a small batch still replays correctly after a larger batch grew the
// workspace (a serving loop: decode graphs captured, then a prefill batch run eagerly).
// out may be hidden itself (in place, as a residual stream would): every kernel that writes out
// runs after every read of hidden has ended (each launch waits for the one before it), in all
// three families (T = 1: small batch, 5: decode, 300: prefill on sm_90a).
TEST(GpuLayer, InPlaceOutputEqualsSeparateOutput) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(odd_config(), 111);
  const MoeConfig& cfg = c.weights.config;
  for (int64_t tokens : {1, 5, 300}) {
    const Batch in = make_batch(c, tokens, 23);
    const RunResult want = run_layer(*c.layer, in.hidden, in.logits, tokens, &in.plan);
    expect_matches_reference(c, in.hidden, tokens, want, "separate output");
    DeviceBuffer dh = test::to_device(test::to_bf16_bits(in.hidden));
    DeviceBuffer dl = test::to_device(in.logits);
    c.layer->forward(dh.get<uint16_t>(), dl.get<float>(), tokens, dh.get<uint16_t>(), nullptr, &in.plan);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(test::to_host<uint16_t>(dh, tokens * cfg.hidden), want.out)
        << "T=" << tokens << " " << format_tactic(in.plan.fc1) << " / " << format_tactic(in.plan.fc2);
  }
}

// Calls share the layer's workspace: a call on a second stream, or from a second thread, must
// run after the call before it, not beside it. A large batch (prefill family on sm_90a, a few
// hundred microseconds) on one stream, then at once small batches (the small-batch family,
// which routes into the same buffers) on another, without a host wait between them; then two
// threads, each on its own stream. Every output equals the output of the same batch run alone.
TEST(GpuLayer, CallsOnOtherStreamsAndThreadsRunInOrder) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig cfg = sigmoid_config("streams", 2048, 768, 64, 8);  // narrow: T <= 3 takes the small-batch family
  LayerCase c = make_case(cfg, 101);
  const int64_t sizes[] = {4096, 3, 200, 1, 4096, 2};
  constexpr int kBatches = 6;
  std::vector<Batch> in;
  std::vector<std::vector<uint16_t>> want;
  for (int i = 0; i < kBatches; ++i) {
    in.push_back(make_batch(c, sizes[i], 200 + i));
    const RunResult alone = run_layer(*c.layer, in[i].hidden, in[i].logits, sizes[i], &in[i].plan);
    expect_matches_reference(c, in[i].hidden, sizes[i], alone, "batch " + std::to_string(i) + " alone");
    want.push_back(alone.out);
  }
  std::vector<DeviceBuffer> dh, dl, dout;
  for (int i = 0; i < kBatches; ++i) {
    dh.push_back(test::to_device(test::to_bf16_bits(in[i].hidden)));
    dl.push_back(test::to_device(in[i].logits));
    dout.emplace_back(sizes[i] * cfg.hidden * 2);
  }
  const OwnedStream streams[2];
  auto call = [&](int i, cudaStream_t s) {
    c.layer->forward(dh[i].get<uint16_t>(), dl[i].get<float>(), sizes[i], dout[i].get<uint16_t>(), s, &in[i].plan);
  };
  auto check = [&](const char* how) {
    for (int i = 0; i < kBatches; ++i)
      EXPECT_EQ(test::to_host<uint16_t>(dout[i], sizes[i] * cfg.hidden), want[i]) << how << ", batch " << i << " (T = "
                                                                                   << sizes[i] << ")";
  };
  // Alternating streams, one thread.
  for (auto& o : dout) test::poison(o);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < kBatches; ++i) call(i, streams[i % 2]);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  check("two streams");
  // Two threads, a stream each, three batches each, several rounds.
  for (int round = 0; round < 3; ++round) {
    for (auto& o : dout) test::poison(o);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    std::thread other([&] {
      FP4MOE_CUDA_CHECK(cudaSetDevice(0));
      for (int i = 1; i < kBatches; i += 2) call(i, streams[1]);
    });
    for (int i = 0; i < kBatches; i += 2) call(i, streams[0]);
    other.join();
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    check("two threads");
  }
  // Two threads on their per-thread default streams: one handle, two streams.
  for (auto& o : dout) test::poison(o);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  std::thread other([&] {
    FP4MOE_CUDA_CHECK(cudaSetDevice(0));
    for (int i = 1; i < kBatches; i += 2) call(i, cudaStreamPerThread);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  });
  for (int i = 0; i < kBatches; i += 2) call(i, cudaStreamPerThread);
  other.join();
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  check("per-thread default streams");
}

// reserve(max) sizes the workspace for every plan up to max, so that any batch up to it can be
// captured: with 256 experts top-6 the 16-token decode tile serves T = 257..426 (6 to 10 tokens
// per expert), a band with no power of two in it, which reserve once missed.
TEST(GpuLayer, ReserveCoversEveryPlanUpToItsSize) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig cfg = sigmoid_config("bands", 512, 1024, 256, 6);  // wide experts: glm5's decode bands
  LayerCase c = make_case(cfg, 131);
  c.layer->reserve(4096);
  const OwnedStream s;
  for (int64_t tokens : {200, 300, 420, 1000, 4096}) {
    const Batch in = make_batch(c, tokens, 400 + tokens);
    std::printf("T=%lld: %s / %s\n", static_cast<long long>(tokens), format_tactic(in.plan.fc1).c_str(),
                format_tactic(in.plan.fc2).c_str());
    DeviceBuffer dh = test::to_device(test::to_bf16_bits(in.hidden));
    DeviceBuffer dl = test::to_device(in.logits);
    DeviceBuffer dout(tokens * cfg.hidden * 2);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    const CapturedGraph graph(s, [&](cudaStream_t st) {
      c.layer->forward(dh.get<uint16_t>(), dl.get<float>(), tokens, dout.get<uint16_t>(), st);
    });
    test::poison(dout);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    graph.launch(s);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<uint16_t> got = test::to_host<uint16_t>(dout, tokens * cfg.hidden);
    const RunResult want = run_layer(*c.layer, in.hidden, in.logits, tokens, &in.plan);
    const RunResult again = run_layer(*c.layer, in.hidden, in.logits, tokens, &in.plan);
    auto differing = [&](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
      int64_t n = 0, first = -1, nan = 0;
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i]) {
          if (first < 0) first = static_cast<int64_t>(i);
          ++n;
          nan += (a[i] & 0x7F80) == 0x7F80;
        }
      return std::to_string(n) + " values differ (" + std::to_string(nan) + " NaN), the first at token " +
             std::to_string(first < 0 ? -1 : first / cfg.hidden) + " column " + std::to_string(first < 0 ? -1 : first % cfg.hidden);
    };
    EXPECT_EQ(want.out, again.out) << "T=" << tokens << " eager runs: " << differing(again.out, want.out);
    EXPECT_EQ(got, want.out) << "T=" << tokens << " graph against eager: " << differing(got, want.out);
    for (const auto& [what, out] : {std::pair{"eager", want.out}, std::pair{"graph", got}}) {
      const test::Comparison cmp = check_against_reference(c.weights, in.hidden, tokens, RunResult{out, want.routing});
      EXPECT_TRUE(within_tolerance(cmp)) << "T=" << tokens << " " << what;
      std::printf("  %s: rel error %.3e against the reference\n", what, cmp.rel_frobenius);
    }
  }
}

// Two layers whose prefill batches overlap on two streams (as layer.h advises for batches that
// should overlap). The prefill FC2 sums the slots after every unit's rows are out; its grid is
// as many CTAs as the GPU holds, and beside the other layer's kernels not all of them are
// resident at once, and a barrier that waited for every CTA could wait for ever (it did not
// hang in this test on the H200 before the change either). Outputs as run alone.
TEST(GpuLayer, TwoLayersOverlappingOnTwoStreamsFinish) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig cfg = sigmoid_config("overlap", 2048, 1024, 64, 8);
  LayerCase layers[2] = {make_case(cfg, 121), make_case(cfg, 122)};
  const int64_t tokens = 4096;  // 512 tokens per expert: the prefill family on sm_90a
  std::vector<Batch> in;
  std::vector<std::vector<uint16_t>> want;
  std::vector<DeviceBuffer> dh, dl, dout;
  for (int i = 0; i < 2; ++i) {
    in.push_back(make_batch(layers[i], tokens, 300 + i));
    const RunResult alone = run_layer(*layers[i].layer, in[i].hidden, in[i].logits, tokens, &in[i].plan);
    expect_matches_reference(layers[i], in[i].hidden, tokens, alone, "layer " + std::to_string(i) + " alone");
    want.push_back(alone.out);
    dh.push_back(test::to_device(test::to_bf16_bits(in[i].hidden)));
    dl.push_back(test::to_device(in[i].logits));
    dout.emplace_back(tokens * cfg.hidden * 2);
    test::poison(dout[i]);
  }
  std::printf("plan %s / %s\n", format_tactic(in[0].plan.fc1).c_str(), format_tactic(in[0].plan.fc2).c_str());
  const OwnedStream streams[2];
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  for (int round = 0; round < 8; ++round)
    for (int i = 0; i < 2; ++i)
      layers[i].layer->forward(dh[i].get<uint16_t>(), dl[i].get<float>(), tokens, dout[i].get<uint16_t>(), streams[i],
                               &in[i].plan);
  // A hang cannot be recovered from in this process: give it a deadline, then end the process.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (const OwnedStream& s : streams) {
    cudaError_t e;
    while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "TwoLayersOverlappingOnTwoStreamsFinish: the layers did not finish in 60 s (hang)\n");
        std::fflush(nullptr);
        std::_Exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FP4MOE_CUDA_CHECK(e);
  }
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(test::to_host<uint16_t>(dout[i], tokens * cfg.hidden), want[i]) << "layer " << i;
}

TEST(GpuLayer, GraphsCapturedBeforeTheWorkspaceGrowsStillReplay) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(odd_config(), 91);
  const MoeConfig& cfg = c.weights.config;
  const int64_t small = 5, large = 2000;
  const Batch in = make_batch(c, small, 17);
  const RunResult want = run_layer(*c.layer, in.hidden, in.logits, small, &in.plan, {.reserve_first = false});
  expect_matches_reference(c, in.hidden, small, want, "eager");
  DeviceBuffer dh = test::to_device(test::to_bf16_bits(in.hidden));
  DeviceBuffer dl = test::to_device(in.logits);
  DeviceBuffer dout(small * cfg.hidden * 2);
  cudaStream_t s;
  FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    const CapturedGraph graph(s, [&](cudaStream_t st) {
      c.layer->forward(dh.get<uint16_t>(), dl.get<float>(), small, dout.get<uint16_t>(), st, &in.plan);
    });
    const Batch big = make_batch(c, large, 19);
    run_layer(*c.layer, big.hidden, big.logits, large, &big.plan, {.reserve_first = false});  // grows every buffer
    test::poison(dout);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());  // the memset ran on the legacy stream, s does not wait for it
    graph.launch(s);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_EQ(test::to_host<uint16_t>(dout, small * cfg.hidden), want.out);
  }
  FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
}

// The same when the growths come under plans of other families: a graph of a prefill batch
// (its gather buffer, which decode plans do not use), then an eager decode-plan batch that grows
// the rest but not that buffer, then an eager prefill batch that grows it - the buffer the graph
// addresses must still be there (one flag for the whole workspace once freed it here: the
// output stayed right, compute-sanitizer memcheck reported the graph's writes to the freed
// buffer; scripts/gpu_check.sh runs this test under memcheck).
TEST(GpuLayer, GraphsSurviveGrowthsUnderOtherPlans) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(odd_config(), 93);
  const MoeConfig& cfg = c.weights.config;
  const int64_t graphed = 300;  // 75 tokens per expert: the prefill family on sm_90a
  const Batch in = make_batch(c, graphed, 29);
  const RunResult want = run_layer(*c.layer, in.hidden, in.logits, graphed, &in.plan, {.reserve_first = false});
  expect_matches_reference(c, in.hidden, graphed, want, "eager");
  DeviceBuffer dh = test::to_device(test::to_bf16_bits(in.hidden));
  DeviceBuffer dl = test::to_device(in.logits);
  DeviceBuffer dout(graphed * cfg.hidden * 2);
  const OwnedStream s;
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  const CapturedGraph graph(s, [&](cudaStream_t st) {
    c.layer->forward(dh.get<uint16_t>(), dl.get<float>(), graphed, dout.get<uint16_t>(), st, &in.plan);
  });
  Batch decode = make_batch(c, 3000, 31);
  for (const Tactic& t : tactics_of(Epilogue::kSwiglu))
    if (t.family == Family::kW4a16Mma) decode.plan.fc1 = t;
  for (const Tactic& t : tactics_of(Epilogue::kFinalize))
    if (t.family == Family::kW4a16Mma) decode.plan.fc2 = t;
  // (the calls themselves grow the workspace: reserve would grow it for every plan at once)
  run_layer(*c.layer, decode.hidden, decode.logits, 3000, &decode.plan, {.reserve_first = false});  // grows all but the gather buffer
  const Batch prefill = make_batch(c, 6000, 37);
  run_layer(*c.layer, prefill.hidden, prefill.logits, 6000, &prefill.plan, {.reserve_first = false});  // grows the gather buffer
  for (int rep = 0; rep < 2; ++rep) {
    test::poison(dout);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    graph.launch(s);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_EQ(test::to_host<uint16_t>(dout, graphed * cfg.hidden), want.out) << "replay " << rep;
  }
}

// A plan of the caller's own (here the prefill family's, forced at a decode batch; the decode
// family's on GPUs without it) captured with no eager call before it: reserve(max_tokens, plans)
// sized the workspace for it (it was "call reserve(max_tokens)", which did not, and no call could
// help), and the replay equals the eager call bit for bit. A plan the layer cannot run is refused
// by reserve itself.
TEST(GpuLayer, ReserveWithPlansLetsTheCallersPlanBeCaptured) {
  FP4MOE_REQUIRE_GPU();
  LayerCase fresh = make_case(odd_config(), 97);
  const MoeConfig& cfg = fresh.weights.config;
  const int64_t T = 24;
  Batch in = make_batch(fresh, T, 41);
  in.plan = fresh.layer->plan_for(8192);
  fresh.layer->reserve(T, {in.plan});
  DeviceBuffer dh = test::to_device(test::to_bf16_bits(in.hidden));
  DeviceBuffer dl = test::to_device(in.logits);
  DeviceBuffer dout(T * cfg.hidden * 2);
  test::poison(dout);
  const OwnedStream s;
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  const CapturedGraph graph(s, [&](cudaStream_t st) {
    fresh.layer->forward(dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), st, &in.plan);
  });
  graph.launch(s);
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<uint16_t> replayed = test::to_host<uint16_t>(dout, T * cfg.hidden);
  const RunResult eager = run_layer(*fresh.layer, in.hidden, in.logits, T, &in.plan, {.reserve_first = false});
  expect_matches_reference(fresh, in.hidden, T, eager, "eager");
  EXPECT_EQ(replayed, eager.out) << format_tactic(in.plan.fc1) << " + " << format_tactic(in.plan.fc2);
  LayerPlan mixed = fresh.layer->plan_for(1);
  ASSERT_TRUE(runs_gemms_together(mixed.fc1.family));
  mixed.fc2 = in.plan.fc2;
  EXPECT_TRUE(test::throws_error_naming([&] { fresh.layer->reserve(T, {mixed}); }, "is not a plan the layer runs"));
}

// A serving process records graphs on one thread (PyTorch captures in global mode) while another
// thread runs a layer eagerly. The eager call grows its workspace (cudaMalloc and cudaFree) and
// queries its pointers and stream: in global mode each such call of any thread fails and
// invalidates the capture unless the caller runs relaxed. Here the capturing stream is a
// blocking one, so the legacy default stream is unusable meanwhile: a call on it is refused by
// name and the capture survives that too; and the capturing thread's own forward_with_events is
// refused (its events would belong to the graph).
TEST(GpuLayer, EagerCallsBesideAnotherThreadsCaptureNeitherFailNorBreakIt) {
  FP4MOE_REQUIRE_GPU();
  LayerCase a = make_case(odd_config(), 131), b = make_case(odd_config(), 132);
  const MoeConfig& cfg = a.weights.config;
  const int64_t Ta = 8, Tb = 40;
  Batch ia = make_batch(a, Ta, 51), ib = make_batch(b, Tb, 52);
  const RunResult want_a = run_layer(*a.layer, ia.hidden, ia.logits, Ta, &ia.plan);
  // b's workspace small, so that the call beside the capture grows it: allocations and frees.
  const Batch small = make_batch(b, 2, 53);
  run_layer(*b.layer, small.hidden, small.logits, 2, nullptr, {.reserve_first = false});
  DeviceBuffer dha = test::to_device(test::to_bf16_bits(ia.hidden)), dla = test::to_device(ia.logits);
  DeviceBuffer dhb = test::to_device(test::to_bf16_bits(ib.hidden)), dlb = test::to_device(ib.logits);
  DeviceBuffer douta(Ta * cfg.hidden * 2), doutb(Tb * cfg.hidden * 2);
  test::poison(douta);
  test::poison(doutb);
  cudaStream_t sa = nullptr;  // blocking: the legacy stream would wait for it
  FP4MOE_CUDA_CHECK(cudaStreamCreate(&sa));
  const OwnedStream sb;
  cudaEvent_t ev[4];
  for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventCreate(&e));
  void* const evp[4] = {ev[0], ev[1], ev[2], ev[3]};
  // On every way out: a capture a failure left open ended (in global mode it would refuse the
  // later tests' allocations), the stream and the events freed.
  struct Cleanup {
    cudaStream_t s;
    cudaEvent_t* ev;
    ~Cleanup() {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
        cudaGraph_t partial = nullptr;
        cudaStreamEndCapture(s, &partial);
        if (partial) cudaGraphDestroy(partial);
      }
      for (int i = 0; i < 4; ++i) cudaEventDestroy(ev[i]);
      cudaStreamDestroy(s);
      (void)cudaGetLastError();
    }
  } cleanup{sa, ev};
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());

  ASSERT_EQ(cudaStreamBeginCapture(sa, cudaStreamCaptureModeGlobal), cudaSuccess);
  a.layer->forward(dha.get<uint16_t>(), dla.get<float>(), Ta, douta.get<uint16_t>(), sa, &ia.plan);
  const bool events_refused = test::throws_error_naming(
      [&] { a.layer->forward_with_events(dha.get<uint16_t>(), dla.get<float>(), Ta, douta.get<uint16_t>(), sa, evp, &ia.plan); },
      "forward_with_events: not during a CUDA graph capture");
  std::string b_error = "(not run)", legacy_error;
  cudaStreamCaptureMode mode_after = cudaStreamCaptureModeRelaxed;
  std::thread other([&] {
    try {
      b.layer->forward(dhb.get<uint16_t>(), dlb.get<float>(), Tb, doutb.get<uint16_t>(), sb, &ib.plan);
      // The thread's own mode (global, the default) is back after the call's relaxed scope: read
      // by exchanging it for relaxed, then put back.
      cudaStreamCaptureMode probe = cudaStreamCaptureModeRelaxed;
      FP4MOE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&probe));
      mode_after = probe;
      FP4MOE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&probe));
      const RelaxedCaptureMode relaxed;  // the test's own wait, as a caller beside a capture must
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(sb));
      b_error.clear();
    } catch (const std::exception& e) {
      b_error = e.what();
    }
    try {
      b.layer->forward(dhb.get<uint16_t>(), dlb.get<float>(), Tb, doutb.get<uint16_t>(), nullptr, &ib.plan);
      legacy_error = "(accepted)";
    } catch (const std::exception& e) {
      legacy_error = e.what();
    }
  });
  other.join();
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(sa, &g);
  EXPECT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended) << ": a call of the other thread broke the capture";
  (void)cudaGetLastError();
  EXPECT_TRUE(events_refused);
  EXPECT_EQ(b_error, "") << "the eager call beside the capture";
  EXPECT_EQ(mode_after, cudaStreamCaptureModeGlobal) << "the calling thread's capture mode after forward";
  EXPECT_NE(legacy_error.find("forward: the legacy default stream cannot be used while a blocking stream"),
            std::string::npos)
      << legacy_error;
  if (g) {
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    if (exec) {
      FP4MOE_CUDA_CHECK(cudaGraphLaunch(exec, sa));
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(sa));
      EXPECT_EQ(test::to_host<uint16_t>(douta, Ta * cfg.hidden), want_a.out) << "the graph captured beside the call";
      cudaGraphExecDestroy(exec);
    }
    cudaGraphDestroy(g);
  }
  const std::vector<uint16_t> got_b = test::to_host<uint16_t>(doutb, Tb * cfg.hidden);
  const RunResult again = run_layer(*b.layer, ib.hidden, ib.logits, Tb, &ib.plan, {.reserve_first = false});
  expect_matches_reference(b, ib.hidden, Tb, again, "b after the capture");
  EXPECT_EQ(got_b, again.out) << "b's call beside the capture against its call after";
}

}  // namespace
}  // namespace fp4moe
