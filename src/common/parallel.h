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
// exception thrown by any chunk is rethrown on the caller's thread. Where the system refuses a
// thread (a process or address-space limit), the chunks left run on the caller's thread: the
// result is the same, only later (a std::thread that throws out of here with others still
// joinable would end the process).
template <typename Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (threads <= 0) threads = default_thread_count();
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  if (threads <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](int64_t b, int64_t e) {
    try {
      fn(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  const int64_t chunk = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b >= e) break;
    try {
      pool.emplace_back(work, b, e);
    } catch (...) {  // std::system_error, or std::bad_alloc for the thread's state
      work(b, n);    // this chunk and every later one, here
      break;
    }
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace fp4moe
