// The tuner's ranking rules (see ranking.h).
#include "tune/ranking.h"

#include <algorithm>
#include <numeric>

#include "common/median.h"
#include "fp4moe/error.h"

namespace fp4moe {

std::vector<size_t> pick_finalists(const std::vector<TimedTactic>& timed, const Tactic& incumbent, double margin,
                                   int max_count) {
  FP4MOE_CHECK(margin >= 0 && max_count >= 2, "tuning: finalist margin must be >= 0 and at most >= 2 finalists");
  std::vector<size_t> order(timed.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto first = [&](size_t i) { return timed[i].first_pass_us; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return first(a) < first(b); });
  std::vector<size_t> out;
  const auto inc = std::find_if(order.begin(), order.end(), [&](size_t i) { return timed[i].tactic == incumbent; });
  // The incumbent's place is kept for it: the others fill what is left of max_count.
  const size_t others = static_cast<size_t>(max_count) - (inc != order.end() ? 1 : 0);
  size_t taken = 0;
  for (size_t i : order) {
    const bool is_incumbent = inc != order.end() && i == *inc;
    if (is_incumbent) out.push_back(i);
    else if (taken < others && first(i) <= first(order.front()) * (1 + margin)) {
      out.push_back(i);
      ++taken;
    }
  }
  if (out.size() < 2) out.clear();
  return out;
}

bool rank_timed(std::vector<TimedTactic>& timed, const Tactic& incumbent, double keep_margin) {
  for (TimedTactic& c : timed) {
    c.time_us = c.interleaved_us.empty() ? c.first_pass_us : median(c.interleaved_us);
    FP4MOE_CHECK(c.time_us > 0, "tuning: ", format_tactic(c.tactic), " has no timing");
  }
  auto finalist = [](const TimedTactic& c) { return !c.interleaved_us.empty(); };
  std::stable_sort(timed.begin(), timed.end(), [&](const TimedTactic& a, const TimedTactic& b) {
    if (finalist(a) != finalist(b)) return finalist(a);
    return a.time_us < b.time_us;
  });
  if (timed.empty()) return false;
  const auto inc = std::find_if(timed.begin(), timed.end(), [&](const TimedTactic& c) { return c.tactic == incumbent; });
  // Only a finalist can be kept over the fastest finalist (or over the fastest of all when none
  // was timed again): the incumbent is never compared with replays it was not interleaved with.
  if (inc == timed.begin() || inc == timed.end() || finalist(*inc) != finalist(timed.front())) return false;
  if (inc->time_us > timed.front().time_us * (1 + keep_margin)) return false;
  std::rotate(timed.begin(), inc, inc + 1);
  return true;
}

}  // namespace fp4moe
