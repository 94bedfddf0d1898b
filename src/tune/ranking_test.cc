// The tuner's ranking rules: which first passes are timed again, and how the finalists'
// interleaved medians, the other candidates' first passes and the heuristic's margin order the
// result.
#include "tune/ranking.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fp4moe/error.h"
#include "fp4moe/heuristic.h"
#include "fp4moe/hw.h"
#include "fp4moe/resource_model.h"

namespace fp4moe {
namespace {

// Distinct tactics, told apart by their stage count.
Tactic tactic(int stages) { return Tactic{Family::kW4a16Wgmma, 256, 64, 64, stages, 20, 1, Epilogue::kSwiglu, false}; }

// A candidate's first pass and, for a finalist, its interleaved replays.
TimedTactic timed(int stages, double first_pass, std::vector<double> interleaved = {}) {
  return {tactic(stages), 0, first_pass, std::move(interleaved)};
}

std::vector<int> stages_of(const std::vector<TimedTactic>& v) {
  std::vector<int> out;
  for (const auto& c : v) out.push_back(c.tactic.stages);
  return out;
}

TEST(PickFinalists, TheFastestWithinTheMarginAndTheIncumbent) {
  const std::vector<TimedTactic> v = {timed(1, 130), timed(2, 100), timed(3, 107), timed(4, 109), timed(5, 104)};
  // Within 8% of 100: 2, 5, 3 (fastest first); 4 (109) and 1 (130) are not.
  EXPECT_EQ(pick_finalists(v, tactic(9), 0.08, 6), (std::vector<size_t>{1, 4, 2}));
  // The incumbent joins wherever its first timing put it, and keeps its place within the cap.
  EXPECT_EQ(pick_finalists(v, tactic(1), 0.08, 6), (std::vector<size_t>{1, 4, 2, 0}));
  EXPECT_EQ(pick_finalists(v, tactic(1), 0.08, 2), (std::vector<size_t>{1, 0}));
  EXPECT_EQ(pick_finalists(v, tactic(9), 0.08, 2), (std::vector<size_t>{1, 4}));
  // Nobody within the margin and no incumbent timed: nothing to compare.
  EXPECT_TRUE(pick_finalists(v, tactic(9), 0.0, 6).empty());
  EXPECT_EQ(pick_finalists(v, tactic(2), 0.0, 6).size(), 0u);  // the incumbent alone
  EXPECT_EQ(pick_finalists(v, tactic(1), 0.0, 6), (std::vector<size_t>{1, 0}));
  EXPECT_THROW(pick_finalists(v, tactic(1), 0.08, 1), Error);
}

TEST(RankTimed, FinalistsByMedianAheadOfFirstPasses) {
  // 2 won its first pass (after the idle of its verification); interleaved, it is slower than 3.
  std::vector<TimedTactic> v = {timed(1, 103), timed(2, 96, {112, 111, 96}), timed(3, 100, {100, 101, 99}),
                                timed(4, 98)};
  EXPECT_FALSE(rank_timed(v, tactic(9), 0.025));
  // 3 (median 100), 2 (111): then the first passes 4 (98) and 1 (103), never ahead of a finalist.
  EXPECT_EQ(stages_of(v), (std::vector<int>{3, 2, 4, 1}));
  EXPECT_DOUBLE_EQ(v[0].time_us, 100);
  EXPECT_DOUBLE_EQ(v[1].time_us, 111);
  EXPECT_DOUBLE_EQ(v[2].time_us, 98);
}

TEST(RankTimed, TheIncumbentLeadsWithinTheMarginOfTheFastestFinalist) {
  std::vector<TimedTactic> v = {timed(1, 100, {100, 100, 100}), timed(2, 102, {102, 101, 102})};
  EXPECT_TRUE(rank_timed(v, tactic(2), 0.025));
  EXPECT_EQ(stages_of(v), (std::vector<int>{2, 1}));
  v = {timed(1, 100, {100, 100, 100}), timed(2, 99, {103, 103, 104})};
  EXPECT_FALSE(rank_timed(v, tactic(2), 0.025));
  EXPECT_EQ(stages_of(v), (std::vector<int>{1, 2}));
  // An incumbent that was no finalist is not compared with finalists' replays (it shared none).
  v = {timed(1, 100, {100, 100, 100}), timed(3, 100, {100.5, 100.5, 100.5}), timed(2, 101)};
  EXPECT_FALSE(rank_timed(v, tactic(2), 0.025));
  EXPECT_EQ(stages_of(v), (std::vector<int>{1, 3, 2}));
  // Without finalists every candidate has its first pass only: the margin applies among them.
  v = {timed(1, 100), timed(2, 102)};
  EXPECT_TRUE(rank_timed(v, tactic(2), 0.025));
  EXPECT_EQ(stages_of(v), (std::vector<int>{2, 1}));
}

// A GEMM's result as rank_timed leaves it: `kept` says the heuristic's tactic leads over a faster
// finalist (timed[1]).
TuneResult ranked(std::vector<TimedTactic> timed, bool kept) {
  TuneResult r;
  r.timed = std::move(timed);
  r.heuristic_kept = kept;
  return r;
}

TEST(PairsToTime, OnlyWhereFc1KeptItsHeuristicTacticOverAFasterFinalist) {
  // FC1: heuristic 1 kept over the faster 2; FC2: heuristic 5 kept over the faster 6.
  const TuneResult fc1 = ranked({timed(1, 100, {100}), timed(2, 99, {99}), timed(3, 120)}, true);
  const TuneResult fc2 = ranked({timed(5, 100, {100}), timed(6, 99, {98.5})}, true);
  auto plans = [](const std::vector<TimedPlan>& v) {
    std::vector<std::pair<int, int>> out;
    for (const auto& p : v) out.push_back({p.fc1.stages, p.fc2.stages});
    return out;
  };
  using P = std::vector<std::pair<int, int>>;
  EXPECT_EQ(plans(pairs_to_time(fc1, fc2, tactic(5))), (P{{1, 5}, {2, 5}, {1, 6}, {2, 6}}));
  // FC2 won outright (or kept its heuristic tactic as the fastest): (c1, w2) is new only where
  // w2 is not the heuristic's FC2, with which FC1's ranking timed c1.
  const TuneResult fc2_won = ranked({timed(6, 98, {98}), timed(5, 100, {101})}, false);
  EXPECT_EQ(plans(pairs_to_time(fc1, fc2_won, tactic(5))), (P{{1, 6}, {2, 6}}));
  const TuneResult fc2_fastest = ranked({timed(5, 98, {98}), timed(6, 100, {101})}, false);
  EXPECT_TRUE(pairs_to_time(fc1, fc2_fastest, tactic(5)).empty());
  // FC1 not kept over anything: its winner was the fastest, or a challenger won outright.
  EXPECT_TRUE(pairs_to_time(ranked({timed(2, 99, {99}), timed(1, 100, {100})}, false), fc2, tactic(5)).empty());
  // FC1's runner-up timed in its first pass only (no turns shared with the heuristic's).
  EXPECT_TRUE(pairs_to_time(ranked({timed(1, 100, {100}), timed(2, 99)}, true), fc2, tactic(5)).empty());
  // A family that runs both GEMMs has its partner fixed: in any of the four places.
  for (int place = 0; place < 4; ++place) {
    TuneResult f1 = fc1, f2 = fc2;
    (place < 2 ? f1 : f2).timed[place % 2].tactic.family = Family::kW4a16Gemv;
    EXPECT_TRUE(pairs_to_time(f1, f2, tactic(5)).empty()) << "place " << place;
  }
}

TEST(ChoosePair, TheWinnersUnlessAPairBeatsThemByTheMargin) {
  const TuneResult fc1 = ranked({timed(1, 100, {100}), timed(2, 99, {99})}, true);
  const TuneResult fc2 = ranked({timed(5, 100, {100}), timed(6, 99, {98.5})}, true);
  auto pairs = [](std::vector<std::vector<double>> us) {
    std::vector<TimedPlan> v = {{tactic(1), tactic(5), 0, us[0]}, {tactic(2), tactic(5), 0, us[1]},
                                {tactic(1), tactic(6), 0, us[2]}, {tactic(2), tactic(6), 0, us[3]}};
    return v;
  };
  // (2, 6) 3% faster than the winners' plan: both GEMMs take their runner-up.
  TuneResult a = fc1, b = fc2;
  EXPECT_EQ(choose_pair(pairs({{100, 101, 100}, {99, 99, 99}, {98.5, 99, 98}, {97, 97.1, 96.9}}), a, b, 0.025), 3u);
  EXPECT_EQ(a.timed[0].tactic, tactic(2));
  EXPECT_EQ(a.timed[1].tactic, tactic(1));
  EXPECT_EQ(b.timed[0].tactic, tactic(6));
  EXPECT_TRUE(a.won_in_pair && b.won_in_pair);
  EXPECT_FALSE(a.heuristic_kept || b.heuristic_kept);
  ASSERT_EQ(b.pairs.size(), 4u);
  EXPECT_DOUBLE_EQ(b.pairs[0].time_us, 100);
  EXPECT_DOUBLE_EQ(b.pairs[3].time_us, 97);
  // (2, 5) 3% faster: FC1 changes, FC2 keeps its tactic and its flags.
  a = fc1;
  b = fc2;
  EXPECT_EQ(choose_pair(pairs({{100}, {97}, {99}, {98}}), a, b, 0.025), 1u);
  EXPECT_EQ(a.timed[0].tactic, tactic(2));
  EXPECT_EQ(b.timed[0].tactic, tactic(5));
  EXPECT_TRUE(b.heuristic_kept);
  EXPECT_FALSE(b.won_in_pair);
  // The fastest pair only 2% ahead: the winners stay.
  a = fc1;
  b = fc2;
  EXPECT_EQ(choose_pair(pairs({{100}, {99}, {99}, {98}}), a, b, 0.025), 0u);
  EXPECT_EQ(a.timed[0].tactic, tactic(1));
  EXPECT_EQ(b.timed[0].tactic, tactic(5));
  EXPECT_TRUE(a.heuristic_kept && b.heuristic_kept);
  EXPECT_FALSE(a.won_in_pair || b.won_in_pair);
  EXPECT_EQ(b.pairs.size(), 4u);
  // (1, 6) 3% faster: FC2 alone changes.
  a = fc1;
  b = fc2;
  EXPECT_EQ(choose_pair(pairs({{100}, {99}, {97}, {98}}), a, b, 0.025), 2u);
  EXPECT_EQ(a.timed[0].tactic, tactic(1));
  EXPECT_TRUE(a.heuristic_kept);
  EXPECT_FALSE(a.won_in_pair);
  EXPECT_EQ(b.timed[0].tactic, tactic(6));
  EXPECT_TRUE(b.won_in_pair);
  // Exactly at the margin the winners stay (as rank_timed keeps the heuristic's tactic there).
  a = fc1;
  b = fc2;
  EXPECT_EQ(choose_pair(pairs({{125}, {100}, {110}, {110}}), a, b, 0.25), 0u);
  EXPECT_EQ(a.timed[0].tactic, tactic(1));
  // A winning tactic that is not its GEMM's runner-up is an error, and neither result changes.
  a = fc1;
  b = ranked({timed(5, 100, {100}), timed(7, 101, {101}), timed(6, 99, {98.5})}, true);
  EXPECT_THROW(choose_pair(pairs({{100}, {97}, {99}, {96}}), a, b, 0.025), Error);
  EXPECT_EQ(a.timed[0].tactic, tactic(1));
  EXPECT_FALSE(a.won_in_pair);
  EXPECT_EQ(b.timed[0].tactic, tactic(5));
  // The first pair must be the winners' plan, and every pair timed.
  a = fc1;
  b = fc2;
  auto bad = pairs({{100}, {99}, {99}, {98}});
  std::swap(bad[0], bad[1]);
  EXPECT_THROW(choose_pair(bad, a, b, 0.025), Error);
  EXPECT_THROW(choose_pair(pairs({{100}, {}, {99}, {98}}), a, b, 0.025), Error);
}

TEST(Fc2Candidates, TheTwinOfATogetherWinnerElseNoneOfThoseFamilies) {
  const Tactic mma{Family::kW4a16Mma, 128, 8, 256, 4, 8, 1, Epilogue::kFinalize, false};
  const Tactic wgmma{Family::kW4a16Wgmma, 256, 64, 64, 4, 20, 1, Epilogue::kFinalize, false};
  const Tactic gemv{Family::kW4a16Gemv, 16, 8, 256, 2, 6, 1, Epilogue::kFinalize, false};
  const Tactic fused{Family::kW4a16Fused, 64, 8, 256, 3, 8, 1, Epilogue::kFinalize, false};
  const std::vector<Tactic> all = {mma, gemv, wgmma, fused};
  auto fc1 = [](const Tactic& t) { return with_epilogue(t, Epilogue::kSwiglu); };
  auto rejected_with = [](const std::vector<RejectedTactic>& r, const std::string& needle) {
    std::vector<Tactic> out;
    for (const auto& x : r) {
      EXPECT_NE(x.reason.find(needle), std::string::npos) << x.reason;
      out.push_back(x.tactic);
    }
    return out;
  };
  // A stream-K winner: the stream-K families only. Before, a gemv FC2 could win here - timed
  // with its own FC1 - and be cached beside the stream-K FC1, a plan the layer refuses.
  std::vector<RejectedTactic> rejected;
  EXPECT_EQ(fc2_candidates(all, fc1(mma), rejected), (std::vector<Tactic>{mma, wgmma}));
  EXPECT_EQ(rejected_with(rejected, "runs both GEMMs, and FC1's winner"), (std::vector<Tactic>{gemv, fused}));
  // A winner that runs both GEMMs: its twin alone, the others set aside.
  rejected.clear();
  EXPECT_EQ(fc2_candidates(all, fc1(gemv), rejected), (std::vector<Tactic>{gemv}));
  EXPECT_EQ(rejected_with(rejected, "runs both GEMMs: FC2 is its twin"), (std::vector<Tactic>{mma, wgmma, fused}));
  // The twin even where FC2's own list lacks it (FC1's ranking timed the pair).
  rejected.clear();
  EXPECT_EQ(fc2_candidates({mma}, fc1(fused), rejected), (std::vector<Tactic>{fused}));
  EXPECT_EQ(rejected.size(), 1u);
}

// On an H100 at glm5 T = 8 the small-batch family's FC1 (K = 6144) fits and its FC2 does not:
// FC2 stages the 9 slots' activations of K = 2048 whole (~296 KB). The FC1 candidate runs both
// GEMMs, so the model rejects it there by its twin's verdict, before any launch; at T = 1 both
// fit. The stream-K family, one GEMM a tactic, is judged for its own GEMM alone.
TEST(AdmissibleCandidates, AFamilyThatRunsBothGemmsIsJudgedByItsTwinToo) {
  const GpuSpec gpu = *find_known_gpu("h100");
  const MoeConfig cfg = MoeConfig::glm5();
  const Tactic gemv{Family::kW4a16Gemv, 16, 8, 256, 2, 6, 1, Epilogue::kSwiglu, false};
  const Tactic mma{Family::kW4a16Mma, 128, 8, 256, 4, 8, 1, Epilogue::kSwiglu, false};
  const Tactic mma_fc2 = with_epilogue(mma, Epilogue::kFinalize);
  const std::vector<Tactic> compiled = {gemv, mma, mma_fc2};
  ASSERT_TRUE(model_resources(gemv, gpu, DataType::kNvfp4, gemm_model_options(cfg, 8, Epilogue::kSwiglu)).fits)
      << "the premise: FC1's own verdict admits it";
  std::vector<RejectedTactic> rejected;
  EXPECT_EQ(admissible_candidates(compiled, Epilogue::kSwiglu, cfg, 8, gpu, rejected), (std::vector<Tactic>{mma}));
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].tactic, gemv);
  EXPECT_EQ(rejected[0].reason.rfind("resource model: its twin " +
                                         format_tactic(with_epilogue(gemv, Epilogue::kFinalize)) + " for the other GEMM: ",
                                     0),
            0u)
      << rejected[0].reason;
  rejected.clear();
  EXPECT_EQ(admissible_candidates(compiled, Epilogue::kSwiglu, cfg, 1, gpu, rejected), (std::vector<Tactic>{gemv, mma}));
  EXPECT_TRUE(rejected.empty());
  // FC2's list: only the finalize tactics are looked at; the gemv FC2 itself fails by its own verdict.
  EXPECT_EQ(admissible_candidates({with_epilogue(gemv, Epilogue::kFinalize), mma, mma_fc2}, Epilogue::kFinalize, cfg, 8,
                                  gpu, rejected),
            (std::vector<Tactic>{mma_fc2}));
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].reason.find("its twin"), std::string::npos) << rejected[0].reason;
}

