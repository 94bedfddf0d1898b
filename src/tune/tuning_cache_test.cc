// Tuning cache: round trip, corrupt and foreign files (reported, ignored), identity matching,
// concurrent writers (two processes merging at once lose nothing), and the bucket rule.
#include "fp4moe/tuning_cache.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "fp4moe/error.h"
#include "fp4moe/version.h"
#include "support/oracle.h"

namespace fp4moe {
namespace {

namespace fs = std::filesystem;

CacheEntry entry(int64_t bucket, int tokens_tile, const std::string& gpu = "NVIDIA H200") {
  CacheEntry e;
  e.id = CacheIdentity{gpu, 90, 132, 13000, build_id()};
  e.gemm = fc1_key(MoeConfig::glm5());
  e.bucket = bucket;
  e.winner = Tactic{Family::kW4a16Mma, 128, tokens_tile, 256, 4, 8, 1, Epilogue::kSwiglu, false};
  e.time_us = 10.0 * bucket;
  e.runner_up = Tactic{Family::kW4a16Mma, 64, tokens_tile, 256, 4, 4, 1, Epilogue::kSwiglu, false};
  e.runner_up_us = 11.0 * bucket;
  return e;
}

std::string fresh(const std::string& name) {
  const auto p = test::temp_dir() / name;
  fs::remove(p);
  return p.string();
}

TEST(TuningCache, RoundTripAndLookup) {
  const std::string path = fresh("cache_rt.json");
  TuningCache::merge_into_file(path, {entry(1, 8), entry(16, 8), entry(256, 16)});
  TuningCache::merge_into_file(path, {entry(16, 16)});  // replaces bucket 16
  std::vector<std::string> w;
  const TuningCache c = TuningCache::load(path, &w);
  EXPECT_TRUE(w.empty());
  ASSERT_EQ(c.entries().size(), 3u);
  const CacheIdentity id = entry(1, 8).id;
  const GemmKey g = entry(1, 8).gemm;
  const auto e = c.find(id, g, 16);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->winner.tile_tokens, 16);
  EXPECT_DOUBLE_EQ(e->time_us, 160.0);
  ASSERT_TRUE(e->runner_up);
  EXPECT_EQ(e->runner_up->warps, 4);
  EXPECT_EQ(c.lookup(id, g, 300)->bucket, 256);  // nearest bucket
  EXPECT_FALSE(c.lookup(id, g, 4));               // bucket 4 not tuned
  EXPECT_FALSE(c.find(id, fc2_key(MoeConfig::glm5()), 16));
  GemmKey fewer_experts = g;
  fewer_experts.experts = 160;
  EXPECT_FALSE(c.find(id, fewer_experts, 16)) << "another routing shape puts other token counts on each expert";
  GemmKey softmax = g;
  softmax.routing = RoutingMode::kSoftmaxTopK;
  EXPECT_FALSE(c.find(id, softmax, 16)) << "the small-batch kernels run the routing: another mode is another layer";
  GemmKey grouped = g;
  grouped.n_group = 8;
  grouped.topk_group = 4;
  EXPECT_FALSE(c.find(id, grouped, 16));
  CacheIdentity other = id;
  other.driver = 12090;
  EXPECT_FALSE(c.find(other, g, 16)) << "another driver's measurement must not be used";
  EXPECT_EQ(c.foreign_entries(other), 3);
  CacheIdentity fewer_sms = id;
  fewer_sms.sm_count = 66;
  EXPECT_FALSE(c.find(fewer_sms, g, 16)) << "a partition of the GPU has other winners";
}

// The build id: the version, then a fingerprint of the sources; the file carries it in its name
// and its header, and another build's file is not read.
TEST(TuningCache, AnotherBuildsFileIsNotRead) {
  const std::string id = build_id();
  ASSERT_EQ(id.rfind(std::string(FP4MOE_VERSION) + "+", 0), 0u) << id;
  EXPECT_EQ(id.size(), std::string(FP4MOE_VERSION).size() + 1 + 12) << id;
  EXPECT_NE(TuningCache::file_for(90).find("tuning-" + id + "-sm_90.json"), std::string::npos);
  const std::string path = fresh("cache_build.json");
  TuningCache::merge_into_file(path, {entry(16, 8)});
  std::string text;
  {
    std::ifstream f(path);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  const std::string other = std::string(FP4MOE_VERSION) + "+000000000000";
  int replaced = 0;
  for (size_t at = text.find(id); at != std::string::npos; at = text.find(id, at + other.size()), ++replaced)
    text.replace(at, id.size(), other);
  ASSERT_EQ(replaced, 2);  // the file's header and its entry
  std::ofstream(path) << text;
  std::vector<std::string> w;
  EXPECT_TRUE(TuningCache::load(path, &w).entries().empty());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("+000000000000, this is " + id + ": ignored"), std::string::npos) << w[0];
  // Listed (cache list / show) with its entries, said to be another build's, never found by this
  // build's identity.
  w.clear();
  const TuningCache any = TuningCache::load(path, &w, TuningCache::Builds::kAny);
  ASSERT_EQ(any.entries().size(), 1u);
  EXPECT_EQ(any.entries()[0].id.library, other);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("+000000000000, this is " + id + ": listed, not used by this build"), std::string::npos) << w[0];
  EXPECT_FALSE(any.find(entry(16, 8).id, entry(16, 8).gemm, 16));
}

