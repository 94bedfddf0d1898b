// fp4moe synth: writes a ModelOpt-format NVFP4 checkpoint from seeded random weights.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/shape_options.h"
#include "cli/validators.h"
#include "fp4moe/error.h"
#include "io/modelopt.h"

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
  const auto t0 = std::chrono::steady_clock::now();
  write_synthetic_checkpoint(a.out, cfg, o);
  const double per_layer = (cfg.num_experts * cfg.intermediate + cfg.shared_intermediate) * 3.0 * cfg.hidden * (0.5 + 1.0 / 16);
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