TEST(Fc2Incumbent, TheFc2ThatFc1sWinnerWasTimedWith) {
  const Tactic mma{Family::kW4a16Mma, 128, 8, 256, 4, 8, 1, Epilogue::kFinalize, false};
  const Tactic mma16{Family::kW4a16Mma, 128, 16, 256, 2, 4, 1, Epilogue::kFinalize, false};
  const Tactic gemv{Family::kW4a16Gemv, 16, 8, 256, 2, 6, 1, Epilogue::kFinalize, false};
  const Tactic fused{Family::kW4a16Fused, 64, 8, 256, 3, 8, 1, Epilogue::kFinalize, false};
  auto fc1 = [](const Tactic& t) { return with_epilogue(t, Epilogue::kSwiglu); };
  // Neither runs both GEMMs: the heuristic's FC2.
  EXPECT_EQ(fc2_incumbent(mma, fc1(mma16), mma16), mma);
  // The heuristic's plan is fused and FC1's winner a stream-K tactic: the fused FC2 is no
  // candidate, so the FC2 every stream-K FC1 candidate was timed with keeps its margin.
  EXPECT_EQ(fc2_incumbent(fused, fc1(mma), mma16), mma16);
  // FC1's winner runs both GEMMs: its twin, whatever the heuristic's plan was.
  EXPECT_EQ(fc2_incumbent(fused, fc1(gemv), mma16), gemv);
  EXPECT_EQ(fc2_incumbent(mma, fc1(fused), mma16), fused);
  // And the ranking then keeps it over a challenger inside the margin.
  std::vector<TimedTactic> v = {{mma, 0, 99.5, {99.5}}, {mma16, 0, 100, {100}}};
  EXPECT_TRUE(rank_timed(v, fc2_incumbent(fused, fc1(mma), mma16), 0.025));
  EXPECT_EQ(v.front().tactic, mma16);
}

TEST(RankTimed, ACandidateWithoutATimingIsAnError) {
  std::vector<TimedTactic> v = {timed(1, 0)};
  EXPECT_THROW(rank_timed(v, tactic(1), 0.025), Error);
}

}  // namespace
}  // namespace fp4moe
