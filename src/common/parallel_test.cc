// parallel_for: every index once, exceptions rethrown, and a system that refuses threads (an
// address-space limit too small for a thread's stack) still gets the whole range done - on the
// caller's thread - instead of the process ending in std::terminate.
#include "common/parallel.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

namespace fp4moe {
namespace {

// 0 when every index of [0, n) was visited exactly once.
int visit_all(int64_t n, int threads) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  parallel_for(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
  });
  for (const auto& s : seen)
    if (s.load() != 1) return 1;
  return 0;
}

TEST(ParallelFor, VisitsEveryIndexOnceAndRethrows) {
  for (const int threads : {0, 1, 3, 8, 64}) EXPECT_EQ(visit_all(1000, threads), 0) << threads;
  EXPECT_EQ(visit_all(5, 8), 0);
  EXPECT_THROW(parallel_for(100, 4,
                            [](int64_t b, int64_t) {
                              if (b > 0) throw std::runtime_error("chunk failed");
                            }),
               std::runtime_error);
}

TEST(ParallelFor, FinishesWhereTheSystemRefusesThreads) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child's address space capped 2 MB above what it maps now: a thread's stack (8 MB by
    // default) cannot be mapped, small heap allocations still can.
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    if (pages == 0) ::_exit(10);
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (rlim_t{2} << 20);
    const rlimit lim{cap, cap};
    if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(11);
    // How many threads can live at once now (glibc reuses the stacks of threads that ended,
    // the parent's included, so the first few may still start): fewer than 64, or this test
    // would prove nothing.
    std::atomic<bool> release{false};
    std::vector<std::thread> probe;
    try {
      while (probe.size() < 64)
        probe.emplace_back([&] {
          while (!release.load()) std::this_thread::yield();
        });
    } catch (const std::system_error&) {
    }
    const bool refused = probe.size() < 64;
    release = true;
    for (auto& t : probe) t.join();
    if (!refused) ::_exit(12);
    ::_exit(visit_all(1000, 64));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: an index missed or visited twice; 10-12: the limit could not be set up";
}

}  // namespace
}  // namespace fp4moe
