// fp4moe synth: writes a ModelOpt-format NVFP4 checkpoint from seeded random weights.
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>

#include "cli/commands.h"
#include "cli/shape_options.h"
#include "cli/validators.h"
#include "common/byte_size.h"
#include "fp4moe/error.h"
#include "io/json_document.h"
#include "io/modelopt.h"
#include "io/text_file.h"

namespace fp4moe::cli {
namespace {

// Whether `dir` holds a checkpoint this command wrote: its hf_quant_config.json names the
// producer "fp4moe synthetic". Only such a directory (or an empty one) is written into: another
// checkpoint's config and shards would be replaced without a word.
bool is_synth_output(const std::filesystem::path& dir) {
  try {
    const std::string file = (dir / "hf_quant_config.json").string();
    const std::optional<std::string> text = read_text_file(file);
    if (!text) return false;
    const nlohmann::json j = parse_json_document(*text, file);
    return j.is_object() && j.contains("producer") && j["producer"].is_object() &&
           j["producer"].value("version", "") == "fp4moe synthetic";
  } catch (const std::exception&) {  // not a regular file, too large, unreadable, not JSON: not ours
    return false;
  }
}

// Shard names as the writer gives them ("model-00001-of-00002.safetensors"): "model-", five
// digits, "-of-", five digits, ".safetensors". (Matched by hand: std::regex drew GCC 12's
// -Wmaybe-uninitialized from its own headers in the sanitized build.)
bool is_shard_name(const std::string& name) {
  const std::string_view n = name;
  auto digits = [&](size_t at) {  // (within the 32 characters checked first)
    return std::all_of(n.begin() + at, n.begin() + at + 5, [](char c) { return c >= '0' && c <= '9'; });
  };
  return n.size() == 32 && n.substr(0, 6) == "model-" && digits(6) && n.substr(11, 4) == "-of-" && digits(15) &&
         n.substr(20) == ".safetensors";
}

struct SynthArgs {
  ShapeArgs shape;
  std::string out;
  int layers = 1;
  uint64_t seed = 1;
  std::string init = "auto";
};

void run_synth(const SynthArgs& a) {
  const MoeConfig cfg = a.shape.resolve();
  SynthCheckpointOptions o;
  o.layers = a.layers;
  o.seed = a.seed;
  // Quantizing Gaussians is exact ModelOpt but slow at full GLM-5 size; random codes stream.
  const bool small = cfg.hidden * cfg.intermediate * cfg.num_experts <= (int64_t{1} << 26);
  o.init = a.init == "quantized" || (a.init == "auto" && small) ? WeightInit::kQuantizedGaussian : WeightInit::kRandomCodes;
  const double per_layer = (cfg.num_experts * cfg.intermediate + cfg.shared_intermediate) * 3.0 * cfg.hidden * (0.5 + 1.0 / 16);
  // What the checkpoint needs on disk, checked before a byte is written: a shape too large for
  // the disk filled it before failing.
  const PathKind kind = path_kind(a.out);
  FP4MOE_CHECK(kind == PathKind::kMissing || kind == PathKind::kDirectory, "out_dir: ", a.out, " is not a directory");
  namespace fs = std::filesystem;
  // An existing directory: empty, or an earlier synth's output (whose shards all go: a run of
  // fewer layers must not leave the earlier run's beside its own).
  std::vector<fs::path> stale_shards;
  if (kind == PathKind::kDirectory) {
    std::error_code ec;
    const bool empty = fs::is_empty(a.out, ec);
    FP4MOE_CHECK(!ec, "out_dir: ", a.out, ": cannot list it (", ec.message(), ")");
    FP4MOE_CHECK(empty || is_synth_output(a.out), "out_dir: ", a.out,
                 " is not empty and holds no checkpoint of fp4moe synth (its hf_quant_config.json would name the "
                 "producer 'fp4moe synthetic'): give a new or empty directory");
    for (fs::directory_iterator it(a.out, ec), end; !ec && it != end; it.increment(ec))
      if (is_shard_name(it->path().filename().string())) stale_shards.push_back(it->path());
    FP4MOE_CHECK(!ec, "out_dir: ", a.out, ": cannot list it (", ec.message(), ")");
  }
  const fs::path existing = nearest_existing_path(a.out);
  FP4MOE_CHECK(path_kind(existing.string()) == PathKind::kDirectory, "out_dir: ", a.out, ": ", existing.string(),
               " is not a directory");
  FP4MOE_CHECK(::access(existing.c_str(), W_OK | X_OK) == 0, "out_dir: ", a.out, ": ", existing.string(),
               " is not writable (", std::strerror(errno), ")");
  struct statvfs disk{};
  const double need = a.layers * (per_layer + cfg.num_experts * (cfg.hidden * 2.0 + 4));  // + the router
  if (::statvfs(existing.c_str(), &disk) == 0) {
    const double free_bytes = static_cast<double>(disk.f_bavail) * static_cast<double>(disk.f_frsize);
    FP4MOE_CHECK(free_bytes > 0, "out_dir: ", a.out, ": the filesystem of ", existing.string(),
                 " has no space to write to (a full disk, or a special filesystem such as /proc)");
    FP4MOE_CHECK(need <= free_bytes, "synth: the checkpoint needs ~", byte_size(need), " on disk; ", byte_size(free_bytes),
                 " are free at ", existing.string());
  }
  // A run that fails part way (the disk, the memory) takes away what it wrote, rather than leave a
  // config beside cut-off shards that reads as a broken checkpoint: the whole directory where it
  // made it, else the files it writes.
  const bool made_dir = kind == PathKind::kMissing;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (const fs::path& f : stale_shards) fs::remove(f);  // (throws naming the file where it cannot)
    write_synthetic_checkpoint(a.out, cfg, o);
  } catch (...) {
    std::error_code ec;
    if (made_dir) {
      fs::remove_all(a.out, ec);
    } else {  // empty before, or an earlier synth's (whose shards are gone by now)
      for (const std::string& f : synthetic_checkpoint_files(a.layers)) fs::remove(fs::path(a.out) / f, ec);
    }
    throw;
  }
  std::printf("wrote %s: %d MoE layer(s) of %s (H %lld, I %lld, E %d, top-%d), %s of NVFP4 weights, %s init, in %.1f s\n",
              a.out.c_str(), a.layers, cfg.name.c_str(), static_cast<long long>(cfg.hidden),
              static_cast<long long>(cfg.intermediate), cfg.num_experts, cfg.routing.top_k, byte_size(a.layers * per_layer).c_str(),
              o.init == WeightInit::kQuantizedGaussian ? "quantized-Gaussian" : "random-code",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

void register_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  auto* cmd = app.add_subcommand("synth", "Write a ModelOpt NVFP4 checkpoint (GLM-5 layout) from seeded random weights");
  a->shape.add_to(cmd);
  cmd->add_option("out_dir", a->out, "Directory to write: new, empty, or an earlier synth's output (replaced)")
      ->required()
      ->check(NonEmptyPath);
  cmd->add_option("--layers", a->layers, "MoE layers")->transform(IntegerIn(1, 1000));
  cmd->add_option("--seed", a->seed, "Seed (layer L uses seed + L)")->transform(WholeNumber<uint64_t>());
  cmd->add_option("--init", a->init, "auto, quantized (Gaussians through the ModelOpt recipe) or random (codes)")
      ->check(CLI::IsMember({"auto", "quantized", "random"}));
  cmd->callback([a] { run_synth(*a); });
}

}  // namespace fp4moe::cli
