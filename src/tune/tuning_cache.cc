// The persistent tuning cache (see include/fp4moe/tuning_cache.h).
#include "fp4moe/tuning_cache.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fp4moe/error.h"
#include "io/json_document.h"
#include "io/text_file.h"

namespace fp4moe {
namespace {

using json = nlohmann::json;
constexpr const char* kSchema = "fp4moe-tuning/3";  // 2: the routing shape joined the GEMM key;
                                                    // 3: the routing mode and groups, the SM count
                                                    // and the build fingerprint

json to_json(const CacheEntry& e) {
  json j = {{"gpu", e.id.gpu},
            {"sm", e.id.sm},
            {"sm_count", e.id.sm_count},
            {"driver", e.id.driver},
            {"library", e.id.library},
            {"gemm",
             {{"n_out", e.gemm.n_out},
              {"k", e.gemm.k},
              {"epilogue", to_string(e.gemm.epilogue)},
              {"experts", e.gemm.experts},
              {"top_k", e.gemm.top_k},
              {"shared_expert", e.gemm.shared_expert},
              {"routing", to_string(e.gemm.routing)},
              {"n_group", e.gemm.n_group},
              {"topk_group", e.gemm.topk_group}}},
            {"bucket", e.bucket},
            {"winner", format_tactic(e.winner)},
            {"time_us", e.time_us}};
  if (e.runner_up) {
    j["runner_up"] = format_tactic(*e.runner_up);
    j["runner_up_us"] = e.runner_up_us;
  }
  return j;
}

RoutingMode routing_from(const std::string& s) {
  for (RoutingMode m : {RoutingMode::kSoftmaxTopK, RoutingMode::kSigmoidNoAuxTc})
    if (s == to_string(m)) return m;
  FP4MOE_FAIL("unknown routing '", s, "'");
}

Epilogue epilogue_from(const std::string& s) {
  if (s == "none") return Epilogue::kNone;
  if (s == "swiglu") return Epilogue::kSwiglu;
  if (s == "finalize") return Epilogue::kFinalize;
  FP4MOE_FAIL("unknown epilogue '", s, "'");
}

// An integer field within [lo, hi]: nlohmann's get<int> would take 4294967552 as 256 and 16.5
// as 16, and such an entry could then match another layer's key.
template <typename T>
T integer(const json& j, const char* key, T lo, T hi) {
  const json& v = j.at(key);
  FP4MOE_CHECK(v.is_number_integer(), "'", key, "' is not an integer");
  // nlohmann stores every non-negative integer it parses as unsigned: both bounds apply there too.
  FP4MOE_CHECK(v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                            (lo <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(lo))
                                      : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
               "'", key, "' = ", v.dump(), " is outside [", lo, ", ", hi, "]");
  return static_cast<T>(v.get<int64_t>());
}

double time_field(const json& j, const char* key) {
  const json& v = j.at(key);
  FP4MOE_CHECK(v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>()), "'", key,
               "' is not a positive time");
  return v.get<double>();
}

CacheEntry from_json(const json& j) {
  constexpr int64_t kBig = int64_t{1} << 40;
  CacheEntry e;
  const json& g = j.at("gemm");
  e.id.gpu = j.at("gpu").get<std::string>();
  e.id.sm = integer<int>(j, "sm", 0, 1000);
  e.id.sm_count = integer<int>(j, "sm_count", 1, 1 << 20);
  e.id.driver = integer<int>(j, "driver", 0, 1 << 30);
  e.id.library = j.at("library").get<std::string>();
  e.gemm.n_out = integer<int64_t>(g, "n_out", 1, kBig);
  e.gemm.k = integer<int64_t>(g, "k", 1, kBig);
  e.gemm.epilogue = epilogue_from(g.at("epilogue").get<std::string>());
  e.gemm.experts = integer<int>(g, "experts", 1, 1 << 20);
  e.gemm.top_k = integer<int>(g, "top_k", 1, 1 << 20);
  e.gemm.shared_expert = g.at("shared_expert").get<bool>();
  e.gemm.routing = routing_from(g.at("routing").get<std::string>());
  e.gemm.n_group = integer<int>(g, "n_group", 1, 1 << 20);
  e.gemm.topk_group = integer<int>(g, "topk_group", 1, 1 << 20);
  e.bucket = integer<int64_t>(j, "bucket", 1, kBig);
  // A tactic of another epilogue could not run this GEMM: the entry is corrupt, not a plan.
  auto tactic_for_gemm = [&](const char* key) {
    const Tactic t = parse_tactic(j.at(key).get<std::string>());
    FP4MOE_CHECK(t.epilogue == e.gemm.epilogue, "'", key, "' ", format_tactic(t), " has epilogue ",
                 to_string(t.epilogue), ", the GEMM's is ", to_string(e.gemm.epilogue));
    return t;
  };
  e.winner = tactic_for_gemm("winner");
  e.time_us = time_field(j, "time_us");
  if (j.contains("runner_up")) {
    e.runner_up = tactic_for_gemm("runner_up");
    e.runner_up_us = time_field(j, "runner_up_us");
  }
  return e;
}

// A string member, or `fallback` where it is absent or of another type (the header checks
// below must warn, never throw: a corrupt file is ignored).
std::string string_member(const json& j, const char* key, const std::string& fallback) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}

