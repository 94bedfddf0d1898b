// fp4moe tune: measure every admissible tactic of a layer's GEMMs at each token bucket and store
// the winners in the tuning cache. fp4moe cache path|list|show|clear: inspect or reset it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/cuda_device.h"
#include "cli/printable.h"
#include "cli/shape_options.h"
#include "cli/validators.h"
#include "fp4moe/error.h"
#include "fp4moe/hw.h"
#include "fp4moe/synthetic.h"
#include "fp4moe/tune.h"  // host declarations (TuneOptions' defaults), with or without CUDA
#include "fp4moe/tuning_cache.h"
#include "io/text_file.h"
#ifdef FP4MOE_WITH_CUDA
#include "fp4moe/layer.h"
#endif

namespace fp4moe::cli {
namespace {

struct TuneArgs {
  ShapeArgs shape;
  std::string tokens, json;
  CudaDeviceArg cuda;
  // The library's defaults, not copies of them.
  int iters = TuneOptions{}.iters;
  int finalist_cycles = TuneOptions{}.finalist_cycles;
  int finalist_turn_replays = TuneOptions{}.finalist_turn_replays;
  double finalist_settle_ms = TuneOptions{}.finalist_settle_ms;
  double margin = TuneOptions{}.keep_heuristic_margin;
  bool no_pairs = !TuneOptions{}.time_pairs;
  uint64_t seed = 1;
};

// A cache directory that exists as something else is a misconfiguration to name, not an empty
// cache (the layer would never find what `tune` could not store there).
void require_cache_directory() {
  // (missing, it is made on the first write: unless a part of its path is a file)
  const std::string dir = TuningCache::directory();
  const std::string existing = nearest_existing_path(dir);
  FP4MOE_CHECK(path_kind(existing) == PathKind::kDirectory, dir,
               ": the tuning cache directory (FP4MOE_CACHE_DIR, XDG_CACHE_HOME or HOME) ",
               existing == std::filesystem::absolute(dir).string() ? "is not a directory"
                                                                   : "is under " + existing + ", which is not a directory");
}

#ifdef FP4MOE_WITH_CUDA
// Where tune stores its buckets, made if missing and found writable before the first bucket is
// timed: a read-only home would otherwise end a run of minutes at its first store.
void require_writable_cache_directory() {
  namespace fs = std::filesystem;
  const std::string dir = TuningCache::directory();
  std::error_code ec;
  fs::create_directories(dir, ec);
  FP4MOE_CHECK(!ec, dir, ": cannot create the tuning cache directory (", ec.message(),
               "); set FP4MOE_CACHE_DIR to a writable directory");
  const std::string probe = (fs::path(dir) / (".tune-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  FP4MOE_CHECK(fd >= 0, dir, ": the tuning cache directory is not writable (", std::strerror(errno),
               "); set FP4MOE_CACHE_DIR to a writable directory");
  ::close(fd);
  ::unlink(probe.c_str());
}

// One GEMM's result at a bucket: the winner and runner-up, the other timed tactics, the rejected
// ones with their reasons.
void print_result(const TuneResult& r, double margin) {
  // A finalist's time is the median of its turns' replays; its first pass, a burst after the
  // idle of its verification, says how far such a burst falls from a settled clock.
  auto finalist_note = [](const TimedTactic& c) -> std::string {
    if (c.interleaved_us.empty()) return "";
    char buf[96];
    std::snprintf(buf, sizeof buf, " [finalist: %zu replays in turns; first pass %.1f]", c.interleaved_us.size(),
                  c.first_pass_us);
    return buf;
  };
  std::printf("%s, bucket T=%lld: winner %s, layer %.1f us%s", describe(r.gemm).c_str(),
              static_cast<long long>(r.bucket), format_tactic(r.timed[0].tactic).c_str(), r.timed[0].time_us,
              finalist_note(r.timed[0]).c_str());
  if (r.timed.size() > 1)
    std::printf("; runner-up %s, layer %.1f us (%+.1f%%)%s", format_tactic(r.timed[1].tactic).c_str(),
                r.timed[1].time_us, 100.0 * (r.timed[1].time_us / r.timed[0].time_us - 1),
                finalist_note(r.timed[1]).c_str());
  if (r.heuristic_kept) std::printf("; the heuristic's choice, kept: within the %.1f%% margin", 100 * margin);
  if (r.won_in_pair) std::printf("; won in a pair (below), where alone it was the runner-up");
  std::printf("\n");
  for (size_t i = 2; i < r.timed.size(); ++i)
    std::printf("    %-44s %.1f us%s\n", format_tactic(r.timed[i].tactic).c_str(), r.timed[i].time_us,
                finalist_note(r.timed[i]).c_str());
  for (const auto& x : r.rejected)
    std::printf("    rejected %-35s %s\n", format_tactic(x.tactic).c_str(), x.reason.c_str());
}

// The pairs of a bucket (FC2's result carries them): whole plans timed in turns, the GEMMs' own
// winners first, and which one the cache now holds.
void print_pairs(const TuneResult& fc1, const TuneResult& fc2) {
  for (size_t i = 0; i < fc2.pairs.size(); ++i) {
    const TimedPlan& p = fc2.pairs[i];
    const bool chosen = p.fc1 == fc1.timed[0].tactic && p.fc2 == fc2.timed[0].tactic;
    std::printf("    pair %-36s + %-36s layer %.1f us (%+.1f%%, %zu replays in turns)%s%s\n",
                format_tactic(p.fc1).c_str(), format_tactic(p.fc2).c_str(), p.time_us,
                100.0 * (p.time_us / fc2.pairs[0].time_us - 1), p.interleaved_us.size(),
                i == 0 ? "; the GEMMs' own winners" : "", chosen ? "; chosen" : "");
  }
}

// Every timed and rejected tactic of the buckets finished so far; "complete" is false while the
// run goes on (the file is rewritten after each bucket).
void write_json(const std::string& file, const CacheIdentity& id, double secs, const std::vector<TuneResult>& results,
                bool complete) {
  nlohmann::json j = {{"gpu", id.gpu}, {"seconds", secs}, {"complete", complete}, {"results", nlohmann::json::array()}};
  for (const TuneResult& r : results) {
    nlohmann::json t = nlohmann::json::array(), x = nlohmann::json::array();
    for (const auto& c : r.timed)
      t.push_back({{"tactic", format_tactic(c.tactic)},
                   {"us", c.time_us},
                   {"first_pass_us", c.first_pass_us},
                   {"interleaved_us", c.interleaved_us}});
    for (const auto& c : r.rejected) x.push_back({{"tactic", format_tactic(c.tactic)}, {"reason", c.reason}});
    nlohmann::json pairs = nlohmann::json::array();
    for (const auto& p : r.pairs)
      pairs.push_back({{"fc1", format_tactic(p.fc1)},
                       {"fc2", format_tactic(p.fc2)},
                       {"us", p.time_us},
                       {"interleaved_us", p.interleaved_us}});
    j["results"].push_back({{"gemm", r.gemm.epilogue == Epilogue::kSwiglu ? "fc1" : "fc2"},
                            {"bucket", r.bucket},
                            {"heuristic_kept", r.heuristic_kept},
                            {"won_in_pair", r.won_in_pair},
                            {"timed", t},
                            {"rejected", x},
                            {"pairs", pairs}});
  }
  write_text_file(file, j.dump(1) + "\n");
}
#endif

void run_tune(const TuneArgs& a) {
  const MoeConfig cfg = a.shape.resolve();
  // What the end of a tuning run needs, checked before it: the token list, the JSON's path, a
  // cache directory that is one (or can be made).
  // (tune_layer maps each count to its bucket.)
  const std::vector<int64_t> buckets = a.tokens.empty() ? std::vector<int64_t>{} : parse_token_list(a.tokens);
  require_writable_path(a.json, "--json");
  require_cache_directory();
#ifndef FP4MOE_WITH_CUDA
  (void)cfg;
  (void)buckets;
  FP4MOE_FAIL("tune: this build has no CUDA");
#else
  const auto t0 = std::chrono::steady_clock::now();
  require_writable_cache_directory();
  const CudaEnvironment env = query_cuda_environment();
  const GpuSpec& gpu = require_cuda_device(env, a.cuda, "tune");
  const BuildSupport support = build_support_for(gpu);
  FP4MOE_CHECK(support.runs, "tune: ", support.why);
  SyntheticOptions so;
  so.seed = a.seed;
  const MoeWeights w = make_synthetic_moe(cfg, so);
  LayerOptions lo;
  lo.use_tuning_cache = false;
  lo.device = gpu.device_index;
  std::unique_ptr<GpuMoeLayer> layer = GpuMoeLayer::create(w, lo);
  TuneOptions o;
  o.iters = a.iters;
  o.keep_heuristic_margin = a.margin;
  o.finalist_cycles = a.finalist_cycles;
  o.finalist_turn_replays = a.finalist_turn_replays;
  o.finalist_settle_ms = a.finalist_settle_ms;
  o.time_pairs = !a.no_pairs;
  o.seed = a.seed;
  if (!buckets.empty()) o.buckets = buckets;
  const bool tty = isatty(fileno(stderr));
  o.progress = [tty](const std::string& what, double frac) {
    if (tty) {
      const int width = 30, filled = static_cast<int>(frac * width);
      std::fprintf(stderr, "\r\033[K[%.*s%*s] %3.0f%% %s", filled, "==============================", width - filled,
                   "", frac * 100, what.c_str());
    } else {
      std::fprintf(stderr, "tune %3.0f%% %s\n", frac * 100, what.c_str());
    }
  };
  // Each bucket goes to the cache (and the JSON) as it finishes: a run cut short - a timeout, ^C,
  // a lost machine - keeps the buckets it finished, and its output says how far it got.
  const CacheIdentity& id = layer->cache_identity();
  const std::string path = TuningCache::file_for(id.sm);
  std::printf("tuning %s (H %lld, I %lld, E %d, top-%d) on %s (CUDA device %d); each bucket is stored in %s as it "
              "finishes\n",
              cfg.name.c_str(), static_cast<long long>(cfg.hidden), static_cast<long long>(cfg.intermediate),
              cfg.num_experts, cfg.routing.top_k, id.gpu.c_str(), layer->device(), path.c_str());
  std::fflush(stdout);
  std::vector<TuneResult> finished;
  std::vector<std::string> warnings;  // the cache file's, once each
  auto seconds = [t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  o.on_bucket = [&](const TuneResult& fc1, const TuneResult& fc2) {
    // Shown and in the JSON first: a store that fails (a full disk) loses no measurement.
    if (tty) std::fprintf(stderr, "\r\033[K");
    for (const TuneResult* r : {&fc1, &fc2}) {
      print_result(*r, a.margin);
      finished.push_back(*r);
    }
    print_pairs(fc1, fc2);
    std::fflush(stdout);
    if (!a.json.empty()) write_json(a.json, id, seconds(), finished, false);
    std::vector<std::string> w2;
    TuningCache::merge_into_file(path, cache_entries({fc1, fc2}, id), &w2);
    for (auto& x : w2)
      if (std::find(warnings.begin(), warnings.end(), x) == warnings.end()) warnings.push_back(std::move(x));
  };
  tune_layer(*layer, w, o);
  if (tty) std::fprintf(stderr, "\r\033[K");
  std::printf("tuned %zu buckets in %.1f s (weights, upload and tuning)\n", finished.size() / 2, seconds());
  for (const auto& x : warnings) std::printf("warning: %s\n", printable(x).c_str());  // text from the cache file
  std::printf("wrote %s\n", path.c_str());
  if (!a.json.empty()) write_json(a.json, id, seconds(), finished, true);
#endif
}

// The tuner's files are named tuning-<build id>-sm_<N>.json (TuningCache::file_for); a file a
// tuner would not read is moved aside to the same name + ".rejected" (merge_into_file).
bool is_cache_file_name(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return name.starts_with("tuning-") && (name.ends_with(".json") || name.ends_with(".json.rejected"));
}

struct CacheArgs {
  std::string action;
  std::string file;
  CudaDeviceArg cuda;  // path: whose file
};

void run_cache(const CacheArgs& a) {
  namespace fs = std::filesystem;
  const std::string dir = TuningCache::directory();
  std::vector<std::string> files;
  FP4MOE_CHECK(a.file.empty() || a.action != "path", "cache path: --file goes with list, show or clear");
  FP4MOE_CHECK(!a.cuda.given || a.action == "path", "cache ", a.action, ": --cuda-device goes with path");
  if (a.file.empty() && a.action != "path") require_cache_directory();
  if (!a.file.empty()) {
    // A path given is a cache file, never anything else: `clear` removes it, so it must be named
    // as the tuner names its files, and every action needs it to exist.
    require_regular_file(a.file);
    FP4MOE_CHECK(a.action != "clear" || is_cache_file_name(fs::path(a.file)), "--file ", a.file,
                 ": not a tuning cache file (tuning-*.json or tuning-*.json.rejected); clear removes only those");
    files = {a.file};
  } else if (a.action != "path" && path_kind(dir) == PathKind::kDirectory) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (is_cache_file_name(it->path())) {
        // Only files are cache files: clear removes nothing else (list reports the rest).
        if (a.action == "clear" && path_kind(it->path().string()) != PathKind::kRegularFile) {
          std::printf("skipped %s: not a regular file\n", printable(it->path().string()).c_str());
          continue;
        }
        files.push_back(it->path().string());
      }
    FP4MOE_CHECK(!ec, dir, ": cannot list the tuning cache directory (", ec.message(), ")");
  }
  std::sort(files.begin(), files.end());
  // Each file's entries and warnings, another build's included (listed as not used). A file named
  // by --file that yields nothing but warnings is not a cache at all: an error (in the directory,
  // such a file is listed with its warnings).
  auto load = [&a](const std::string& f, std::vector<std::string>* w) {
    TuningCache c = TuningCache::load(f, w, TuningCache::Builds::kAny);
    FP4MOE_CHECK(a.file.empty() || !c.entries().empty() || w->empty(), "cache ", a.action, ": --file ", f,
                 ": not a tuning cache (", printable(w->front()), ")");
    return c;
  };
  if (a.action == "path") {
    const CudaEnvironment env = query_cuda_environment();
    const GpuSpec* gpu =
        a.cuda.given || !env.devices.empty() ? &require_cuda_device(env, a.cuda, "cache path") : nullptr;
    std::printf("cache directory: %s\n", dir.c_str());
    // The architecture the layer plans for: a build that runs here only as an earlier major
    // version's PTX files its winners under that one (gpu_for_build, as the layer does).
    if (gpu)
      std::printf("CUDA device %d's file (%s): %s\n", gpu->device_index, gpu->name.c_str(),
                  TuningCache::file_for(gpu_for_build(*gpu).sm).c_str());
    return;
  }
  if (a.action == "list") {
    if (files.empty()) std::printf("no tuning cache files in %s\n", dir.c_str());
    for (const auto& f : files) {
      std::vector<std::string> w;
      const TuningCache c = load(f, &w);
      std::printf("%s: %zu %s%s\n", f.c_str(), c.entries().size(), c.entries().size() == 1 ? "entry" : "entries",
                  w.empty() ? "" : " (see warnings)");
      for (const auto& x : w) std::printf("  warning: %s\n", printable(x).c_str());
    }
    return;
  }
  if (a.action == "show") {
    for (const auto& f : files) {
      std::vector<std::string> w;
      const TuningCache c = load(f, &w);
      std::printf("%s\n", f.c_str());
      for (const auto& x : w) std::printf("  warning: %s\n", printable(x).c_str());
      for (const CacheEntry& e : c.entries()) {
        char runner_up[160] = "none";
        if (e.runner_up)
          std::snprintf(runner_up, sizeof runner_up, "%s %.1f us", format_tactic(*e.runner_up).c_str(), e.runner_up_us);
        std::printf("  %s sm_%d %d SMs driver %d build %s | %s T=%-6lld | %s %.1f us | runner-up %s\n",
                    printable(e.id.gpu).c_str(), e.id.sm, e.id.sm_count, e.id.driver, printable(e.id.library).c_str(),
                    describe(e.gemm).c_str(), static_cast<long long>(e.bucket), format_tactic(e.winner).c_str(),
                    e.time_us, runner_up);
      }
    }
    if (files.empty()) std::printf("no tuning cache files in %s\n", dir.c_str());
    return;
  }
  // clear
  for (const auto& f : files) {
    TuningCache::remove_file(f);  // under the tuner's lock, which stays (tuning_cache.h)
    std::printf("removed %s\n", f.c_str());
  }
  if (files.empty()) std::printf("nothing to remove in %s\n", dir.c_str());
}

}  // namespace

void register_tune(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* cmd = app.add_subcommand("tune", "Measure every admissible tactic per GEMM and token bucket; store the winners");
  a->shape.add_to(cmd);
  cmd->add_option("--tokens", a->tokens, "Token counts to tune (each goes to its bucket); default all buckets <= 16384")
      ->check(TokenList());
  cmd->add_option("--iters", a->iters, "Timed layer replays per candidate (median)")->transform(IntegerIn(1, 1000));
  cmd->add_option("--finalist-cycles", a->finalist_cycles,
                  "Cycles in which the finalists (the heuristic's tactic and the fastest within 8%) are timed again, "
                  "one turn each a cycle in shuffled order; they rank by the median of their turns (0: by the first "
                  "pass)")
      ->transform(IntegerIn(0, 1000));
  cmd->add_option("--finalist-turn-replays", a->finalist_turn_replays, "Timed replays of a finalist in each of its turns")
      ->transform(IntegerIn(1, 1000));
  cmd->add_option("--finalist-settle-ms", a->finalist_settle_ms,
                  "Milliseconds a finalist replays untimed at the start of each turn, so that the clock settles to its "
                  "own power draw")
      ->check(FiniteRange(0.0, 10000.0));
  cmd->add_option("--margin", a->margin, "Keep the heuristic's tactic unless a candidate is faster by more than this fraction")
      ->check(FiniteRange(0.0, 0.5));
  cmd->add_flag("--no-pairs", a->no_pairs,
               "Do not time the GEMMs' leading tactics together as whole plans where FC1 kept the heuristic's "
               "tactic over a faster one (the pairs)");
  cmd->add_option("--seed", a->seed, "Seed of the synthetic weights and batches")->transform(WholeNumber<uint64_t>());
  cmd->add_option("--json", a->json, "Also write every timed and rejected tactic as JSON")->check(NonEmptyPath);
  a->cuda.add_to(cmd);
  cmd->callback([a] { run_tune(*a); });

  auto c = std::make_shared<CacheArgs>();
  auto* cc = app.add_subcommand("cache", "The tuning cache: path, list, show or clear");
  cc->add_option("action", c->action, "path | list | show | clear")->required()->check(CLI::IsMember({"path", "list", "show", "clear"}));
  cc->add_option("--file", c->file, "list, show, clear: a cache file instead of every file in the cache directory")
      ->check(NonEmptyPath);
  c->cuda.add_to(cc);
  cc->callback([c] { run_cache(*c); });
}

}  // namespace fp4moe::cli
