// median_event_time on a real GPU: its warm-up by count, and by time (the bench's --warmup-ms);
// median_back_to_back_time; wake_gpu.
#include <gtest/gtest.h>

#include <chrono>

#include "gpu_test_util.h"
#include "runtime/event_timing.h"
#include "runtime/gpu_wake.h"

namespace fp4moe {
namespace {

__global__ void spin_for(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(EventTimingOnGpu, WarmsUpByCountThenTimesTheMedian) {
  FP4MOE_REQUIRE_GPU();
  int calls = 0, befores = 0;
  const double s = median_event_time(3, 7, nullptr, [&] {
    ++calls;
    spin_for<<<1, 32>>>(200'000);  // ~0.1-0.15 ms at 1.4-2 GHz
    FP4MOE_CUDA_CHECK_LAUNCH();
  }, [&] { ++befores; });
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(befores, 10);
  EXPECT_GT(s, 50e-6);
  EXPECT_LT(s, 5e-3);
}

TEST(EventTimingOnGpu, WarmsUpForAtLeastTheTimeAsked) {
  FP4MOE_REQUIRE_GPU();
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  median_event_time(2, 5, nullptr, [&] {
    ++calls;
    spin_for<<<1, 32>>>(200'000);
    FP4MOE_CUDA_CHECK_LAUNCH();
  }, [] {}, 0.03);
  EXPECT_GE(seconds_since(t0), 0.03);
  EXPECT_GT(calls, 2 + 5 + 10);  // 30 ms of ~0.1-ms runs: well past the counted warm-up
}

TEST(EventTimingOnGpu, BackToBackRunsTimeEachRunAlone) {
  FP4MOE_REQUIRE_GPU();
  int calls = 0;
  const double s = median_back_to_back_time(2, 9, nullptr, [&] {
    ++calls;
    spin_for<<<1, 32>>>(200'000);  // ~0.1-0.15 ms at 1.4-2 GHz
    FP4MOE_CUDA_CHECK_LAUNCH();
  });
  EXPECT_EQ(calls, 11);
  EXPECT_GT(s, 50e-6);   // one run's time, not less ...
  EXPECT_LT(s, 0.5e-3);  // ... nor the batch's (9 runs: ~1 ms and more)
}

TEST(EventTimingOnGpu, WakeGpuRunsForTheTimeAsked) {
  FP4MOE_REQUIRE_GPU();
  const auto t0 = std::chrono::steady_clock::now();
  wake_gpu(0.02);
  EXPECT_GE(seconds_since(t0), 0.02);
}

}  // namespace
}  // namespace fp4moe