bool same_slot(const CacheEntry& a, const CacheEntry& b) {
  return a.id == b.id && a.gemm == b.gemm && a.bucket == b.bucket;
}

// Parses file text; problems are warnings, never errors. *rejected: the file was ignored as a
// whole (not one of this schema and build), as opposed to some of its entries.
std::vector<CacheEntry> parse(const std::string& text, const std::string& path, std::vector<std::string>* w,
                              bool* rejected, TuningCache::Builds builds) {
  std::vector<CacheEntry> out;
  auto warn = [&](const std::string& m) { if (w) w->push_back(path + ": " + m); };
  auto reject = [&](const std::string& m) {
    warn(m);
    *rejected = true;
    return out;
  };
  json j;
  try {
    j = parse_json_document(text, "corrupt tuning cache ignored");
  } catch (const Error& e) {
    return reject(e.what());
  }
  if (!j.is_object() || string_member(j, "schema", "") != kSchema)
    return reject((j.is_object() && j.contains("schema") ? "schema " + string_member(j, "schema", "?")
                                                         : std::string("no schema field")) +
                  ", this build reads " + kSchema + ": ignored");
  if (string_member(j, "library", "") != build_id()) {
    const std::string other = "written by fp4moe " + string_member(j, "library", "?") + ", this is " + build_id();
    if (builds == TuningCache::Builds::kThisOne) return reject(other + ": ignored");
    warn(other + ": listed, not used by this build");
  }
  if (!j.contains("entries") || !j["entries"].is_array()) return reject("no entries array: ignored");
  for (const auto& e : j["entries"]) {
    try {
      out.push_back(from_json(e));
    } catch (const std::exception& ex) {
      warn(std::string("malformed entry skipped (") + ex.what() + ")");
    }
  }
  return out;
}

std::string render(const std::vector<CacheEntry>& entries, int sm) {
  json j = {{"schema", kSchema}, {"library", build_id()}, {"arch", "sm_" + std::to_string(sm)}};
  j["entries"] = json::array();
  for (const auto& e : entries) j["entries"].push_back(to_json(e));
  return j.dump(1) + "\n";
}

}  // namespace

namespace {
GemmKey gemm_key(const MoeConfig& cfg, int64_t n_out, int64_t k, Epilogue epilogue) {
  return GemmKey{n_out,
                 k,
                 epilogue,
                 cfg.num_experts,
                 cfg.routing.top_k,
                 cfg.has_shared_expert(),
                 cfg.routing.mode,
                 cfg.routing.n_group,
                 cfg.routing.topk_group};
}
}  // namespace

GemmKey fc1_key(const MoeConfig& cfg) { return gemm_key(cfg, 2 * cfg.intermediate, cfg.hidden, Epilogue::kSwiglu); }

GemmKey fc2_key(const MoeConfig& cfg) { return gemm_key(cfg, cfg.hidden, cfg.intermediate, Epilogue::kFinalize); }

std::string describe(const GemmKey& g) {
  std::ostringstream o;
  o << (g.epilogue == Epilogue::kFinalize ? "FC2 " : g.epilogue == Epilogue::kSwiglu ? "FC1 " : "GEMM ") << g.n_out
    << " x " << g.k << " " << to_string(g.epilogue) << " (E " << g.experts << ", top-" << g.top_k
    << (g.shared_expert ? ", shared, " : ", ") << to_string(g.routing);
  if (g.n_group > 1) o << " " << g.topk_group << " of " << g.n_group << " groups";
  o << ")";
  return o.str();
}

const std::vector<int64_t>& token_buckets() {
  static const std::vector<int64_t> b = {1,   2,    4,    8,    16,   32,    64,    128,
                                         256, 512, 1024, 2048, 4096, 8192, 16384, 65536};
  return b;
}

