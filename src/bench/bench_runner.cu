// The benchmark runner (see bench_runner.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench/bench_runner.h"
#include "common/bf16_compare.h"
#include "bench/cublas_baseline.h"
#include "bench/plain_read.h"
#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/synthetic.h"
#include "kernels/common/cuda_check.h"
#include "runtime/captured_graph.h"
#include "runtime/device_buffer.h"
#include "runtime/gpu_wake.h"

namespace fp4moe {
namespace {

TimedPath timed(double seconds, const LayerCost& c, const Roofline& f) {
  TimedPath t;
  t.median_us = seconds * 1e6;
  t.gbs = c.bytes / seconds / 1e9;
  t.tflops = c.flops / seconds / 1e12;
  t.pct_floor = 100.0 * f.floor_s / seconds;
  t.x_floor = seconds / f.floor_s;
  return t;
}

}  // namespace

BenchReport run_bench(const BenchOptions& o) {
  auto say = [&](const std::string& s) { if (o.progress) o.progress(s); };
  const CudaEnvironment env = query_cuda_environment();
  FP4MOE_CHECK(!env.devices.empty(), "bench: no usable GPU (", env.error, ")");
  FP4MOE_CHECK(o.device >= 0 && o.device < static_cast<int>(env.devices.size()), "bench: CUDA device ", o.device,
               " out of range (", env.devices.size(), " GPUs)");
  const BuildSupport support = build_support_for(env.devices[o.device]);  // before minutes of ceilings
  FP4MOE_CHECK(support.runs, "bench: ", support.why);
  BenchReport report;
  report.gpu = env.devices[o.device];
  report.options = o;
  // Every allocation, stream, handle and kernel below lives on that device; the caller's is restored.
  const ScopedDevice on_device(o.device);

  char pci[32] = {};
  FP4MOE_CUDA_CHECK(cudaDeviceGetPCIBusId(pci, sizeof(pci), o.device));
  ClockMonitor clocks(pci);
  report.clock_monitor_unavailable = clocks.why_unavailable();
  say("measuring ceilings: read bandwidth, cuBLAS BF16 GEMM (burst, then sustained)");
  report.ceilings = measure_ceilings(10, &clocks, o.sustain_seconds);

  say("generating " + o.config.name + " weights (seeded random NVFP4)");
  SyntheticOptions so;
  so.seed = o.seed;
  const MoeWeights w = make_synthetic_moe(o.config, so);
  say("uploading and prepacking weights");
  LayerOptions lo;
  lo.use_tuning_cache = o.use_tuning_cache;
  lo.device = o.device;
  std::unique_ptr<GpuMoeLayer> layer = GpuMoeLayer::create(w, lo);
  for (const auto& warning : layer->tuning_warnings()) say("warning: " + warning);
  std::unique_ptr<CublasBaseline> base;
  if (o.baseline) {
    say("dequantizing the baseline's BF16 weights");
    base = std::make_unique<CublasBaseline>(w);
  }
  const int64_t max_t = *std::max_element(o.tokens.begin(), o.tokens.end());
  layer->reserve(max_t);
  L2Flusher flusher(report.gpu.l2_bytes);
  std::unique_ptr<PlainRead> reader = o.plain_read ? std::make_unique<PlainRead>() : nullptr;
  const OwnedStream stream;
  const MoeConfig& cfg = o.config;
  const std::vector<float> skew_bias =
      o.skew > 0 ? make_router_logits(1, cfg.num_experts, o.seed + 99, o.skew) : std::vector<float>{};

  int step = 0;
  for (int64_t T : o.tokens) {
    ++step;
    say("[" + std::to_string(step) + "/" + std::to_string(o.tokens.size()) + "] T = " + std::to_string(T));
    BenchRow row;
    row.tokens = T;
    std::vector<float> hidden = make_hidden_states(T, cfg.hidden, o.seed + T);
    std::vector<float> logits = make_router_logits(T, cfg.num_experts, o.seed + T);
    if (!skew_bias.empty())
      for (int64_t t = 0; t < T; ++t)
        for (int e = 0; e < cfg.num_experts; ++e) logits[t * cfg.num_experts + e] += skew_bias[e];
    std::vector<uint16_t> hb(hidden.size());
    for (size_t i = 0; i < hidden.size(); ++i) hb[i] = Bf16::from_float(hidden[i]).bits;
    DeviceBuffer dh(hb.size() * 2), dl(logits.size() * 4), dout(T * cfg.hidden * 2), dbase(T * cfg.hidden * 2);
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dh.get(), hb.data(), hb.size() * 2, cudaMemcpyHostToDevice, stream));
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dl.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice, stream));
    LayerPlan plan = layer->plan_for(T);
    if (o.fc1) plan.fc1 = *o.fc1;
    if (o.fc2) plan.fc2 = *o.fc2;
    row.plan_source = o.fc1 || o.fc2 ? "fixed" : layer->plan_source(T);
    row.fc1_tactic = format_tactic(plan.fc1);
    row.fc2_tactic = format_tactic(plan.fc2);

    // One checked run: routing for the accounting and the baseline, output for the check.
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(dout.get(), 0xFF, dout.bytes(), stream));
    layer->forward(dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), stream, &plan);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    Routing r;
    r.tokens = T;
    r.top_k = cfg.routing.top_k;
    r.ids.resize(T * r.top_k);
    r.weights.resize(T * r.top_k);
    FP4MOE_CUDA_CHECK(cudaMemcpy(r.ids.data(), layer->topk_ids(), r.ids.size() * 4, cudaMemcpyDeviceToHost));
    FP4MOE_CUDA_CHECK(cudaMemcpy(r.weights.data(), layer->topk_weights(), r.weights.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<uint16_t> ours(T * cfg.hidden);
    FP4MOE_CUDA_CHECK(cudaMemcpy(ours.data(), dout.get(), ours.size() * 2, cudaMemcpyDeviceToHost));
    row.cost = layer_cost(cfg, T, count_active_experts(r.ids, cfg.num_experts));
    row.floor = roofline(row.cost, report.ceilings.read_bytes_per_s, report.ceilings.bf16_flops);

    auto before = [&] { if (o.cold_l2) flusher.flush(stream); };
    // Seconds of host work (weights, prepacking, the baseline's BF16 copy) precede the first size.
    if (step == 1) wake_gpu();
    // Ours: a CUDA graph of the whole layer, replayed.
    double t_ours;
    layer->set_clock_accounting(true);  // before the capture: the graph's kernels count too
    // The clocks (NVML's and our GEMMs' own) over the timed runs alone: after a --warmup-ms of
    // 100, the warm-up was 98% of the launches counted.
    const std::function<void()> clocks_from_here = [&] {
      layer->set_clock_accounting(true);  // (on already: resets the counters)
      (void)clocks.stop();
      clocks.start();
    };
    if (o.graph) {
      const CapturedGraph graph(stream, [&](cudaStream_t st) {
        layer->forward(dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), st, &plan);
      });
      t_ours = median_event_time(o.warmup, o.iters, stream, [&] { graph.launch(stream); }, before, o.warmup_seconds,
                                 clocks_from_here);
    } else {
      t_ours = median_event_time(o.warmup, o.iters, stream, [&] {
        layer->forward(dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), stream, &plan);
      }, before, o.warmup_seconds, clocks_from_here);
    }
    row.ours_clock = clocks.stop();
    row.ours_sm_clock = layer->read_clock_accounting();
    layer->set_clock_accounting(false);
    row.ours = timed(t_ours, row.cost, row.floor);
    // The same bytes read by a plain kernel, timed the same way: what this size costs any kernel
    // (launch, ramp, tail) against what ours cost beyond it. Memory-bound rows only.
    if (reader && row.floor.memory_bound) {
      const auto bytes = static_cast<int64_t>(row.cost.bytes);
      if (reader->reserve(bytes, &row.plain_read_skipped))
        row.plain_read_us = 1e6 * reader->time(bytes, o.graph, o.warmup, o.iters, stream, before, o.warmup_seconds);
    }
    // Per-stage times (plain launches; events between the stages).
    {
      cudaEvent_t ev[4];
      for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventCreate(&e));
      void* const evp[4] = {ev[0], ev[1], ev[2], ev[3]};
      std::vector<double> st[3];
      for (int i = 0; i < std::max(5, o.iters / 2); ++i) {
        before();
        layer->forward_with_events(dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), stream, evp, &plan);
        FP4MOE_CUDA_CHECK(cudaEventSynchronize(ev[3]));
        for (int s = 0; s < 3; ++s) {
          float ms;
          FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[s], ev[s + 1]));
          st[s].push_back(ms * 1e3);
        }
      }
      // A phase that lies inside another launch is 0, not the few hundred nanoseconds between two
      // events recorded back to back: the small-batch family routes in FC1's prologue, the fused
      // one runs the whole layer in its FC1 stage.
      const Family family = plan.fc1.family;
      row.routing_us = runs_gemms_together(family) ? 0.0 : median(st[0]);
      row.fc1_us = median(st[1]);
      row.fc2_us = family == Family::kW4a16Fused ? 0.0 : median(st[2]);
      for (auto& e : ev) cudaEventDestroy(e);
    }

    if (base) {
      base->prepare(r);
      double best = INFINITY;
      for (auto m : {CublasBaseline::Method::kGrouped, CublasBaseline::Method::kPerExpert}) {
        try {
          base->forward(dh.get<uint16_t>(), dbase.get<uint16_t>(), stream, m);
          FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        } catch (const Error& e) {
          if (m == CublasBaseline::Method::kGrouped) continue;  // cuBLAS < 12.5: per expert only
          throw;
        }
        const double t = median_event_time(std::max(2, o.warmup / 2), std::max(5, o.iters / 2), stream,
                                           [&] { base->forward(dh.get<uint16_t>(), dbase.get<uint16_t>(), stream, m); },
                                           before, o.warmup_seconds, [&] { clocks.start(); });
        const std::optional<ClockSample> clock = clocks.stop();  // the timed runs of this method
        if (t < best) {
          best = t;
          row.baseline_method = to_string(m);
          row.baseline_clock = clock;
        }
      }
      // The output of the method timed last is in dbase: both methods compute the same thing.
      std::vector<uint16_t> theirs(T * cfg.hidden);
      FP4MOE_CUDA_CHECK(cudaMemcpy(theirs.data(), dbase.get(), theirs.size() * 2, cudaMemcpyDeviceToHost));
      row.rel_error_vs_baseline = bf16_rel_error(ours, theirs);
      FP4MOE_CHECK(row.rel_error_vs_baseline <= o.max_rel_error, "bench: T = ", T,
                   ": our output differs from the cuBLAS baseline's by ", row.rel_error_vs_baseline,
                   " (relative Frobenius), more than ", o.max_rel_error);
      row.has_baseline = true;
      // Its bytes are its own (BF16 weights): its GB/s is what it read; its %floor is against ours.
      row.baseline_cost = bf16_layer_cost(cfg, T, row.cost.active_experts);
      row.baseline = timed(best, row.baseline_cost, row.floor);
      row.speedup = best / t_ours;
    }
    report.rows.push_back(row);
  }
  return report;
}

}  // namespace fp4moe
