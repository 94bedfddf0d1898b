// How the tuner ranks a GEMM's candidates once they are timed (tuner.cu does the timing, this
// decides; host code, so that the rules are tested without a GPU).
#pragma once

#include <cstddef>
#include <vector>

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

}  // namespace fp4moe