int64_t nearest_bucket(int64_t tokens) {
  FP4MOE_CHECK(tokens >= 1, "nearest_bucket: tokens must be >= 1");
  const double lt = std::log2(static_cast<double>(tokens));
  int64_t best = token_buckets().front();
  double best_d = 1e30;
  for (int64_t b : token_buckets()) {
    const double d = std::fabs(std::log2(static_cast<double>(b)) - lt);
    if (d <= best_d + 1e-12) {  // ties go to the larger bucket (see tuning_cache.h)
      best_d = d;
      best = b;
    }
  }
  return best;
}

std::string TuningCache::directory() {
  if (const char* d = std::getenv("FP4MOE_CACHE_DIR"); d && *d) return d;
  // XDG: a relative XDG_CACHE_HOME is invalid and ignored.
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return std::string(x) + "/fp4moe";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/fp4moe";
  // No HOME (a service's environment): the account's home directory, never the directory the
  // process happened to start in; without one, a directory of the user's own under /tmp.
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found && found->pw_dir &&
      found->pw_dir[0] == '/')
    return std::string(found->pw_dir) + "/.cache/fp4moe";
  return "/tmp/fp4moe-cache-" + std::to_string(getuid());
}

std::string TuningCache::file_for(int sm, const std::string& build) {
  return directory() + "/tuning-" + build + "-sm_" + std::to_string(sm) + ".json";
}

TuningCache TuningCache::load(const std::string& path, std::vector<std::string>* warnings, Builds builds) {
  TuningCache c;
  c.path_ = path;
  // Only a regular file of a sane size is read (a FIFO would block the open, /dev/zero never
  // end); anything else is reported and ignored like a corrupt file.
  std::optional<std::string> text;
  try {
    text = read_text_file(path);
  } catch (const Error& e) {
    if (warnings) warnings->push_back(std::string(e.what()) + "; ignored");
    // A regular file there but not readable (permissions, size) is kept: a write moves it aside.
    // Anything else (a FIFO) a write replaces, and a directory it cannot.
    c.rejected_ = path_kind(path) == PathKind::kRegularFile;
    return c;
  }
  if (!text) return c;  // no cache yet
  return from_text(*text, path, warnings, builds);
}

TuningCache TuningCache::from_text(const std::string& text, const std::string& label,
                                   std::vector<std::string>* warnings, Builds builds) {
  TuningCache c;
  c.path_ = label;
  c.entries_ = parse(text, label, warnings, &c.rejected_, builds);
  return c;
}

std::optional<CacheEntry> TuningCache::find(const CacheIdentity& id, const GemmKey& g, int64_t bucket) const {
  for (const auto& e : entries_)
    if (e.id == id && e.gemm == g && e.bucket == bucket) return e;
  return std::nullopt;
}

std::optional<CacheEntry> TuningCache::lookup(const CacheIdentity& id, const GemmKey& g, int64_t tokens) const {
  return find(id, g, nearest_bucket(tokens));
}

int TuningCache::foreign_entries(const CacheIdentity& id) const {
  int n = 0;
  for (const auto& e : entries_) n += !(e.id == id);
  return n;
}

void TuningCache::put(const CacheEntry& e) {
  // Only what load() would read back: an entry it skipped as malformed (a NaN time, a winner of
  // another epilogue, a tactic out of its ranges) would be a result lost without a word.
  try {
    from_json(to_json(e));
  } catch (const std::exception& ex) {
    FP4MOE_FAIL("tuning cache: the entry for ", describe(e.gemm), " T=", e.bucket, " is not one a cache can hold (",
                ex.what(), ")");
  }
  for (auto& x : entries_)
    if (same_slot(x, e)) {
      x = e;
      return;
    }
  entries_.push_back(e);
}