// clear's removal waits for a tuner holding the directory's lock and leaves the lock file, so
// the next writer locks the same inode as one still running.
TEST(TuningCache, RemovalTakesTheLock) {
  const std::string path = fresh("cache_remove.json");
  TuningCache::merge_into_file(path, {entry(16, 8)});
  const std::string lock = (fs::path(path).parent_path() / "tuning.lock").string();
  const int fd = ::open(lock.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);  // another open file description: the removal must wait
  std::atomic<bool> started{false}, removed{false};
  std::thread remover([&] {
    started = true;
    TuningCache::remove_file(path);
    removed = true;
  });
  // From the moment the thread is about to remove: a removal that did not wait for the lock has
  // then had 200 ms to happen (a sleep from the thread's creation could pass on a busy machine
  // before the thread ever ran).
  while (!started.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(removed.load()) << "removed while a tuner held the lock";
  EXPECT_TRUE(fs::exists(path));
  ::flock(fd, LOCK_UN);
  ::close(fd);
  remover.join();
  EXPECT_TRUE(removed.load());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::exists(lock));
}

TEST(TuningCache, CorruptAndForeignFilesAreReportedAndIgnored) {
  const std::string path = fresh("cache_bad.json");
  std::ofstream(path) << "{ this is not json";
  std::vector<std::string> w;
  EXPECT_TRUE(TuningCache::load(path, &w).entries().empty());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("corrupt"), std::string::npos) << w[0];
  // A merge over a corrupt file never fails and never overwrites it: the file is moved aside to
  // <path>.rejected, said in a warning, and the merge starts afresh.
  w.clear();
  fs::remove(path + ".rejected");
  EXPECT_EQ(TuningCache::merge_into_file(path, {entry(1, 8)}, &w).entries().size(), 1u);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[1].find("moved aside to " + path + ".rejected"), std::string::npos) << w[1];
  {
    std::ifstream aside(path + ".rejected");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(aside), {}), "{ this is not json");
  }
  EXPECT_EQ(TuningCache::load(path).entries().size(), 1u);
  // A key given twice (which schema does the file have?) is corruption, not the last one's word.
  std::ofstream(path) << R"({"schema": "fp4moe-tuning/1", "schema": "fp4moe-tuning/3", "library": ")" << build_id()
                      << R"(", "entries": []})";
  w.clear();
  EXPECT_TRUE(TuningCache::load(path, &w).entries().empty());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("corrupt tuning cache ignored: key 'schema' given twice"), std::string::npos) << w[0];
  std::ofstream(path) << R"({"schema": "fp4moe-tuning/1", "library": ")" << build_id() << R"(", "entries": []})";
  w.clear();
  EXPECT_TRUE(TuningCache::load(path, &w).entries().empty());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("schema fp4moe-tuning/1, this build reads fp4moe-tuning/3"), std::string::npos) << w[0];
  std::ofstream(path) << R"({"schema": "fp4moe-tuning/3", "library": "0.0.1", "entries": []})";
  w.clear();
  EXPECT_TRUE(TuningCache::load(path, &w).entries().empty());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("0.0.1"), std::string::npos) << w[0];
  std::ofstream(path) << R"({"schema": "fp4moe-tuning/3", "library": ")" << build_id()
                      << R"(", "entries": [{"gpu": "x"}, )" << "{\"gpu\": 3}]}";
  w.clear();
  EXPECT_TRUE(TuningCache::load(path, &w).entries().empty());
  EXPECT_EQ(w.size(), 2u);  // both malformed entries reported
  EXPECT_TRUE(TuningCache::load(fresh("cache_missing.json"), &w).entries().empty());  // no file: fine
  // Header fields of another type: ignored with a warning, never a thrown json type_error.
  for (const char* header : {R"({"schema": 2, "entries": []})", R"({"schema": "fp4moe-tuning/3", "library": 5})"}) {
    std::ofstream(path) << header;
    w.clear();
    EXPECT_NO_THROW(EXPECT_TRUE(TuningCache::load(path, &w).entries().empty())) << header;
    EXPECT_EQ(w.size(), 1u) << header;
  }
  // Entries whose integers would wrap or truncate into another layer's key, or whose time is
  // not a time: skipped, each reported.
  TuningCache::merge_into_file(fresh("cache_ok.json"), {entry(16, 8)});
  std::string good;
  {
    std::ifstream f(test::temp_dir() / "cache_ok.json");
    good.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"experts\": 256", "\"experts\": 4294967552"},
           {"\"experts\": 256", "\"experts\": 256.5"},
           {"\"bucket\": 16", "\"bucket\": -7"},
           {"\"time_us\": 160.0", "\"time_us\": -1.0"}}) {
    const size_t at = good.find(from);
    ASSERT_NE(at, std::string::npos) << from << " in " << good;
    std::string bad = good;
    bad.replace(at, from.size(), to);
    std::ofstream(path) << bad;
    w.clear();
    EXPECT_TRUE(TuningCache::load(path, &w).entries().empty()) << to;
    EXPECT_EQ(w.size(), 1u) << to;
  }
}

