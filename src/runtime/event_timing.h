// median_event_time: how the benchmark, the ceilings and the tuner time GPU work;
// interleaved_event_times: how the tuner compares its finalists; median_back_to_back_time: how
// `fp4moe run` times.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "common/median.h"
#include "kernels/common/cuda_check.h"

namespace fp4moe {

// An owning CUDA event that records time, destroyed on every way out of its scope (a timing that
// throws half way leaks none).
class TimingEvent {
 public:
  TimingEvent() { FP4MOE_CUDA_CHECK(cudaEventCreate(&event_)); }
  TimingEvent(TimingEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  TimingEvent& operator=(TimingEvent&&) = delete;
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;
  ~TimingEvent() {
    if (event_) cudaEventDestroy(event_);
  }
  operator cudaEvent_t() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// How a timing waits for an event: by default cudaEventSynchronize; the tuner polls instead, with
// a deadline (a candidate's kernel may never end: TuneOptions::call_deadline_s).
using EventWait = std::function<void(cudaEvent_t)>;

// Waits for `event`: through `wait` where given, else cudaEventSynchronize.
inline void wait_for_event(cudaEvent_t event, const EventWait& wait) {
  if (wait) wait(event);
  else FP4MOE_CUDA_CHECK(cudaEventSynchronize(event));
}

// Waits for the work enqueued on `stream` so far: through `wait` where given, else by
// synchronizing the stream.
inline void wait_for_stream(cudaStream_t stream, const EventWait& wait) {
  if (!wait) {
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  const TimingEvent e;
  FP4MOE_CUDA_CHECK(cudaEventRecord(e, stream));
  wait(e);
}

// Times in seconds of fn() between two events, `iters` times after at least `warmup` runs -
// and, where min_warmup_s > 0, at least that many seconds of them (wall time, the work
// synchronized), which is how a long run's state is measured: under a power cap, for one.
// Before each run, timed or not, `before` (untimed, e.g. an L2 flush) is enqueued. `on_timed`,
// where given, runs once between the warm-up (finished on the GPU) and the first timed run: what
// accounts for the timed runs alone (a clock monitor, counters) starts there. Every wait goes
// through `wait` (EventWait) where given.
template <typename Fn, typename Before>
std::vector<double> event_times(int warmup, int iters, cudaStream_t stream, Fn&& fn, Before&& before,
                                double min_warmup_s = 0, const std::function<void()>& on_timed = {},
                                const EventWait& wait = {}) {
  const TimingEvent start, stop;
  const auto t0 = std::chrono::steady_clock::now();
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i) {
      before();
      fn();
    }
  };
  run(warmup);
  // More, in batches that double (a short fn() is not paced by the host's synchronizations),
  // until min_warmup_s has passed.
  for (int batch = std::max(1, warmup); min_warmup_s > 0; batch *= 2) {
    wait_for_stream(stream, wait);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= min_warmup_s) break;
    run(batch);
  }
  if (on_timed) {
    wait_for_stream(stream, wait);
    on_timed();
  }
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    before();
    FP4MOE_CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    FP4MOE_CUDA_CHECK(cudaEventRecord(stop, stream));
    wait_for_event(stop, wait);
    float ms = 0;
    FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e-3);
  }
  return times;
}

// The median of event_times.
template <typename Fn, typename Before>
double median_event_time(int warmup, int iters, cudaStream_t stream, Fn&& fn, Before&& before,
                         double min_warmup_s = 0, const std::function<void()>& on_timed = {},
                         const EventWait& wait = {}) {
  return median(event_times(warmup, iters, stream, fn, before, min_warmup_s, on_timed, wait));
}

// How interleaved_event_times takes turns: `cycles` timed cycles after `warmup_cycles` untimed
// ones; in each turn the piece first runs for settle_s seconds untimed (0: not at all), then
// per_turn times timed.
struct Turns {
  int warmup_cycles = 0;
  int cycles = 1;
  int per_turn = 1;
  double settle_s = 0;
};

// Several pieces of work timed in turns: each cycle gives every fns[i] one turn (after `before`,
// untimed, as in event_times, before each of its runs) in an order shuffled per cycle (seeded:
// the same order every run). Every piece samples the same stretch of the GPU's clock and power
// history, and none always follows the same neighbour; timed in bursts of their own instead, two
// plans of the layer on a GPU at its power cap are compared under conditions that drift by more
// than the plans differ. A turn's settling lets the clock reach what the piece's own power draw
// allows before it is timed. Returns the seconds of each timed run, per piece, in the order taken.
template <typename Before>
std::vector<std::vector<double>> interleaved_event_times(const Turns& turns, cudaStream_t stream,
                                                         const std::vector<std::function<void()>>& fns,
                                                         Before&& before, uint64_t seed, const EventWait& wait = {}) {
  std::vector<size_t> order(fns.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(seed);
  std::vector<std::vector<double>> times(fns.size());
  for (int c = 0; c < turns.warmup_cycles + turns.cycles; ++c) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      const std::vector<double> t = event_times(0, turns.per_turn, stream, fns[i], before, turns.settle_s, {}, wait);
      if (c >= turns.warmup_cycles) times[i].insert(times[i].end(), t.begin(), t.end());
    }
  }
  return times;
}

// Median time in seconds of fn() over `iters` runs enqueued back to back, each between its own
// pair of events, synchronized once at the end: what a loop of identical asynchronous calls sees
// per call. median_event_time synchronizes after every run, so where nothing is enqueued before
// a run (no `before`), its start event fires while the host is still submitting it, and that
// submission is timed with the run (H200, `fp4moe run`'s CUDA graph of the layer, warm L2, two
// rounds: glm5 T = 1 74.9 / 74.6 us back to back against 76.4 / 75.6 synchronized, glm5-tp8 T = 1
// 22.5 / 22.6 against 22.9 / 22.9).
template <typename Fn>
double median_back_to_back_time(int warmup, int iters, cudaStream_t stream, Fn&& fn) {
  std::vector<TimingEvent> events;
  events.reserve(2 * static_cast<size_t>(iters));
  for (int i = 0; i < 2 * iters; ++i) events.emplace_back();
  for (int i = 0; i < warmup; ++i) fn();
  for (int i = 0; i < iters; ++i) {
    FP4MOE_CUDA_CHECK(cudaEventRecord(events[2 * i], stream));
    fn();
    FP4MOE_CUDA_CHECK(cudaEventRecord(events[2 * i + 1], stream));
  }
  FP4MOE_CUDA_CHECK(cudaEventSynchronize(events.back()));
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]));
    times.push_back(ms * 1e-3);
  }
  return median(std::move(times));
}

}  // namespace fp4moe
