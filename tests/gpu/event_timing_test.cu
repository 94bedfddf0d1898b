// median_event_time on a real GPU: its warm-up by count, and by time (the bench's --warmup-ms);
// interleaved_event_times; median_back_to_back_time; wake_gpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

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
  EXPECT_GT(s, 50e-6);   // one run's time, not less ...
  EXPECT_LT(s, 0.5e-3);  // ... nor the sum of the 7 timed runs (~1 ms and more)
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

TEST(EventTimingOnGpu, InterleavedTimesEachPieceInShuffledTurns) {
  FP4MOE_REQUIRE_GPU();
  // Three pieces of ~0.05, 0.1 and 0.2 ms: each timed once a cycle, its own time each time.
  std::vector<int> calls(3, 0);
  std::vector<int> order;  // which piece ran, in the order run
  std::vector<std::function<void()>> fns;
  for (int i = 0; i < 3; ++i)
    fns.push_back([&, i] {
      ++calls[i];
      order.push_back(i);
      spin_for<<<1, 32>>>(100'000LL << i);
      FP4MOE_CUDA_CHECK_LAUNCH();
    });
  int befores = 0;
  const auto times = interleaved_event_times(Turns{2, 9, 1, 0}, nullptr, fns, [&] { ++befores; }, 7);
  ASSERT_EQ(times.size(), 3u);
  EXPECT_EQ(befores, 3 * 11);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(calls[i], 11);
    ASSERT_EQ(times[i].size(), 9u);
  }
  EXPECT_GT(median(times[1]), 1.5 * median(times[0]));
  EXPECT_GT(median(times[2]), 1.5 * median(times[1]));
  EXPECT_LT(median(times[2]), 10e-3);
  // Every cycle runs each piece once; the order is not one fixed rotation of the first cycle's.
  bool varied = false;
  for (size_t c = 0; c < 11; ++c) {
    std::vector<int> cycle(order.begin() + 3 * c, order.begin() + 3 * c + 3);
    std::vector<int> sorted = cycle;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2}));
    varied |= cycle != std::vector<int>(order.begin(), order.begin() + 3);
  }
  EXPECT_TRUE(varied);
}

TEST(EventTimingOnGpu, InterleavedTurnsSettleThenTimeSeveralRuns) {
  FP4MOE_REQUIRE_GPU();
  std::vector<int> order;  // which piece ran, in the order run
  std::vector<std::function<void()>> fns;
  for (int i = 0; i < 2; ++i)
    fns.push_back([&, i] {
      order.push_back(i);
      spin_for<<<1, 32>>>(100'000);
      FP4MOE_CUDA_CHECK_LAUNCH();
    });
  const auto t0 = std::chrono::steady_clock::now();
  const auto times = interleaved_event_times(Turns{1, 3, 4, 0.005}, nullptr, fns, [] {}, 3);
  // 2 pieces x 4 turns (1 untimed cycle) of at least 5 ms settling each.
  EXPECT_GE(seconds_since(t0), 8 * 0.005);
  for (const auto& t : times) ASSERT_EQ(t.size(), 12u);  // 3 timed turns of 4 runs
  // A turn is one piece's runs back to back: the piece changes at most once per turn.
  size_t changes = 0;
  for (size_t k = 1; k < order.size(); ++k) changes += order[k] != order[k - 1];
  EXPECT_LE(changes, 8u - 1);
  EXPECT_GT(order.size(), 8u * (4 + 10));  // each turn settled for 5 ms of ~0.05-0.1-ms runs
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
