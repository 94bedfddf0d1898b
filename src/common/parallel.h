// parallel_for over [0, n) with std::thread: the CPU reference and the synthetic-weight
// generator are embarrassingly parallel over rows or experts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fp4moe {

inline int default_thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// Calls fn(begin, end) on contiguous chunks from `threads` threads (0 = all). The first
// exception thrown by any chunk is rethrown on the caller's thread.
template <typename Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (threads <= 0) threads = default_thread_count();
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  if (threads <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::mutex error_mutex;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b >= e) break;
    pool.emplace_back([&, b, e] {
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace fp4moe
