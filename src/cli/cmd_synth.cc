// fp4moe synth: writes a ModelOpt-format NVFP4 checkpoint from seeded random weights.
#include <sys/statvfs.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "cli/commands.h"
#include "cli/shape_options.h"
#include "cli/validators.h"
#include "fp4moe/error.h"
#include "io/modelopt.h"
#include "io/text_file.h"

namespace fp4moe::cli {
namespace {

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
  const fs::path existing = nearest_existing_path(a.out);
  struct statvfs disk{};
  const double need = a.layers * (per_layer + cfg.num_experts * (cfg.hidden * 2.0 + 4));  // + the router
  if (::statvfs(existing.c_str(), &disk) == 0) {
    const double free_bytes = static_cast<double>(disk.f_bavail) * static_cast<double>(disk.f_frsize);
    FP4MOE_CHECK(need <= free_bytes, "synth: the checkpoint needs ~", std::lround(need / 1e9), " GB on disk; ",
                 std::lround(free_bytes / 1e9), " GB are free at ", existing.string());
  }
  // A run that fails part way (the disk, the memory) takes away what it wrote, rather than leave a
  // config beside cut-off shards that reads as a broken checkpoint: the whole directory where it
  // made it, else the files it writes.
  const bool made_dir = kind == PathKind::kMissing;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    write_synthetic_checkpoint(a.out, cfg, o);
  } catch (...) {
    std::error_code ec;
    if (made_dir) {
      fs::remove_all(a.out, ec);
    } else {
      for (const std::string& f : synthetic_checkpoint_files(a.layers)) fs::remove(fs::path(a.out) / f, ec);
    }
    throw;
  }
  std::printf("wrote %s: %d MoE layer(s) of %s (H %lld, I %lld, E %d, top-%d), %.2f GB of NVFP4 weights, %s init, in %.1f s\n",
              a.out.c_str(), a.layers, cfg.name.c_str(), static_cast<long long>(cfg.hidden),
              static_cast<long long>(cfg.intermediate), cfg.num_experts, cfg.routing.top_k, a.layers * per_layer / 1e9,
              o.init == WeightInit::kQuantizedGaussian ? "quantized-Gaussian" : "random-code",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

void register_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  auto* cmd = app.add_subcommand("synth", "Write a ModelOpt NVFP4 checkpoint (GLM-5 layout) from seeded random weights");
  a->shape.add_to(cmd);
  cmd->add_option("out_dir", a->out, "Directory to write (created)")->required();
  cmd->add_option("--layers", a->layers, "MoE layers")->transform(IntegerIn(1, 1000));
  cmd->add_option("--seed", a->seed, "Seed (layer L uses seed + L)")->transform(WholeNumber<uint64_t>());
  cmd->add_option("--init", a->init, "auto, quantized (Gaussians through the ModelOpt recipe) or random (codes)")
      ->check(CLI::IsMember({"auto", "quantized", "random"}));
  cmd->callback([a] { run_synth(*a); });
}

}  // namespace fp4moe::cli
