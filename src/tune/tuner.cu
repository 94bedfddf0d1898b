// The autotuner (see include/fp4moe/tune.h).
//
// Per bucket T: one random batch of T tokens; the heuristic plan runs once to fix the routing
// (the same for every candidate: same logits) and the float64 reference is computed for the
// first verify_tokens tokens only. Each candidate's first call runs on a poisoned workspace and
// output, and its output after the timed replays must be that first call's, bit for bit. Then
// for FC1 each candidate runs with the heuristic FC2, for FC2 with the FC1 winner (one pass of
// coordinate descent). A candidate's time is that of the
// whole layer, timed as the benchmark times it: the median, over `iters` replays after `warmup`,
// of a CUDA graph of the layer, with the L2 flushed (untimed) before each replay.
//
// One timing per candidate ranks them only roughly: each is a burst of replays of its own, and
// on a GPU at its power cap the clock drifts from one burst to the next by more than tactics
// differ. The finalists (the heuristic's tactic and the fastest within finalist_margin) are
// timed again in turns (interleaved_event_times): cycles of one turn each in shuffled order, a
// turn first replaying the finalist untimed until the clock has settled to its own power draw,
// then timing it. They rank by those medians (ranking.h). The heuristic's choice stays unless a
// finalist beats it by more than keep_heuristic_margin: between repeated
// benchmark runs the layer time spreads by up to ~2% at T <= 16 on the H200, and several tactics
// lie within that of each other there.
//
// One pass of coordinate descent with a margin misses two changes that each gain less than the
// margin alone. Where FC1 kept the heuristic's tactic over a faster finalist, the pairs of the
// two GEMMs' leading tactics are timed as whole plans, in turns like the finalists
// (TuneOptions::time_pairs, ranking.h: pairs_to_time, choose_pair).
//
// Why the whole layer and not the GEMM alone: events between the stages break the programmatic
// dependent launch (PDL) overlap the kernels have in the graph, and the overlap differs between
// tactics. On the H200 at T = 1, FC1 timed alone ranked the 4-warp m128n8 tile 4% ahead of the
// 8-warp one, while in the graph the layer with the 8-warp tile was 4% faster.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/heuristic.h"
#include "fp4moe/hw.h"
#include "fp4moe/resource_model.h"
#include "fp4moe/synthetic.h"
#include "fp4moe/tune.h"
#include "fp4moe/tuning_cache.h"
#include "kernels/common/cuda_check.h"
#include "runtime/captured_graph.h"
#include "runtime/device_buffer.h"
#include "runtime/event_timing.h"
#include "runtime/gpu_wake.h"
#include "runtime/l2_flush.h"
#include "tune/output_check.h"
#include "tune/ranking.h"

