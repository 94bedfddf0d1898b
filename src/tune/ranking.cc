// The tuner's ranking rules (see ranking.h).
#include "tune/ranking.h"

#include <algorithm>
#include <numeric>
#include <utility>  // std::swap

#include "common/median.h"
#include "fp4moe/error.h"
#include "fp4moe/heuristic.h"
#include "fp4moe/resource_model.h"

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

std::vector<Tactic> admissible_candidates(const std::vector<Tactic>& compiled, Epilogue ep, const MoeConfig& cfg,
                                          int64_t tokens, const GpuSpec& gpu, std::vector<RejectedTactic>& rejected) {
  const Epilogue other = ep == Epilogue::kSwiglu ? Epilogue::kFinalize : Epilogue::kSwiglu;
  std::vector<Tactic> ok;
  for (const Tactic& t : compiled) {
    if (t.epilogue != ep) continue;
    ResourceReport rep = model_resources(t, gpu, DataType::kNvfp4, gemm_model_options(cfg, tokens, ep));
    if (rep.fits && runs_gemms_together(t.family)) {
      const Tactic twin = with_epilogue(t, other);
      rep = model_resources(twin, gpu, DataType::kNvfp4, gemm_model_options(cfg, tokens, other));
      if (!rep.fits) rep.reason = "its twin " + format_tactic(twin) + " for the other GEMM: " + rep.reason;
    }
    if (rep.fits) ok.push_back(t);
    else rejected.push_back({t, "resource model: " + rep.reason});
  }
  return ok;
}

std::vector<Tactic> fc2_candidates(const std::vector<Tactic>& candidates, const Tactic& fc1_winner,
                                   std::vector<RejectedTactic>& rejected) {
  if (runs_gemms_together(fc1_winner.family)) {
    // The twin alone, whether or not FC2's own list holds it (a model verdict there is FC1's too).
    const Tactic twin = with_epilogue(fc1_winner, Epilogue::kFinalize);
    for (const Tactic& t : candidates)
      if (!(t == twin))
        rejected.push_back({t, "FC1's winner " + format_tactic(fc1_winner) + " runs both GEMMs: FC2 is its twin"});
    return {twin};
  }
  std::vector<Tactic> out;
  for (const Tactic& t : candidates)
    if (runs_gemms_together(t.family))
      rejected.push_back({t, "runs both GEMMs, and FC1's winner " + format_tactic(fc1_winner) +
                                 " does not: FC1's ranking timed this plan whole and passed over it"});
    else
      out.push_back(t);
  return out;
}

Tactic fc2_incumbent(const Tactic& heuristic_fc2, const Tactic& fc1_winner, const Tactic& separate_fc2) {
  if (runs_gemms_together(fc1_winner.family)) return with_epilogue(fc1_winner, Epilogue::kFinalize);
  return runs_gemms_together(heuristic_fc2.family) ? separate_fc2 : heuristic_fc2;
}

namespace {

// timed[1], where the heuristic's tactic was kept over it (a finalist, faster in the same turns).
const Tactic* kept_over(const TuneResult& r) {
  if (!r.heuristic_kept || r.timed.size() < 2 || r.timed[1].interleaved_us.empty()) return nullptr;
  return &r.timed[1].tactic;
}

}  // namespace

std::vector<TimedPlan> pairs_to_time(const TuneResult& fc1, const TuneResult& fc2, const Tactic& heuristic_fc2) {
  const Tactic* c1 = kept_over(fc1);  // non-null: fc1.timed holds two at least
  if (c1 == nullptr || fc2.timed.empty()) return {};
  const Tactic& w1 = fc1.timed[0].tactic;
  const Tactic& w2 = fc2.timed[0].tactic;
  const Tactic* c2 = kept_over(fc2);
  for (const Tactic* t : {&w1, c1, &w2, c2})
    if (t != nullptr && runs_gemms_together(t->family)) return {};
  if (c2 == nullptr && w2 == heuristic_fc2) return {};
  std::vector<TimedPlan> out = {{w1, w2, 0, {}}, {*c1, w2, 0, {}}};
  if (c2 != nullptr) {
    out.push_back({w1, *c2, 0, {}});
    out.push_back({*c1, *c2, 0, {}});
  }
  return out;
}

size_t choose_pair(std::vector<TimedPlan> pairs, TuneResult& fc1, TuneResult& fc2, double keep_margin) {
  FP4MOE_CHECK(!pairs.empty() && !fc1.timed.empty() && !fc2.timed.empty(), "tuning: no pairs to choose from");
  FP4MOE_CHECK(pairs[0].fc1 == fc1.timed[0].tactic && pairs[0].fc2 == fc2.timed[0].tactic,
               "tuning: the first pair must be the winners' plan");
  for (TimedPlan& p : pairs) {
    FP4MOE_CHECK(!p.interleaved_us.empty(), "tuning: the pair ", format_tactic(p.fc1), " + ", format_tactic(p.fc2),
                 " has no timing");
    p.time_us = median(p.interleaved_us);
  }
  size_t best = 0;
  for (size_t i = 1; i < pairs.size(); ++i)
    if (pairs[i].time_us < pairs[best].time_us) best = i;
  if (pairs[0].time_us <= pairs[best].time_us * (1 + keep_margin)) best = 0;
  // A changed GEMM's tactic is its timed[1] (pairs_to_time took it from there); both are
  // checked before either result changes.
  auto changes = [](const TuneResult& r, const Tactic& t) {
    if (r.timed[0].tactic == t) return false;
    FP4MOE_CHECK(r.timed.size() >= 2 && r.timed[1].tactic == t, "tuning: ", format_tactic(t),
                 " won in a pair but is not the runner-up of its GEMM");
    return true;
  };
  const bool change1 = changes(fc1, pairs[best].fc1), change2 = changes(fc2, pairs[best].fc2);
  auto adopt = [](TuneResult& r) {
    std::swap(r.timed[0], r.timed[1]);
    r.won_in_pair = true;
    r.heuristic_kept = false;
  };
  if (change1) adopt(fc1);
  if (change2) adopt(fc2);
  fc2.pairs = std::move(pairs);
  return best;
}

}  // namespace fp4moe
