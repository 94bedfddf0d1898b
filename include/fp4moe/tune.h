// fp4moe/tune.h - the autotuner: for each GEMM of a layer and each token bucket, every tactic
// the resource model admits on the current GPU is launched, verified against the float64
// reference on a sample of tokens and, on every token, against the heuristic plan's output (a
// wrong result rejects it, like a failed launch), and timed
// in the whole layer as a CUDA graph (warm-up, median, L2 flushed before every replay). The
// finalists - the heuristic's tactic and the fastest within finalist_margin - are then timed
// again in turns, each long enough for the clock to settle, and ranked by those. Where FC1 kept
// the heuristic's tactic over a faster one, the two GEMMs' leading tactics are then timed
// together as whole plans (the pairs). Winners go to the tuning cache.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "fp4moe/layer.h"
#include "fp4moe/moe.h"
#include "fp4moe/tuning_cache.h"

namespace fp4moe {

struct TuneResult;

struct TuneOptions {
  std::vector<int64_t> buckets;  // default: token_buckets() up to 16384; others map to nearest_bucket()
  int warmup = 2;
  int iters = 15;
  uint64_t seed = 1;
  int verify_tokens = 4;  // tokens checked against the reference per bucket
  double max_rel_error = 1e-2;
  // Every token's row of a candidate's output against the heuristic plan's row of the same batch
  // (relative Frobenius difference): the reference, costly on the CPU, sees only verify_tokens.
  double max_row_rel_error = 2e-2;
  // A candidate replaces the heuristic's tactic only if it is faster by more than this fraction
  // (the run-to-run noise of the layer time): the cache never trades the heuristic for noise.
  double keep_heuristic_margin = 0.025;
  // The finalists (the heuristic's tactic and every candidate whose first timing is within
  // finalist_margin of the fastest one, at most max_finalists in all) are timed again together,
  // in turns: finalist_cycles cycles, each giving every finalist one
  // turn in an order shuffled per cycle - finalist_settle_ms of its replays untimed, then
  // finalist_turn_replays timed - and they rank by the median of their timed replays. On a GPU at
  // its power cap neither simpler protocol compares plans as they run in a long job: bursts of
  // their own, one after another, drift apart (on the H200 at glm5 T = 256-2048 one plan's bursts
  // fell 14% apart, the first, after the idle of its verification, fastest), and replays
  // interleaved one by one share one clock, so that a plan that draws more power is not slowed by
  // it (glm5 T = 2048: FC1 on the 192 x 176 tile 4.4% ahead so, level each plan run alone for
  // 1.5 s, where its clock stood 4-5% lower). Settled turns ranked as the long runs did.
  int finalist_cycles = 3;  // 0: no finalists; every candidate ranks by its first timing
  int finalist_turn_replays = 10;  // timed replays per finalist and turn
  double finalist_settle_ms = 300;  // untimed replays of a finalist at the start of each turn
  double finalist_margin = 0.08;
  int max_finalists = 6;
  // The pairs: one GEMM at a time (FC1 with the heuristic's FC2, then FC2 with FC1's winner)
  // misses two changes that each gain less than keep_heuristic_margin but more together. On an
  // H100 at glm5-tp8 T = 5-16 the 128-row 8-token tile in both GEMMs was 1.5-3.5% faster than the
  // heuristic's 256-row one, while neither GEMM's change alone cleared the 2.5% margin
  // (docs/HEURISTIC.md). So where FC1 kept the heuristic's tactic over a faster finalist c1, the
  // plans (winner FC1, winner FC2), (c1, winner FC2) and, where FC2 too kept its heuristic
  // tactic over a faster c2, (winner FC1, c2) and (c1, c2) are timed in turns as the finalists
  // are; a pair replaces the winners only by beating theirs by more than keep_heuristic_margin.
  // Not where a tactic runs both GEMMs (its partner is fixed), nor where FC2 has no such c2 and
  // its winner is the heuristic's FC2 (FC1's own turns timed exactly those two plans).
  // A pair's times are the whole plan's: a GEMM's timed entries keep the times of its own turns.
  bool time_pairs = true;
  // A candidate's call or replay still running after this many seconds is hung (a persistent
  // kernel waiting for a ticket that never comes): the GPU runs it for ever, and nothing - not
  // even freeing memory - can wait for it, so the tuning says which tactic on stderr and ends the
  // process (exit status 3), after the finished buckets went to on_bucket. 0: wait for ever. The
  // default is far above the largest bucket's layer on any supported GPU (glm5 T = 16384: ~17 ms
  // on an H100), compute-sanitizer's slowdown included.
  double call_deadline_s = 120;
  // Called before each measurement with a short label and the fraction done.
  std::function<void(const std::string&, double)> progress;
  // Called as each bucket's two results are final (FC2 ranked with FC1's winner before the pairs;
  // the pairs then timed the plans the winners make together), before the next bucket starts: a
  // caller that stores them then keeps every finished bucket of a run cut short (a tuning of
  // every bucket takes minutes; `fp4moe tune` writes the cache here).
  std::function<void(const TuneResult& fc1, const TuneResult& fc2)> on_bucket;
};

struct TimedTactic {
  Tactic tactic;
  double time_us = 0;        // what it ranks by: a finalist's median in its turns, else first_pass_us
  double first_pass_us = 0;  // the median of `iters` replays right after its verification
  std::vector<double> interleaved_us;  // a finalist's timed replays, its turns alternating with the
                                       // other finalists'
};

// A whole plan timed in turns with the bucket's other pairs (TuneOptions::time_pairs).
struct TimedPlan {
  Tactic fc1, fc2;
  double time_us = 0;                  // the median of interleaved_us
  std::vector<double> interleaved_us;  // its timed replays, its turns alternating with the other pairs'
};

struct RejectedTactic {
  Tactic tactic;
  std::string reason;  // the model's verdict, the launch error, or the wrong-result error
};

struct TuneResult {
  GemmKey gemm;
  int64_t bucket = 0;
  std::vector<TimedTactic> timed;  // the winner first, then the other finalists fastest first,
                                   // then the rest (first pass only) fastest first (a heuristic
                                   // tactic kept, or displaced by a pair, leads or follows out of
                                   // that order)
  bool heuristic_kept = false;     // the winner is the heuristic's tactic, within the margin of timed[1]
  bool won_in_pair = false;        // the winner was timed[1] of this GEMM's own ranking and won in a
                                   // pair (the two swapped places; heuristic_kept is then false)
  std::vector<RejectedTactic> rejected;
  std::vector<TimedPlan> pairs;    // FC2's result only: the pairs timed at this bucket, the
                                   // winners' plan first (empty where none were timed)
};

// Tunes both GEMMs of `layer` (whose weights are `weights`) at every bucket, on the layer's GPU
// (its entries belong under layer.cache_identity()).
std::vector<TuneResult> tune_layer(GpuMoeLayer& layer, const MoeWeights& weights, const TuneOptions& opt);

// Cache entries for the results: per GEMM and bucket timed[0] as the winner and timed[1] as the
// runner-up (where the heuristic's tactic was kept, the faster challenger; where a pair won, the
// heuristic's tactic it displaced), with their times in the GEMM's own turns.
std::vector<CacheEntry> cache_entries(const std::vector<TuneResult>& results, const CacheIdentity& id);

}  // namespace fp4moe