namespace fp4moe {
namespace {


struct Batch {
  int64_t tokens = 0;
  DeviceBuffer hidden, logits, out;
  std::vector<std::vector<double>> reference_rows;  // [verify token][H]
  std::vector<uint16_t> heuristic_out;              // [T][H]: the heuristic plan's output
};

}  // namespace

std::vector<TuneResult> tune_layer(GpuMoeLayer& layer, const MoeWeights& w, const TuneOptions& opt) {
  const MoeConfig& cfg = layer.config();
  // The reference each candidate is held to is computed from `w`: weights of another layer would
  // make every plan, the heuristic's first, look wrong.
  FP4MOE_CHECK(w.config == cfg, "tune_layer: the weights' config ('", w.config.name,
               "') is not the GPU layer's ('", cfg.name, "'): the layer must be made from these weights");
  // Everything below (the batch, the stream, the flush buffer) lives on the layer's GPU, and the
  // resource model judges the candidates for that GPU: on a machine of mixed GPUs, GPU 0 is not
  // necessarily the one being tuned.
  const ScopedDevice on_device(layer.device());
  const GpuSpec& gpu = layer.gpu();
  std::vector<int64_t> buckets = opt.buckets;
  if (buckets.empty())
    for (int64_t b : token_buckets())
      if (b <= 16384) buckets.push_back(b);
  // Every option checked before the first candidate is timed (a bad margin found by the ranking
  // would end a run of minutes; a NaN one would rank wrongly and store it).
  FP4MOE_CHECK(opt.iters >= 1 && opt.warmup >= 0, "tuning: iters must be >= 1");
  FP4MOE_CHECK(opt.finalist_cycles >= 0 && opt.finalist_turn_replays >= 1 && opt.finalist_settle_ms >= 0,
               "tuning: finalist_cycles must be >= 0, finalist_turn_replays >= 1 and finalist_settle_ms >= 0");
  // Without verified rows every candidate would pass its check (and a wrong one be cached).
  FP4MOE_CHECK(opt.verify_tokens >= 1, "tuning: verify_tokens must be >= 1, got ", opt.verify_tokens);
  FP4MOE_CHECK(std::isfinite(opt.max_rel_error) && opt.max_rel_error > 0, "tuning: max_rel_error must be finite and > 0, got ",
               opt.max_rel_error);
  FP4MOE_CHECK(std::isfinite(opt.max_row_rel_error) && opt.max_row_rel_error > 0,
               "tuning: max_row_rel_error must be finite and > 0, got ", opt.max_row_rel_error);
  FP4MOE_CHECK(std::isfinite(opt.keep_heuristic_margin) && opt.keep_heuristic_margin >= 0 &&
                   opt.keep_heuristic_margin < 1,
               "tuning: keep_heuristic_margin must be in [0, 1), got ", opt.keep_heuristic_margin);
  FP4MOE_CHECK(std::isfinite(opt.finalist_margin) && opt.finalist_margin >= 0 && opt.max_finalists >= 2,
               "tuning: finalist_margin must be finite and >= 0 and max_finalists >= 2, got ", opt.finalist_margin,
               " and ", opt.max_finalists);
  for (int64_t& b : buckets) {
    FP4MOE_CHECK(b >= 1 && b <= (int64_t{1} << 24), "tuning: bucket ", b, " out of [1, 2^24]");
    b = nearest_bucket(b);  // what lookups find: a count between buckets would be stored, never read
  }
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  layer.reserve(*std::max_element(buckets.begin(), buckets.end()));
  L2Flusher flusher(gpu.l2_bytes);
  const OwnedStream s;

  std::vector<TuneResult> results;
  const double total = 2.0 * buckets.size();
  double done = 0;
  for (int64_t T : buckets) {
    Batch b;
    b.tokens = T;
    const std::vector<float> hidden = make_hidden_states(T, cfg.hidden, opt.seed + T);
    const std::vector<float> logits = make_router_logits(T, cfg.num_experts, opt.seed + T);
    std::vector<uint16_t> hb(hidden.size());
    for (size_t i = 0; i < hidden.size(); ++i) hb[i] = Bf16::from_float(hidden[i]).bits;
    b.hidden.resize(hb.size() * 2);
    b.logits.resize(logits.size() * 4);
    b.out.resize(T * cfg.hidden * 2);
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(b.hidden.get(), hb.data(), hb.size() * 2, cudaMemcpyHostToDevice, s));
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(b.logits.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice, s));
    // The routing (from the heuristic plan; every candidate routes the same) and the reference
    // for the first tokens.
    const LayerPlan heuristic = layer.plan_for_heuristic(T);
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(b.out.get(), 0xFF, b.out.bytes(), s));
    layer.forward(b.hidden.get<uint16_t>(), b.logits.get<float>(), T, b.out.get<uint16_t>(), s, &heuristic);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    b.heuristic_out.resize(T * cfg.hidden);
    FP4MOE_CUDA_CHECK(cudaMemcpy(b.heuristic_out.data(), b.out.get(), b.heuristic_out.size() * 2, cudaMemcpyDeviceToHost));
    const int64_t nv = std::min<int64_t>(T, opt.verify_tokens);
    Routing sub;
    sub.tokens = nv;
    sub.top_k = cfg.routing.top_k;
    sub.ids.resize(nv * sub.top_k);
    sub.weights.resize(sub.ids.size());
    FP4MOE_CUDA_CHECK(cudaMemcpy(sub.ids.data(), layer.topk_ids(), sub.ids.size() * 4, cudaMemcpyDeviceToHost));
    FP4MOE_CUDA_CHECK(cudaMemcpy(sub.weights.data(), layer.topk_weights(), sub.weights.size() * 4, cudaMemcpyDeviceToHost));
    const std::vector<float> sub_hidden(hidden.begin(), hidden.begin() + nv * cfg.hidden);
    const std::vector<double> ref = moe_reference(w, sub_hidden, nv, sub);
    for (int64_t t = 0; t < nv; ++t)
      b.reference_rows.emplace_back(ref.begin() + t * cfg.hidden, ref.begin() + (t + 1) * cfg.hidden);
    // Every candidate's rows are held to the heuristic plan's (output_check.h), so that output
    // must itself be right: finite everywhere (it was poisoned) and its first tokens the reference's.
    const int64_t heuristic_bad_row = first_non_finite_row(b.heuristic_out, cfg.hidden);
    const double heuristic_err = rel_error_vs_reference(b.heuristic_out, cfg.hidden, b.reference_rows);
    FP4MOE_CHECK(heuristic_bad_row < 0 && heuristic_err < opt.max_rel_error, "tuning: the heuristic plan ",
                 format_tactic(heuristic.fc1), " + ", format_tactic(heuristic.fc2), " is wrong at T = ", T, " (",
                 heuristic_bad_row >= 0 ? "non-finite output at token " + std::to_string(heuristic_bad_row)
                                        : "relative error " + std::to_string(heuristic_err) + " on the first tokens",
                 "): the layer was not made from these weights, or a bug in fp4moe; nothing was tuned for this "
                 "bucket");

    // A kernel that never ends (a persistent kernel waiting for a ticket or an arrival that never
    // comes) would hang a synchronization, and the tuning with it, naming nothing. A candidate's
    // calls and timed replays are waited for by polling, up to call_deadline_s; past it the
    // process ends (TuneOptions::call_deadline_s): no exception could unwind, since freeing the
    // batch's memory waits for the hung kernel too.
    std::string running;  // the plan being waited for, for the message
    auto wait_until_done = [&](auto&& done) {
      const auto start = std::chrono::steady_clock::now();
      for (cudaError_t e; (e = done()) != cudaSuccess;) {
        if (e != cudaErrorNotReady) FP4MOE_CUDA_CHECK(e);
        if (opt.call_deadline_s > 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > opt.call_deadline_s) {
          std::fprintf(stderr, "fp4moe: error: tuning: %s at T = %lld did not finish in %g s (a hung kernel: the GPU "
                               "still runs it); the finished buckets were handed over; rerun without this tactic\n",
                       running.c_str(), static_cast<long long>(T), opt.call_deadline_s);
          std::fflush(stderr);
          std::_Exit(3);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    };
    auto wait_call = [&] { wait_until_done([&] { return cudaStreamQuery(s); }); };
    auto wait_event = [&](cudaEvent_t ev) { wait_until_done([&] { return cudaEventQuery(ev); }); };
    // A failed launch must not poison the next candidate: clear the error state and reject the
    // tactic; a sticky error (the context is lost) cannot be cleared and ends the tuning with
    // its culprit. Returns whether fn ran.
    auto guarded = [&](TuneResult& r, const Tactic& t, auto&& fn) -> bool {
      try {
        fn();
        return true;
      } catch (const Error& e) {
        cudaGetLastError();
        const cudaError_t sticky = cudaDeviceSynchronize();
        FP4MOE_CHECK(sticky == cudaSuccess, "tuning: tactic ", format_tactic(t), " left the GPU context unusable (",
                     cudaGetErrorString(sticky), "); rerun without it");
        r.rejected.push_back({t, std::string("launch failed: ") + e.what()});
        return false;
      }
    };
    // A candidate plan's output against the reference: the reason it is wrong, or empty; `out`
    // gets the output. Every candidate runs on the same batch, so the layer's intermediate
    // buffers hold the right values from the call before: they are poisoned too, or a tactic
    // that skips part of its work would pass on what an earlier one left there (and, faster for
    // it, win).
    auto verify = [&](const LayerPlan& plan, std::vector<uint16_t>& out) -> std::string {
      running = format_tactic(plan.fc1) + " + " + format_tactic(plan.fc2);
      layer.poison_workspace(T, plan, s);
      FP4MOE_CUDA_CHECK(cudaMemsetAsync(b.out.get(), 0xFF, b.out.bytes(), s));
      layer.forward(b.hidden.get<uint16_t>(), b.logits.get<float>(), T, b.out.get<uint16_t>(), s, &plan);
      wait_call();
      // All T rows back: the first nv against the reference, every one finite (the output was
      // poisoned with NaN: a tactic that leaves later token tiles unwritten is caught too).
      out.resize(T * cfg.hidden);
      FP4MOE_CUDA_CHECK(cudaMemcpy(out.data(), b.out.get(), out.size() * 2, cudaMemcpyDeviceToHost));
      const int64_t bad_row = first_non_finite_row(out, cfg.hidden);
      if (bad_row >= 0) return "non-finite output at token " + std::to_string(bad_row);
      const double err = rel_error_vs_reference(out, cfg.hidden, b.reference_rows);
      if (!(err < opt.max_rel_error)) return "wrong result: relative error " + std::to_string(err) + " vs the reference";
      const RowDifference row = worst_row_difference(out, b.heuristic_out, cfg.hidden);
      if (!(row.rel < opt.max_row_rel_error))
        return "wrong result: token " + std::to_string(row.row) + "'s row differs from the heuristic plan's by " +
               std::to_string(row.rel) + " (relative)";
      return {};
    };
    // The layer with a plan as a CUDA graph. The plain call before the capture sizes the
    // layer's workspace for the plan (another plan may have grown it since; a buffer that grows
    // is replaced, and the one a graph captured is kept for it).
    auto capture = [&](const LayerPlan& plan) {
      running = format_tactic(plan.fc1) + " + " + format_tactic(plan.fc2);
      layer.forward(b.hidden.get<uint16_t>(), b.logits.get<float>(), T, b.out.get<uint16_t>(), s, &plan);
      wait_call();  // the second call of a plan: one that leaves its counters wrong hangs here
      return std::make_unique<CapturedGraph>(s, [&](cudaStream_t st) {
        layer.forward(b.hidden.get<uint16_t>(), b.logits.get<float>(), T, b.out.get<uint16_t>(), st, &plan);
      });
    };

    // Graphs timed in turns (the finalists, the pairs): microseconds of each one's timed replays.
    // No untimed cycles: every turn settles first.
    auto in_turns = [&](const std::vector<std::unique_ptr<CapturedGraph>>& graphs, uint64_t seed) {
      std::vector<std::function<void()>> replays;
      for (const auto& g : graphs) replays.push_back([&s, &g] { g->launch(s); });
      const Turns turns{0, opt.finalist_cycles, opt.finalist_turn_replays, opt.finalist_settle_ms * 1e-3};
      std::vector<std::vector<double>> us = interleaved_event_times(turns, s, replays, [&] { flusher.flush(s); }, seed,
                                                                          wait_event);
      for (auto& v : us)
        for (double& x : v) x *= 1e6;
      return us;
    };

    // The reference above is host work: the bucket's first candidate would be timed from a GPU
    // that idled meanwhile, slower than the same plan timed later (gpu_wake.h).
    wake_gpu();
    Tactic fc1_best = heuristic.fc1;
    // FC2's incumbent: the FC2 that FC1's winner was timed with (ranking.h), set once FC1 is ranked.
    const Tactic separate_fc2 = heuristic_tactic(cfg, T, gpu, Epilogue::kFinalize);
    Tactic fc2_kept = heuristic.fc2;
    for (int stage : {1, 2}) {
      TuneResult r;
      r.bucket = T;
      r.gemm = stage == 1 ? fc1_key(cfg) : fc2_key(cfg);
      // Candidates: every compiled tactic of the GEMM's epilogue that the model admits (ranking.h).
      std::vector<Tactic> cands = admissible_candidates(
          compiled_w4a16_tactics(), stage == 1 ? Epilogue::kSwiglu : Epilogue::kFinalize, cfg, T, gpu, r.rejected);
      // FC2 with FC1's winner: its twin alone where that runs both GEMMs, else none of those
      // families (ranking.h); the others are listed as set aside with the reason.
      if (stage == 2) cands = fc2_candidates(cands, fc1_best, r.rejected);
      std::vector<LayerPlan> plans;  // plans[i]: the plan r.timed[i] was timed in
      for (const Tactic& t : cands) {
        if (opt.progress)
          opt.progress("T=" + std::to_string(T) + (stage == 1 ? " FC1 " : " FC2 ") + format_tactic(t), done / total);
        LayerPlan plan = heuristic;
        if (stage == 1) plan.fc1 = t;
        else {
          plan.fc1 = fc1_best;
          plan.fc2 = t;
        }
        // w4a16_gemv and w4a16_fused run both GEMMs or neither: the other GEMM takes the
        // candidate's twin (same shape, other epilogue), or, for FC1's candidates where the
        // heuristic's FC2 is such a tactic, the stream-K / prefill families' heuristic FC2.
        Tactic& other = stage == 1 ? plan.fc2 : plan.fc1;
        const Epilogue other_ep = stage == 1 ? Epilogue::kFinalize : Epilogue::kSwiglu;
        if (runs_gemms_together(t.family)) {
          other = with_epilogue(t, other_ep);
        } else if (runs_gemms_together(other.family)) {
          other = stage == 1 ? separate_fc2 : heuristic_tactic(cfg, T, gpu, other_ep);
        }
        std::string wrong;
        double us = 0;
        if (!guarded(r, t, [&] {
              std::vector<uint16_t> first;
              wrong = verify(plan, first);
              if (!wrong.empty()) return;
              const auto graph = capture(plan);
              us = 1e6 * median_event_time(opt.warmup, opt.iters, s, [&] { graph->launch(s); }, [&] { flusher.flush(s); },
                                           0, {}, wait_event);
              // The last replay's output is the first call's, bit for bit (the layer is
              // deterministic): a tactic whose counters or tickets are left wrong by one call is
              // right once and wrong after, and must not be timed on its wrong calls.
              wait_call();
              std::vector<uint16_t> last(first.size());
              FP4MOE_CUDA_CHECK(cudaMemcpy(last.data(), b.out.get(), last.size() * 2, cudaMemcpyDeviceToHost));
              if (last != first) {
                const RowDifference row = worst_row_difference(last, first, cfg.hidden);
                wrong = "not reproducible: after " + std::to_string(opt.warmup + opt.iters) +
                        " graph replays the output differs from its first call's (token " + std::to_string(row.row) +
                        ", relative " + std::to_string(row.rel) + ")";
              }
            }))
          continue;
        if (!wrong.empty()) {
          r.rejected.push_back({t, wrong});
          continue;
        }
        r.timed.push_back({t, us, us, {}});
        plans.push_back(plan);
      }
      FP4MOE_CHECK(!r.timed.empty(), "tuning: no tactic of ", stage == 1 ? "FC1" : "FC2", " works at T = ", T);
      // The finalists again, together. One whose capture fails now is rejected like a candidate
      // that failed its first launch.
      const Tactic incumbent = stage == 1 ? heuristic.fc1 : fc2_kept;
      std::vector<size_t> fin;
      if (opt.finalist_cycles > 0) fin = pick_finalists(r.timed, incumbent, opt.finalist_margin, opt.max_finalists);
      if (!fin.empty()) {
        if (opt.progress)
          opt.progress("T=" + std::to_string(T) + (stage == 1 ? " FC1 " : " FC2 ") + std::to_string(fin.size()) +
                           " finalists, in turns",
                       done / total);
        std::vector<std::unique_ptr<CapturedGraph>> graphs;
        std::vector<size_t> timed_of;  // graphs[j] is the plan of r.timed[timed_of[j]]
        std::vector<bool> failed(r.timed.size(), false);
        for (size_t i : fin)
          if (guarded(r, r.timed[i].tactic, [&] { graphs.push_back(capture(plans[i])); })) timed_of.push_back(i);
          else failed[i] = true;
        running = "one of the finalists in turns (" + std::to_string(graphs.size()) + " plans of " +
                  (stage == 1 ? "FC1" : "FC2") + " candidates)";
        const std::vector<std::vector<double>> us = in_turns(graphs, opt.seed + T);
        for (size_t j = 0; j < timed_of.size(); ++j) r.timed[timed_of[j]].interleaved_us = us[j];
        for (size_t i = r.timed.size(); i-- > 0;)
          if (failed[i]) r.timed.erase(r.timed.begin() + static_cast<std::ptrdiff_t>(i));
        FP4MOE_CHECK(!r.timed.empty(), "tuning: no tactic of ", stage == 1 ? "FC1" : "FC2", " works at T = ", T);
      }
      // The heuristic's tactic is the incumbent: a challenger replaces it only by winning by more
      // than the margin, so noise between near-equal tactics never turns into a cached choice.
      r.heuristic_kept = rank_timed(r.timed, incumbent, opt.keep_heuristic_margin);
      if (stage == 1) {
        fc1_best = r.timed.front().tactic;
        fc2_kept = fc2_incumbent(heuristic.fc2, fc1_best, separate_fc2);
      }
      results.push_back(std::move(r));
      done += 1;
    }
    // The pairs (TuneOptions::time_pairs): the GEMMs' leading tactics together, in turns. Every
    // pair is verified first: the winners' plan was verified in FC2's ranking, but (c1, c2) and,
    // unless FC2 won with the heuristic's tactic, (c1, w2) combine tactics verified only apart.
    // A wrong pair ends the tuning (two right tactics that are wrong together would be a defect
    // to fix, not a candidate to pass over) - after the bucket's results, without the pairs, are
    // handed over, so that a caller still stores them.
    TuneResult& r1 = results[results.size() - 2];
    TuneResult& r2 = results.back();
    std::vector<TimedPlan> pairs;
    if (opt.time_pairs) pairs = pairs_to_time(r1, r2, fc2_kept);
    if (!pairs.empty()) {
      try {
        if (opt.progress)
          opt.progress("T=" + std::to_string(T) + " pairs: " + std::to_string(pairs.size()) + " plans, in turns",
                       done / total);
        std::vector<std::unique_ptr<CapturedGraph>> graphs;
        for (const TimedPlan& p : pairs) {
          LayerPlan plan = heuristic;
          plan.fc1 = p.fc1;
          plan.fc2 = p.fc2;
          std::vector<uint16_t> out;
          const std::string wrong = verify(plan, out);
          FP4MOE_CHECK(wrong.empty(), "tuning: at T = ", T, " the plan ", format_tactic(p.fc1), " + ",
                       format_tactic(p.fc2), " is wrong (", wrong, ") although each tactic passed alone");
          graphs.push_back(capture(plan));
        }
        running = "one of the pairs in turns (" + std::to_string(graphs.size()) + " plans)";
        const std::vector<std::vector<double>> us = in_turns(graphs, opt.seed + 2 * T + 1);
        for (size_t j = 0; j < pairs.size(); ++j) pairs[j].interleaved_us = us[j];
        choose_pair(std::move(pairs), r1, r2, opt.keep_heuristic_margin);
      } catch (...) {
        if (opt.on_bucket) opt.on_bucket(r1, r2);
        throw;
      }
    }
    if (opt.on_bucket) opt.on_bucket(r1, r2);
  }
  return results;
}

std::vector<CacheEntry> cache_entries(const std::vector<TuneResult>& results, const CacheIdentity& id) {
  std::vector<CacheEntry> out;
  for (const TuneResult& r : results) {
    CacheEntry e;
    e.id = id;
    e.gemm = r.gemm;
    e.bucket = r.bucket;
    FP4MOE_CHECK(!r.timed.empty(), "cache_entries: ", describe(r.gemm), " T=", r.bucket,
                 " has no timed tactic (nothing to cache)");
    e.winner = r.timed[0].tactic;
    e.time_us = r.timed[0].time_us;
    if (r.timed.size() > 1) {
      e.runner_up = r.timed[1].tactic;
      e.runner_up_us = r.timed[1].time_us;
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace fp4moe