// Entries that name what no GEMM could run - a winner of another epilogue, a zero bucket or
// shape - are reported and skipped; so are paths that are not regular files (a FIFO would block
// the open: the load returns at once).
TEST(TuningCache, ImpossibleEntriesAndOddPathsAreReportedAndIgnored) {
  const std::string path = fresh("cache_impossible.json");
  TuningCache::merge_into_file(path, {entry(8, 8)});
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  const std::string good = ss.str();
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in " << t;
    if (at != std::string::npos) t.replace(at, from.size(), to);
    return t;
  };
  std::vector<std::string> w;
  ASSERT_EQ(TuningCache::load(path, &w).entries().size(), 1u);
  ASSERT_TRUE(w.empty());
  const std::pair<std::string, std::string> cases[] = {
      {":swiglu\"", ":finalize\""},  // the winner (the first tactic in the entry)
      {"\"bucket\": 8", "\"bucket\": 0"},
      {"\"k\": 6144", "\"k\": 0"},
  };
  for (const auto& [from, to] : cases) {
    std::ofstream(path, std::ios::trunc) << replaced(from, to);
    w.clear();
    EXPECT_TRUE(TuningCache::load(path, &w).entries().empty()) << to;
    EXPECT_EQ(w.size(), 1u) << to;
  }
  // Nor is such an entry written: what load() would skip is refused with the reason, and the
  // file keeps what it held.
  std::ofstream(path, std::ios::trunc) << good;
  CacheEntry nan_time = entry(8, 8), other_epilogue = entry(8, 8), odd_k = entry(8, 8);
  nan_time.time_us = std::nan("");
  other_epilogue.winner.epilogue = Epilogue::kFinalize;
  odd_k.winner.tile_k = 100;
  for (const CacheEntry& bad : {nan_time, other_epilogue, odd_k}) {
    try {
      TuningCache::merge_into_file(path, {bad});
      ADD_FAILURE() << "an entry load() would skip was written";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not one a cache can hold"), std::string::npos) << e.what();
    }
    EXPECT_EQ(TuningCache::load(path).entries().size(), 1u);
  }
  const std::string fifo = fresh("cache_fifo.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  w.clear();
  EXPECT_TRUE(TuningCache::load(fifo, &w).entries().empty());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("not a regular file"), std::string::npos) << w[0];
  // A merge replaces the FIFO by a cache file (written aside, renamed over it), never blocks.
  w.clear();
  EXPECT_EQ(TuningCache::merge_into_file(fifo, {entry(1, 8)}, &w).entries().size(), 1u);
  EXPECT_TRUE(fs::is_regular_file(fifo));
  w.clear();
  EXPECT_TRUE(TuningCache::load(test::temp_dir().string(), &w).entries().empty());  // a directory
  EXPECT_EQ(w.size(), 1u);
}

