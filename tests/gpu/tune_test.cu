// The autotuner on a small layer: every compiled tactic is either timed (after verification)
// or rejected with a reason; winners go to the cache, and a layer given the cache plans with them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "fp4moe/bf16.h"
#include "fp4moe/heuristic.h"
#include "fp4moe/layer.h"
#include "fp4moe/moe.h"
#include "fp4moe/resource_model.h"
#include "fp4moe/synthetic.h"
#include "fp4moe/tune.h"
#include "gpu_test_util.h"
#include "support/oracle.h"
#include "tune/ranking.h"

namespace fp4moe {
namespace {

// A layer planned without the tuning cache on this machine (the tests give it theirs).
std::unique_ptr<GpuMoeLayer> uncached_layer(const MoeWeights& w) {
  LayerOptions lo;
  lo.use_tuning_cache = false;
  return GpuMoeLayer::create(w, lo);
}

MoeWeights seeded_weights(const MoeConfig& cfg, uint64_t seed) {
  SyntheticOptions so;
  so.seed = seed;
  return make_synthetic_moe(cfg, so);
}

// glm5-tp8's experts (I 256) at H 1024, 32 of them: every family has tactics to time, in seconds.
MoeConfig small_tp8_config() {
  MoeConfig cfg = MoeConfig::glm5_tp8();
  cfg.num_experts = 32;
  cfg.hidden = 1024;
  return cfg;
}

TEST(Tuner, TimesVerifiesAndCachesEveryAdmissibleTactic) {
  FP4MOE_REQUIRE_GPU();
  const MoeWeights w = seeded_weights(small_tp8_config(), 3);
  const MoeConfig& cfg = w.config;
  auto layer = uncached_layer(w);
  TuneOptions o;
  o.buckets = {4, 64, 256};
  o.iters = 3;
  // A wide margin: the heuristic's tactic is kept over faster finalists at most buckets, so that
  // the pairs (timed where FC1 kept it) are exercised.
  o.keep_heuristic_margin = 0.3;
  // Short turns (the defaults settle 300 ms a turn): the protocol, not its length, is tested.
  o.finalist_cycles = 2;
  o.finalist_turn_replays = 3;
  o.finalist_settle_ms = 2;
  // Every bucket has finalists (all candidates within 1000% of the fastest, six at most), so that
  // their checks below run at every bucket, whatever the timings.
  o.finalist_margin = 10;
  // What a caller is handed as each bucket finishes (fp4moe tune stores it then), and whether the
  // next bucket had started by then.
  std::vector<TuneResult> handed;
  std::vector<std::string> labels;  // the progress labels so far
  std::vector<bool> next_started;
  o.progress = [&](const std::string& what, double) { labels.push_back(what); };
  o.on_bucket = [&](const TuneResult& fc1, const TuneResult& fc2) {
    handed.push_back(fc1);
    handed.push_back(fc2);
    // The last label is this bucket's (its FC2 finalists or its pairs), none of the next bucket's yet.
    next_started.push_back(labels.empty() || labels.back().rfind("T=" + std::to_string(fc1.bucket) + " ", 0) != 0);
  };
  const std::vector<TuneResult> results = tune_layer(*layer, w, o);
  ASSERT_EQ(results.size(), 6u);  // 3 buckets x (FC1, FC2)
  ASSERT_EQ(handed.size(), results.size()) << "every bucket handed over once";
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(handed[i].bucket, results[i].bucket);
    EXPECT_EQ(handed[i].gemm.epilogue, i % 2 == 0 ? Epilogue::kSwiglu : Epilogue::kFinalize);
    ASSERT_EQ(handed[i].timed.size(), results[i].timed.size());
    EXPECT_EQ(handed[i].timed[0].tactic, results[i].timed[0].tactic);
    EXPECT_EQ(handed[i].timed[0].time_us, results[i].timed[0].time_us);
    EXPECT_EQ(handed[i].heuristic_kept, results[i].heuristic_kept);
  }
  for (bool started : next_started) EXPECT_FALSE(started) << "a bucket was handed over after the next one began";
  for (size_t ri = 0; ri < results.size(); ++ri) {
    const TuneResult& r = results[ri];
    size_t compiled = 0;
    for (const Tactic& t : compiled_w4a16_tactics()) compiled += t.epilogue == r.gemm.epilogue;
    EXPECT_EQ(r.timed.size() + r.rejected.size(), compiled) << "every compiled tactic is accounted for";
    ASSERT_FALSE(r.timed.empty());
    // The finalists (finalist_cycles x finalist_turn_replays timed replays each, time_us their
    // median) first, the others (first pass only) after them; fastest first within each, except
    // that the heuristic's tactic leads when within the margin of the fastest.
    auto finalist = [](const TimedTactic& c) { return !c.interleaved_us.empty(); };
    // FC2 is ranked with FC1's winner (results[ri - 1].timed[0]): where that runs both GEMMs
    // (small batch, fused), FC2's one candidate is its twin; where it does not, no FC2 candidate
    // may (its plan would bring another FC1).
    const bool fc1_together = r.gemm.epilogue == Epilogue::kFinalize && ri > 0 &&
                              runs_gemms_together(results[ri - 1].timed[0].tactic.family);
    if (r.gemm.epilogue == Epilogue::kFinalize && !fc1_together)
      for (const TimedTactic& c : r.timed)
        EXPECT_FALSE(runs_gemms_together(c.tactic.family)) << "T = " << r.bucket << ": " << format_tactic(c.tactic);
    if (fc1_together) {
      ASSERT_EQ(r.timed.size(), 1u) << "T = " << r.bucket;
      EXPECT_EQ(r.timed[0].tactic, with_epilogue(results[ri - 1].timed[0].tactic, Epilogue::kFinalize))
          << "T = " << r.bucket;
    } else {
      ASSERT_GE(r.timed.size(), 2u) << "T = " << r.bucket << ": one tactic timed, nothing compared";
      EXPECT_TRUE(finalist(r.timed[0]) && finalist(r.timed[1])) << "T = " << r.bucket << ": no finalists";
    }
    for (size_t i = 0; i < r.timed.size(); ++i) {
      const TimedTactic& c = r.timed[i];
      EXPECT_GT(c.first_pass_us, 0) << format_tactic(c.tactic);
      if (finalist(c)) {
        ASSERT_EQ(c.interleaved_us.size(), size_t(o.finalist_cycles * o.finalist_turn_replays)) << format_tactic(c.tactic);
        std::vector<double> sorted = c.interleaved_us;
        std::sort(sorted.begin(), sorted.end());
        EXPECT_EQ(c.time_us, sorted[sorted.size() / 2]);
        EXPECT_GT(sorted[0], 0);
      } else {
        EXPECT_EQ(c.time_us, c.first_pass_us);
      }
      if (i > 0) EXPECT_FALSE(finalist(c) && !finalist(r.timed[i - 1])) << "a finalist after a first pass";
    }
    // (A winner in a pair swapped places with the GEMM's own winner, which may be slower than
    // timed[2].)
    const size_t from = r.heuristic_kept ? 2 : r.won_in_pair ? 3 : 1;
    for (size_t i = from; i < r.timed.size(); ++i)
      if (finalist(r.timed[i - 1]) == finalist(r.timed[i])) EXPECT_LE(r.timed[i - 1].time_us, r.timed[i].time_us);
    // Where there were finalists, the incumbent was among them: the heuristic's FC1, and the FC2
    // that FC1's winner was timed with (ranking.h: fc2_incumbent).
    const LayerPlan hp = layer->plan_for_heuristic(r.bucket);
    const Tactic incumbent =
        r.gemm.epilogue == Epilogue::kSwiglu
            ? hp.fc1
            : fc2_incumbent(hp.fc2, results[ri - 1].timed[0].tactic,
                            heuristic_tactic(cfg, r.bucket, layer->gpu(), Epilogue::kFinalize));
    if (finalist(r.timed[0]))
      for (const TimedTactic& c : r.timed)
        if (c.tactic == incumbent) EXPECT_TRUE(finalist(c)) << format_tactic(c.tactic);
    if (r.heuristic_kept) {
      ASSERT_GE(r.timed.size(), 2u);
      EXPECT_EQ(r.timed[0].tactic, incumbent);
      // (No faster than timed[1]; a tie keeps it too: event times step by ~0.5 us.)
      EXPECT_GE(r.timed[0].time_us, r.timed[1].time_us);
      EXPECT_LE(r.timed[0].time_us, r.timed[1].time_us * (1 + o.keep_heuristic_margin));
    }
    // Rejected only by the model or set aside by the pairing rule: every compiled tactic the model
    // admits is right on a poisoned workspace and reproducible after its replays.
    for (const auto& x : r.rejected) {
      std::printf("rejected %s: %s\n", format_tactic(x.tactic).c_str(), x.reason.c_str());
      EXPECT_TRUE(x.reason.rfind("resource model: ", 0) == 0 || x.reason.find("runs both GEMMs") != std::string::npos)
          << format_tactic(x.tactic) << " at T = " << r.bucket << ": " << x.reason;
    }
  }
  // The pairs: timed exactly where the rule says (FC1 kept its heuristic tactic over a faster
  // finalist, and the pairs hold a plan its own ranking did not time), each in turns; the cache
  // gets the GEMMs' own winners or a pair faster by more than the margin.
  auto finalist = [](const TimedTactic& c) { return !c.interleaved_us.empty(); };
  auto together = [](const TuneResult& r) {
    for (size_t k = 0; k < std::min<size_t>(2, r.timed.size()); ++k)
      if (runs_gemms_together(r.timed[k].tactic.family)) return true;
    return false;
  };
  int with_pairs = 0;  // buckets that timed pairs (whether any does depends on the timings)
  for (size_t i = 0; i + 1 < results.size(); i += 2) {
    const TuneResult& f1 = results[i];
    const TuneResult& f2 = results[i + 1];
    const LayerPlan hp = layer->plan_for_heuristic(f1.bucket);
    EXPECT_TRUE(f1.pairs.empty()) << "FC2's result carries the pairs";
    EXPECT_EQ(handed[i + 1].pairs.size(), f2.pairs.size());
    if (f2.pairs.empty()) {
      const bool c1 = f1.heuristic_kept && f1.timed.size() >= 2 && finalist(f1.timed[1]);
      const bool c2 = f2.heuristic_kept && f2.timed.size() >= 2 && finalist(f2.timed[1]);
      EXPECT_FALSE(c1 && !together(f1) && !together(f2) && (c2 || !(f2.timed[0].tactic == hp.fc2)))
          << "T = " << f1.bucket << ": pairs to time, none timed";
      EXPECT_FALSE(f1.won_in_pair || f2.won_in_pair);
      continue;
    }
    ++with_pairs;
    const TimedPlan& base = f2.pairs[0];
    EXPECT_EQ(base.fc1, hp.fc1) << "pairs only where FC1 kept the heuristic's tactic";
    EXPECT_TRUE(f2.pairs.size() == 2 || f2.pairs.size() == 4);
    const TimedPlan* chosen = nullptr;
    for (const TimedPlan& p : f2.pairs) {
      ASSERT_EQ(p.interleaved_us.size(), size_t(o.finalist_cycles * o.finalist_turn_replays));
      std::vector<double> sorted = p.interleaved_us;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(p.time_us, sorted[sorted.size() / 2]);
      EXPECT_GT(sorted[0], 0);
      if (p.fc1 == f1.timed[0].tactic && p.fc2 == f2.timed[0].tactic) chosen = &p;
      std::printf("T = %lld pair %s + %s: %.1f us\n", static_cast<long long>(f1.bucket), format_tactic(p.fc1).c_str(),
                  format_tactic(p.fc2).c_str(), p.time_us);
    }
    ASSERT_NE(chosen, nullptr) << "the cached winners are one of the pairs";
    if (chosen != &base) EXPECT_LT(chosen->time_us * (1 + o.keep_heuristic_margin), base.time_us);
    EXPECT_EQ(f1.won_in_pair, !(f1.timed[0].tactic == base.fc1));
    EXPECT_EQ(f2.won_in_pair, !(f2.timed[0].tactic == base.fc2));
  }
  std::printf("pairs timed at %d of %zu buckets\n", with_pairs, results.size() / 2);
  const CacheIdentity& id = layer->cache_identity();
  const std::string path = (test::temp_dir() / "tuner_cache.json").string();
  std::filesystem::remove(path);
  auto cache = std::make_shared<TuningCache>(TuningCache::merge_into_file(path, cache_entries(results, id)));
  layer->set_tuning_cache(cache);
  EXPECT_EQ(layer->plan_source(3), "cache/cache");
  EXPECT_EQ(layer->plan_for(3).fc1, results[0].timed[0].tactic);
  EXPECT_EQ(layer->plan_for(300).fc2, results[5].timed[0].tactic);
  EXPECT_EQ(layer->plan_source(16384), "heuristic/heuristic");  // bucket 16384 untuned
  // A small-batch FC1 entry without its FC2 partner: the plan falls back to the heuristic's, and
  // plan_source says so (it reported "cache" for the plan it did not give).
  CacheEntry gemv_fc1{id, fc1_key(cfg), 2, Tactic{Family::kW4a16Gemv, 16, 8, 256, 2, 6, 1, Epilogue::kSwiglu, false}, 1.0, {}, 0};
  CacheEntry mma_fc2{id, fc2_key(cfg), 2, Tactic{Family::kW4a16Mma, 128, 8, 256, 2, 4, 1, Epilogue::kFinalize, false}, 1.0, {}, 0};
  const std::string mixed = (test::temp_dir() / "tuner_cache_mixed.json").string();
  std::filesystem::remove(mixed);
  layer->set_tuning_cache(std::make_shared<TuningCache>(TuningCache::merge_into_file(mixed, {gemv_fc1, mma_fc2})));
  EXPECT_EQ(layer->plan_for(2).fc1, layer->plan_for_heuristic(2).fc1);
  EXPECT_EQ(layer->plan_for(2).fc2, layer->plan_for_heuristic(2).fc2);
  EXPECT_EQ(layer->plan_source(2), "heuristic/heuristic");
}

// What the tuner and a cached plan are refused: weights of another layer (before any GPU work),
// and a cache entry this layer cannot run though its kernel is compiled - a small-batch pair for
// 512 experts, whose in-kernel routing takes 256 (the resource model says so; before, every
// forward call at that bucket threw).
TEST(Tuner, ForeignWeightsAndEntriesTheLayerCannotRunAreRefused) {
  FP4MOE_REQUIRE_GPU();
  MoeConfig cfg = MoeConfig::glm5_tp8();
  cfg.num_experts = 512;
  cfg.hidden = 256;
  cfg.intermediate = cfg.shared_intermediate = 64;
  const MoeWeights w = seeded_weights(cfg, 5);
  auto layer = uncached_layer(w);
  MoeConfig other_cfg = cfg;
  other_cfg.intermediate = other_cfg.shared_intermediate = 128;
  const MoeWeights other = seeded_weights(other_cfg, 5);
  TuneOptions o;
  o.buckets = {2};
  try {
    tune_layer(*layer, other, o);
    ADD_FAILURE() << "tuned a layer against another layer's weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the layer must be made from these weights"), std::string::npos) << e.what();
  }
  const CacheIdentity& id = layer->cache_identity();
  const Tactic gemv{Family::kW4a16Gemv, 16, 8, 256, 2, 6, 1, Epilogue::kSwiglu, false};
  Tactic gemv_fc2 = gemv;
  gemv_fc2.epilogue = Epilogue::kFinalize;
  ASSERT_FALSE(model_resources(gemv, layer->gpu(), DataType::kNvfp4, gemm_model_options(cfg, 2, Epilogue::kSwiglu)).fits);
  const std::string path = (test::temp_dir() / "tuner_cache_unrunnable.json").string();
  std::filesystem::remove(path);
  layer->set_tuning_cache(std::make_shared<TuningCache>(TuningCache::merge_into_file(
      path, {CacheEntry{id, fc1_key(cfg), 2, gemv, 1.0, {}, 0}, CacheEntry{id, fc2_key(cfg), 2, gemv_fc2, 1.0, {}, 0}})));
  EXPECT_EQ(layer->plan_source(2), "heuristic/heuristic");
  EXPECT_EQ(layer->plan_for(2).fc1, layer->plan_for_heuristic(2).fc1);
  // And the layer runs at that bucket with the plan it chose, right.
  const std::vector<float> hidden = make_hidden_states(2, cfg.hidden, 11);
  const std::vector<float> logits = make_router_logits(2, cfg.num_experts, 11);
  const GpuLayerRun run = run_gpu_layer(*layer, hidden, logits, 2, 0);
  std::vector<float> rounded(hidden.size());
  for (size_t i = 0; i < hidden.size(); ++i) rounded[i] = round_to_bf16(hidden[i]);
  const std::vector<double> ref = moe_reference(w, rounded, 2, run.routing);  // as the GPU routed
  EXPECT_TRUE(test::within_tolerance(test::compare(test::bf16_to_double(run.out), ref, cfg.hidden)));
}

