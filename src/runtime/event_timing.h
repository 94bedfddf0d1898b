// median_event_time: how the benchmark, the ceilings and the tuner time GPU work.
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/common/cuda_check.h"

namespace fp4moe {

// Median time in seconds of fn() between two events, `iters` times after `warmup` runs;
// before each timed run, `before` (untimed, e.g. an L2 flush) is enqueued.
template <typename Fn, typename Before>
double median_event_time(int warmup, int iters, cudaStream_t stream, Fn&& fn, Before&& before) {
  cudaEvent_t start, stop;
  FP4MOE_CUDA_CHECK(cudaEventCreate(&start));
  FP4MOE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) {
    before();
    fn();
  }
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    before();
    FP4MOE_CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    FP4MOE_CUDA_CHECK(cudaEventRecord(stop, stream));
    FP4MOE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace fp4moe