// A writer killed between writing its temporary file and renaming it leaves the file behind; a
// later merge removes it once it is ten minutes old (a younger one may be a live writer's where
// the lock is not shared), and leaves other files alone.
TEST(TuningCache, AKilledWritersTemporaryFileIsRemovedByALaterMerge) {
  const std::string path = fresh("cache_stale.json");
  const std::string stale = path + ".tmp.999999999", young = path + ".tmp.999999998", other = path + ".notes";
  std::ofstream(stale) << "{ half a file";
  std::ofstream(young) << "{ being written";
  std::ofstream(other) << "mine";
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::minutes(11));
  fs::last_write_time(other, fs::file_time_type::clock::now() - std::chrono::minutes(11));
  TuningCache::merge_into_file(path, {entry(16, 8)});
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(young));
  EXPECT_TRUE(fs::exists(other));
  fs::remove(young);
  fs::remove(other);
  std::vector<std::string> w;
  EXPECT_EQ(TuningCache::load(path, &w).entries().size(), 1u);
  EXPECT_TRUE(w.empty());
}

TEST(TuningCache, ConcurrentWritersLoseNothing) {
  const std::string path = fresh("cache_concurrent.json");
  constexpr int kPerWriter = 40;
  pid_t kids[2];
  for (int k = 0; k < 2; ++k) {
    kids[k] = fork();
    ASSERT_GE(kids[k], 0);
    if (kids[k] == 0) {
      for (int i = 0; i < kPerWriter; ++i)
        TuningCache::merge_into_file(path, {entry(1000 * (k + 1) + i, 8, k ? "GPU B" : "GPU A")});
      _exit(0);
    }
  }
  for (pid_t p : kids) {
    int status = 0;
    waitpid(p, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::vector<std::string> w;
  const TuningCache c = TuningCache::load(path, &w);
  EXPECT_TRUE(w.empty()) << w[0];
  EXPECT_EQ(c.entries().size(), 2u * kPerWriter);
}

TEST(TuningCache, BucketsAndDirectory) {
  EXPECT_EQ(nearest_bucket(1), 1);
  EXPECT_EQ(nearest_bucket(3), 4);
  EXPECT_EQ(nearest_bucket(5), 4);
  EXPECT_EQ(nearest_bucket(6), 8);
  EXPECT_EQ(nearest_bucket(300), 256);
  EXPECT_EQ(nearest_bucket(512), 512);
  EXPECT_EQ(nearest_bucket(2048), 2048);
  EXPECT_EQ(nearest_bucket(1400), 1024);  // log2 1400 = 10.45
  EXPECT_EQ(nearest_bucket(1500), 2048);  // log2 1500 = 10.55
  EXPECT_EQ(nearest_bucket(600), 512);
  EXPECT_EQ(nearest_bucket(32768), 65536);  // equidistant from 16384 and 65536: the larger
  EXPECT_EQ(nearest_bucket(100000), 65536);
  setenv("FP4MOE_CACHE_DIR", "/tmp/fp4moe-cache-test", 1);
  EXPECT_EQ(TuningCache::directory(), "/tmp/fp4moe-cache-test");
  EXPECT_EQ(TuningCache::file_for(90, "1.2.3"), "/tmp/fp4moe-cache-test/tuning-1.2.3-sm_90.json");
  unsetenv("FP4MOE_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/x", 1);
  EXPECT_EQ(TuningCache::directory(), "/x/fp4moe");
  // A relative XDG_CACHE_HOME is ignored; without HOME the directory is still absolute (the
  // account's home, or /tmp), never one relative to where the process started.
  const char* home = std::getenv("HOME");
  const std::string saved_home = home ? home : "";
  setenv("XDG_CACHE_HOME", "rel", 1);
  setenv("HOME", "/h", 1);
  EXPECT_EQ(TuningCache::directory(), "/h/.cache/fp4moe");
  unsetenv("HOME");
  EXPECT_EQ(TuningCache::directory().front(), '/') << TuningCache::directory();
  EXPECT_NE(TuningCache::directory(), "/h/.cache/fp4moe");
  if (home) setenv("HOME", saved_home.c_str(), 1);
  unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace fp4moe
