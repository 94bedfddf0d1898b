// The two ceilings of the roofline, measured on the GPU in the benchmark's own process.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

#include "bench/clock_monitor.h"

#include "runtime/event_timing.h"
#include "runtime/l2_flush.h"

namespace fp4moe {

struct Ceilings {
  double read_bytes_per_s = 0;  // streaming 16-byte loads over a buffer many times the L2
  double bf16_flops = 0;        // cuBLAS BF16 GEMM (fp32 accumulate) on random data, ~15 ms of it
  // The same GEMM after `sustain_seconds` of it back to back: the rate at the clock the power cap
  // allows. The burst above runs at the top clock (1980 MHz on the H200) before the cap acts;
  // prefill-sized layers (and the cuBLAS baseline) run capped, ~1600-1800 MHz, so their share of
  // the burst rate understates how close to the tensor cores' limit they are.
  double bf16_flops_sustained = 0;  // 0: not measured
  double sustain_seconds = 0;
  int64_t read_buffer_bytes = 0;
  int gemm_size = 0;
  std::optional<ClockSample> bf16_clock;  // while the BF16 GEMM ran (where a monitor samples)
  std::optional<ClockSample> bf16_sustained_clock;
};

// Median of `iters` timed runs each. Throws on CUDA/cuBLAS errors.
double measure_read_bandwidth(int64_t bytes, int iters);
// monitor (optional) samples the clocks while the BF16 GEMM runs; sustain_seconds > 0 measures
// the sustained rate too (that long of GEMMs first, then 3 x iters timed).
Ceilings measure_ceilings(int iters = 10, ClockMonitor* monitor = nullptr, double sustain_seconds = 0);

}  // namespace fp4moe

