// How the tuner ranks a GEMM's candidates once they are timed (tuner.cu does the timing, this
// decides; host code, so that the rules are tested without a GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fp4moe/hw.h"
#include "fp4moe/moe.h"
#include "fp4moe/tune.h"

namespace fp4moe {

// The candidates to time again, as indices into `timed` (first passes only so far), fastest
// first: every one within `margin` of the fastest first pass, at most `max_count` in all, the
// incumbent (the heuristic's tactic) always among them when it was timed - a challenger can only
// replace it by beating it in the same turns. Fewer than two finalists leave nothing to compare:
// the result is then empty.
std::vector<size_t> pick_finalists(const std::vector<TimedTactic>& timed, const Tactic& incumbent, double margin,
                                   int max_count);

// Each candidate's time_us becomes the median of its replays in turns (a finalist) or its
// first pass; `timed` is then ordered: the finalists fastest first, then the others fastest
// first - a first pass, timed under other conditions, never outranks a finalist. The incumbent
// moves to the front when it is within keep_margin of the fastest finalist (the return value
// says so).
bool rank_timed(std::vector<TimedTactic>& timed, const Tactic& incumbent, double keep_margin);

// The tactics of `compiled` of epilogue `ep` that the resource model admits for `cfg`'s GEMM of
// that epilogue at `tokens` on `gpu`; the others go to `rejected` with the model's verdict. A
// family that runs both GEMMs in one plan (runs_gemms_together) is judged for the other GEMM too,
// as its twin: glm5's small-batch FC1 fits at T = 8 where its FC2 (the 9 slots' activations of
// K = 2048, staged whole) does not, and would otherwise be launched only to fail.
std::vector<Tactic> admissible_candidates(const std::vector<Tactic>& compiled, Epilogue ep, const MoeConfig& cfg,
                                          int64_t tokens, const GpuSpec& gpu, std::vector<RejectedTactic>& rejected);

// FC2's candidates once FC1 is ranked. A family that runs both GEMMs (runs_gemms_together) is
// timed as a whole plan with its twin in FC1's ranking: where FC1's winner is such a tactic, FC2
// is its twin alone; where it is not, FC2 takes none of those families - their tactic would
// bring its own FC1 with it, a plan FC1's ranking already timed and passed over, and a cache
// holding FC1's winner beside it would be a plan the layer refuses (gpu_layer.cu). What is
// dropped goes to `rejected` with the reason.
std::vector<Tactic> fc2_candidates(const std::vector<Tactic>& candidates, const Tactic& fc1_winner,
                                   std::vector<RejectedTactic>& rejected);

// The tactic FC2's ranking keeps unless a challenger beats it by the margin: the FC2 that FC1's
// winner was timed with. That is its twin where the winner runs both GEMMs; the heuristic's FC2
// where neither runs both; and `separate_fc2` (the heuristic's FC2 of the families that run one
// GEMM, heuristic_tactic) where the heuristic's plan runs both GEMMs and FC1's winner does not -
// the heuristic's own FC2 is then not among the candidates, and without an incumbent FC2 would go
// to the fastest by noise.
Tactic fc2_incumbent(const Tactic& heuristic_fc2, const Tactic& fc1_winner, const Tactic& separate_fc2);

// The pairs (TuneOptions::time_pairs) to time once both GEMMs of a bucket are ranked: none unless
// FC1 kept the heuristic's tactic over a faster finalist c1 (its timed[1]); then the winners'
// plan (w1, w2) first and (c1, w2), and where FC2 too kept its heuristic tactic over a faster c2,
// (w1, c2) and (c1, c2). None where FC2 has no such c2 and w2 is the heuristic's FC2 (its FC1
// ranking compared exactly these two plans), nor where a tactic runs both GEMMs.
std::vector<TimedPlan> pairs_to_time(const TuneResult& fc1, const TuneResult& fc2, const Tactic& heuristic_fc2);

// Once the pairs have their interleaved replays: each one's time_us is their median; the
// winners' plan (pairs[0]) stays unless the fastest pair beats it by more than keep_margin. A
// GEMM whose tactic changes takes its timed[1] to the front (won_in_pair; heuristic_kept false).
// fc2.pairs keeps the pairs. Returns the index of the chosen pair.
size_t choose_pair(std::vector<TimedPlan> pairs, TuneResult& fc1, TuneResult& fc2, double keep_margin);

}  // namespace fp4moe