namespace {
// The exclusive lock of the cache files of one directory: flock on its side file tuning.lock,
// held while a file is read, merged and replaced, moved aside, or removed. One per directory, not
// per file, since file names change with every build; and never removed: a writer holding the
// lock of an unlinked inode would no longer exclude the next one, which locks a new file.
class CacheFileLock {
 public:
  explicit CacheFileLock(const std::string& path)
      : lock_path_((std::filesystem::path(path).parent_path() / "tuning.lock").string()) {
    // Read-write where it can (NFS's emulated flock wants it), read-only where another user
    // created the file in a shared directory: a local flock needs no write access.
    // Where neither opens, the first refusal is the one to name: a directory the user cannot
    // write to without the lock file in it fails the read-only open with ENOENT, which would
    // send the user looking for a missing file instead of at the directory's permissions.
    fd_ = ::open(lock_path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
    const int first_errno = errno;
    if (fd_ < 0 && first_errno == EACCES) fd_ = ::open(lock_path_.c_str(), O_RDONLY | O_CLOEXEC);
    FP4MOE_CHECK(fd_ >= 0, lock_path_, ": cannot open the lock file (", std::strerror(first_errno), ")");
    if (::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      FP4MOE_FAIL(lock_path_, ": cannot lock");
    }
  }
  ~CacheFileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  CacheFileLock(const CacheFileLock&) = delete;
  CacheFileLock& operator=(const CacheFileLock&) = delete;

 private:
  std::string lock_path_;
  int fd_ = -1;
};
// `text` into a new file at `path` (one this process names: refused if it exists or is a link),
// on the disk before this returns: renamed over the cache afterwards, a file whose data were
// still in the page cache would after a crash be an empty cache, and every entry lost. On any
// failure the file is removed and the error names it.
void write_durably(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
  FP4MOE_CHECK(fd >= 0, path, ": cannot write (", std::strerror(errno), ")");
  const char* p = text.data();
  size_t left = text.size();
  int err = 0;
  while (left > 0 && err == 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) err = n < 0 ? errno : EIO;
    else {
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(path.c_str());
    FP4MOE_FAIL(path, ": write failed (", std::strerror(err), ")");
  }
}

// The directory's entries (a rename into it) on the disk. Where the file system does not sync
// directories (EINVAL), there is nothing more to do.
void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the rename is done; only its durability is unconfirmed
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  FP4MOE_CHECK(rc == 0 || err == EINVAL || err == EROFS, dir, ": cannot sync the directory (", std::strerror(err), ")");
}

}  // namespace

void TuningCache::remove_file(const std::string& path) {
  const CacheFileLock lock(path);  // a tuner merging into it finishes first, or starts after
  std::error_code ec;
  std::filesystem::remove(path, ec);
  FP4MOE_CHECK(!ec, path, ": cannot remove (", ec.message(), ")");
}

TuningCache TuningCache::merge_into_file(const std::string& path, const std::vector<CacheEntry>& entries,
                                         std::vector<std::string>* warnings) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  FP4MOE_CHECK(!ec, p.parent_path().string(), ": cannot create the cache directory (", ec.message(), ")");
  const CacheFileLock lock(path);
  TuningCache merged = load(path, warnings);
  if (merged.rejected_) {
    // A corrupt or unreadable file (or another schema's) at this name: kept, not overwritten
    // (an earlier .rejected copy is replaced: what it held was not readable either).
    const std::string aside = path + ".rejected";
    fs::rename(p, aside, ec);
    FP4MOE_CHECK(!ec, path, ": cannot move the unreadable cache file aside (", ec.message(), ")");
    if (warnings) warnings->push_back(path + ": moved aside to " + aside);
    merged = TuningCache{};
  }
  for (const auto& e : entries) merged.put(e);
  const int sm = entries.empty() ? (merged.entries_.empty() ? 0 : merged.entries_[0].id.sm) : entries[0].id.sm;
  // A temporary file exists only while its writer holds the lock, for the moments of one write:
  // one ten minutes old is what a killed writer left, and goes. (Not any found now: where the lock
  // is not shared - NFS without working flock, two hosts - a younger one may be a live writer's.)
  const std::string tmp_prefix = p.filename().string() + ".tmp.";
  const auto stale_before = fs::file_time_type::clock::now() - std::chrono::minutes(10);
  for (fs::directory_iterator it(p.has_parent_path() ? p.parent_path() : fs::path("."), ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code ignored;  // a file another user owns stays: this write does not need its name
    if (it->path().filename().string().starts_with(tmp_prefix) && it->is_regular_file(ignored) &&
        fs::last_write_time(it->path(), ignored) < stale_before)
      fs::remove(it->path(), ignored);
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  write_durably(tmp, render(merged.entries_, sm));
  fs::rename(tmp, path, ec);  // atomic replacement: readers see the old or the new file, whole
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);  // no temporary file left behind
    FP4MOE_FAIL(path, ": cannot replace the cache file (", ec.message(), ")");
  }
  sync_directory(p.has_parent_path() ? p.parent_path().string() : ".");  // the rename itself survives a crash
  merged.path_ = path;
  return merged;
}

}  // namespace fp4moe
