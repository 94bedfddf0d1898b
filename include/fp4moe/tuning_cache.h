// fp4moe/tuning_cache.h - the persistent tuning cache and token buckets.
//
// One JSON file per build (fp4moe/build_id.h: the version and a fingerprint of the sources and
// build settings) and architecture under
//   ${FP4MOE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4moe}/tuning-<build id>-sm_<NN>.json
// A winner is a measurement of the kernels, heuristic and code generation that timed it, so
// another build neither reads nor overwrites it. Each entry is keyed by GPU name, sm, SM count,
// driver version, build, the GEMM (output rows, K, epilogue, routing shape) and the token bucket,
// and holds the winning tactic, its time and the runner-up. Writes merge with what is on disk
// under an exclusive lock (flock on the directory's tuning.lock, which is never removed) and
// replace the file atomically (temp file + rename), so concurrent tuners never corrupt it. A
// corrupt or unreadable file or one of another schema or build is reported and ignored - never
// fatal - and a write moves it aside to <file>.rejected instead of overwriting it; entries of
// another GPU or driver are ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp4moe/build_id.h"
#include "fp4moe/moe.h"
#include "fp4moe/tactic.h"

namespace fp4moe {

// Token buckets: every power of two up to 16384, then 65536. Fine steps through 16384 because
// the best plan changes at nearly every doubling there: the decode family's token tile, the
// switch to the prefill family (at 320-512 on the H200's presets today; at 1024 when the buckets
// were measured) and its tile width at 2048 -> 4096. With coarser
// steps above 256 (1024, 4096, 16384) the H200 measured a cached plan 12% slower than the
// heuristic at T = 512 (bucket 1024's prefill FC2) and 9% at T = 2048 (bucket 4096's 256-token
// tiles). A batch looks up the nearest bucket in log2 distance; a tie (only 32768) goes to the
// larger bucket.
const std::vector<int64_t>& token_buckets();
int64_t nearest_bucket(int64_t tokens);

// One grouped GEMM of a layer. The routing shape belongs to it: at a given batch size the
// tokens per expert (T k / E), and so the best token tile, follow from E and k, the shared
// expert adds a group that every token visits, and the small-batch and fused families run the
// routing itself inside their kernels (softmax or grouped sigmoid, over n_group groups).
struct GemmKey {
  int64_t n_out = 0;  // output rows of the GEMM (FC1: 2 I; FC2: H)
  int64_t k = 0;      // reduction (FC1: H; FC2: I)
  Epilogue epilogue = Epilogue::kNone;
  int experts = 0;    // routed experts E
  int top_k = 0;      // experts per token
  bool shared_expert = false;
  RoutingMode routing = RoutingMode::kSigmoidNoAuxTc;
  int n_group = 1;     // routing groups ...
  int topk_group = 1;  // ... and how many of them compete
  constexpr bool operator==(const GemmKey&) const = default;
};

// The keys of a layer's two GEMMs: FC1 (2 I x H, swiglu) and FC2 (H x I, finalize).
GemmKey fc1_key(const MoeConfig& cfg);
GemmKey fc2_key(const MoeConfig& cfg);
// "FC1 4096 x 6144 swiglu (E 256, top-8, shared)": for tables and logs.
std::string describe(const GemmKey& g);

struct CacheIdentity {  // what makes a measurement valid
  std::string gpu;      // device name
  int sm = 0;
  int sm_count = 0;     // SMs the layer's device offers (a partitioned GPU has fewer)
  int driver = 0;       // cudaDriverGetVersion
  std::string library;  // build_id(): the version and the sources' fingerprint
  constexpr bool operator==(const CacheIdentity&) const = default;
};

struct CacheEntry {
  CacheIdentity id;
  GemmKey gemm;
  int64_t bucket = 0;
  Tactic winner;
  double time_us = 0;  // the whole layer at the bucket with the winner in this GEMM (CUDA graph, cold L2)
  std::optional<Tactic> runner_up;
  double runner_up_us = 0;
};

class TuningCache {
 public:
  // The cache directory (environment as above) and the file of a build and architecture.
  static std::string directory();
  static std::string file_for(int sm, const std::string& build = build_id());

  // Which files' entries load() takes: this build's only (what planning and merging use: another
  // build's kernels may differ, so its winners are not this build's), or any build's (to list
  // them, with a warning that this build does not use them).
  enum class Builds { kThisOne, kAny };
  // Loads `path`; problems go to `warnings` (one line each) and the bad parts are skipped.
  static TuningCache load(const std::string& path, std::vector<std::string>* warnings = nullptr,
                          Builds builds = Builds::kThisOne);
  // The same from a file's text (`label` names it in the warnings): never throws on any text.
  static TuningCache from_text(const std::string& text, const std::string& label,
                               std::vector<std::string>* warnings = nullptr, Builds builds = Builds::kThisOne);

  // Entries for this identity only; nullopt when none.
  std::optional<CacheEntry> find(const CacheIdentity& id, const GemmKey& g, int64_t bucket) const;
  // The entry of the nearest bucket (for a batch size), for this identity.
  std::optional<CacheEntry> lookup(const CacheIdentity& id, const GemmKey& g, int64_t tokens) const;

  const std::vector<CacheEntry>& entries() const { return entries_; }
  // Counts the entries measured on another GPU, driver or build: they are ignored by
  // find()/lookup(); this lets a caller report them.
  int foreign_entries(const CacheIdentity& id) const;
  void put(const CacheEntry& e);  // replaces the entry of the same identity, GEMM and bucket

  // Merges `entries` into the file under a lock and replaces it atomically. Returns the file's
  // entries after the merge.
  // A file that load() ignores as a whole (unreadable, corrupt, another schema or build) is
  // renamed to <path>.rejected first, with a warning: it is not overwritten.
  static TuningCache merge_into_file(const std::string& path, const std::vector<CacheEntry>& entries,
                                     std::vector<std::string>* warnings = nullptr);
  // Removes a cache file under the directory's lock (a tuner merging into it finishes first);
  // the lock's side file stays.
  static void remove_file(const std::string& path);

 private:
  std::string path_;
  bool rejected_ = false;  // the file was ignored as a whole
  std::vector<CacheEntry> entries_;
};

}  // namespace fp4moe
