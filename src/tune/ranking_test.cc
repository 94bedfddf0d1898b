// The tuner's ranking rules: which first-pass timings are timed again, and how the finalists'
// medians, the one-timing candidates and the heuristic's margin order the result.
#include "tune/ranking.h"

#include <gtest/gtest.h>

#include "fp4moe/error.h"

namespace fp4moe {
namespace {

// Distinct tactics, told apart by their stage count.
Tactic tactic(int stages) { return Tactic{Family::kW4a16Wgmma, 256, 64, 64, stages, 20, 1, Epilogue::kSwiglu, false}; }

TimedTactic timed(int stages, std::vector<double> us) { return {tactic(stages), 0, std::move(us)}; }

std::vector<int> stages_of(const std::vector<TimedTactic>& v) {
  std::vector<int> out;
  for (const auto& c : v) out.push_back(c.tactic.stages);
  return out;
}

TEST(PickFinalists, TheFastestWithinTheMarginAndTheIncumbent) {
  const std::vector<TimedTactic> v = {timed(1, {130}), timed(2, {100}), timed(3, {107}), timed(4, {109}),
                                      timed(5, {104})};
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

TEST(RankTimed, FinalistsByMedianAheadOfSingleTimings) {
  // 2 won its first timing on the fast side of a bimodal layer; over three it is slower than 3.
  std::vector<TimedTactic> v = {timed(1, {103}), timed(2, {96, 112, 111}), timed(3, {100, 101, 99}),
                                timed(4, {98})};
  EXPECT_FALSE(rank_timed(v, tactic(9), 0.025));
  // 3 (median 100), 2 (111): then the single timings 4 (98) and 1 (103), never ahead of a finalist.
  EXPECT_EQ(stages_of(v), (std::vector<int>{3, 2, 4, 1}));
  EXPECT_DOUBLE_EQ(v[0].time_us, 100);
  EXPECT_DOUBLE_EQ(v[1].time_us, 111);
}

TEST(RankTimed, TheIncumbentLeadsWithinTheMarginOfTheFastestFinalist) {
  std::vector<TimedTactic> v = {timed(1, {100, 100, 100}), timed(2, {102, 101, 102})};
  EXPECT_TRUE(rank_timed(v, tactic(2), 0.025));
  EXPECT_EQ(stages_of(v), (std::vector<int>{2, 1}));
  v = {timed(1, {100, 100, 100}), timed(2, {103, 103, 104})};
  EXPECT_FALSE(rank_timed(v, tactic(2), 0.025));
  EXPECT_EQ(stages_of(v), (std::vector<int>{1, 2}));
  // An incumbent timed once is not compared with finalists' medians (it shared no rounds).
  v = {timed(1, {100, 100, 100}), timed(3, {100.5, 100.5, 100.5}), timed(2, {101})};
  EXPECT_FALSE(rank_timed(v, tactic(2), 0.025));
  EXPECT_EQ(stages_of(v), (std::vector<int>{1, 3, 2}));
  // Without rounds everyone has one timing: the margin applies among them.
  v = {timed(1, {100}), timed(2, {102})};
  EXPECT_TRUE(rank_timed(v, tactic(2), 0.025));
  EXPECT_EQ(stages_of(v), (std::vector<int>{2, 1}));
}

TEST(RankTimed, ACandidateWithoutATimingIsAnError) {
  std::vector<TimedTactic> v = {timed(1, {})};
  EXPECT_THROW(rank_timed(v, tactic(1), 0.025), Error);
}

}  // namespace
}  // namespace fp4moe
