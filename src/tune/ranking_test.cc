// The tuner's ranking rules: which first passes are timed again, and how the finalists'
// interleaved medians, the other candidates' first passes and the heuristic's margin order the
// result.
#include "tune/ranking.h"

#include <gtest/gtest.h>

#include "fp4moe/error.h"

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

TEST(RankTimed, ACandidateWithoutATimingIsAnError) {
  std::vector<TimedTactic> v = {timed(1, 0)};
  EXPECT_THROW(rank_timed(v, tactic(1), 0.025), Error);
}

}  // namespace
}  // namespace fp4moe