// The output check rejects, and names, a candidate whose rows differ from the heuristic plan's:
// with the row bound at 1e-9 every tactic whose fp32 summation order differs from the
// heuristic's is wrong by that bound (two correct plans differ by ~1e-3), while the heuristic's
// own tactic, whose plan is the heuristic plan, passes. With correct kernels the default bound
// rejects nothing, so only this shows the check can reject at all. Orders differ in FC1 (stream-K
// cuts, wgmma against mma.sync) and reach the output through the activations' bf16 rounding,
// a flip in ~1e-5 of them: T = 256 gives each such candidate ~5e5 activations.
TEST(Tuner, RejectsACandidateWhoseRowsDifferFromTheHeuristicPlan) {
  FP4MOE_REQUIRE_GPU();
  const MoeWeights w = seeded_weights(small_tp8_config(), 7);
  auto layer = uncached_layer(w);
  TuneOptions o;
  o.buckets = {256};
  o.iters = 1;
  o.finalist_cycles = 0;
  o.time_pairs = false;
  o.max_row_rel_error = 1e-9;
  const std::vector<TuneResult> results = tune_layer(*layer, w, o);
  ASSERT_EQ(results.size(), 2u);
  const LayerPlan hp = layer->plan_for_heuristic(256);
  int differing = 0;  // over both GEMMs: a GEMM's tactics may all sum in the heuristic's order
  for (const TuneResult& r : results) {
    const Tactic incumbent = r.gemm.epilogue == Epilogue::kSwiglu ? hp.fc1 : hp.fc2;
    EXPECT_TRUE(std::any_of(r.timed.begin(), r.timed.end(), [&](const TimedTactic& c) { return c.tactic == incumbent; }))
        << format_tactic(incumbent) << ": the heuristic's own tactic was rejected";
    int here = 0;
    for (const auto& x : r.rejected) here += x.reason.find("row differs from the heuristic plan's") != std::string::npos;
    std::printf("%s: %zu timed, %d rejected as differing from the heuristic plan\n",
                r.gemm.epilogue == Epilogue::kSwiglu ? "FC1" : "FC2", r.timed.size(), here);
    differing += here;
  }
  EXPECT_GT(differing, 0) << "no candidate rejected for its rows";
}

}  // namespace
}  // namespace fp4moe
