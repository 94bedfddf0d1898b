// The roofline benchmark: in one process, the ceilings (read bandwidth, cuBLAS BF16), the
// baseline (cuBLAS on BF16 weights) and our layer, per token count, with ratios.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/ceilings.h"
#include "bench/roofline.h"
#include "fp4moe/hw.h"
#include "fp4moe/layer.h"
#include "fp4moe/moe.h"

namespace fp4moe {

struct BenchOptions {
  MoeConfig config;
  std::vector<int64_t> tokens;
  uint64_t seed = 1;
  double skew = 0;          // 0: uniform routing; > 0: a few experts take most tokens
  bool cold_l2 = true;      // flush the L2 before every timed run
  bool graph = true;        // time CUDA-graph replays of the layer (else plain launches)
  bool baseline = true;
  int warmup = 5;
  double warmup_seconds = 0;  // > 0: and at least this long of them (a long run's state; event_timing.h)
  int iters = 30;
  double max_rel_error = 2e-2;  // ours vs baseline; larger fails the run
  double sustain_seconds = 3;  // > 0: the sustained BF16 ceiling too (Ceilings::bf16_flops_sustained)
  std::optional<Tactic> fc1, fc2;  // fixed tactics instead of the layer's plan
  bool use_tuning_cache = true;     // the layer's plan from the tuning cache where it has one
  bool plain_read = true;  // memory-bound rows: time a plain read of the layer's bytes too (plain_read.h)
  int device = 0;          // the CUDA device everything runs on (ceilings, baseline, layer)
  std::function<void(const std::string&)> progress;  // one line per step
};

struct TimedPath {
  double median_us = 0;
  double gbs = 0;       // layer bytes / time
  double tflops = 0;
  double pct_floor = 0; // 100 * floor / time
  double x_floor = 0;   // time / floor
};

struct BenchRow {
  int64_t tokens = 0;
  LayerCost cost;
  Roofline floor;
  TimedPath ours;
  std::string fc1_tactic, fc2_tactic, plan_source;
  // Per stage (plain launches, median); 0 for a phase inside another launch (w4a16_gemv routes
  // in FC1; w4a16_fused is one launch, all in fc1_us).
  double routing_us = 0, fc1_us = 0, fc2_us = 0;
  // A plain read of cost.bytes timed as the layer is (plain_read.h); 0 where not run: a
  // compute-bound row, options.plain_read off, or plain_read_skipped says why.
  double plain_read_us = 0;
  std::string plain_read_skipped;
  bool has_baseline = false;
  LayerCost baseline_cost;  // the baseline's bytes: BF16 weights (bf16_layer_cost); its FLOPs are ours
  TimedPath baseline;
  std::string baseline_method;
  double speedup = 0;        // baseline time / our time
  double rel_error_vs_baseline = 0;
  // The SM clock while each was timed (NVML; absent without it): a ratio between two paths
  // timed at different clocks is partly the GPU's, not the kernels' (clock_monitor.h).
  std::optional<ClockSample> ours_clock, baseline_clock;
  // The clock our GEMMs ran at, measured in them over the same replays (GpuMoeLayer's clock
  // accounting): NVML's reading above can stay at the boost clock while the SMs run 20% slower.
  SmClockAccount ours_sm_clock;
};

struct BenchReport {
  GpuSpec gpu;
  Ceilings ceilings;
  std::string clock_monitor_unavailable;  // why the clocks are absent (empty where sampled)
  BenchOptions options;
  std::vector<BenchRow> rows;
};

// Runs the whole sweep on GPU 0. Throws fp4moe::Error when our output disagrees with the
// baseline's by more than options.max_rel_error.
BenchReport run_bench(const BenchOptions& options);

}  // namespace fp4moe
