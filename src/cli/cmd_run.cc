// fp4moe run: one MoE layer on seeded random NVFP4 weights (full preset shapes), computed by
// the CPU reference; prints the time and an output checksum.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/shape_options.h"
#include "common/parallel.h"
#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/synthetic.h"

namespace fp4moe::cli {
namespace {

struct RunArgs {
  ShapeArgs shape;
  int64_t tokens = 4;
  uint64_t seed = 1;
  int threads = 0;
  double skew = 0;
};

// FNV-1a over the bf16 bits of the output: equal outputs give equal checksums.
uint64_t bf16_checksum(const std::vector<double>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (double d : v) {
    const uint16_t b = Bf16::from_float(static_cast<float>(d)).bits;
    h = (h ^ (b & 0xFF)) * 0x100000001b3ull;
    h = (h ^ (b >> 8)) * 0x100000001b3ull;
  }
  return h;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run_layer(const RunArgs& a) {
  const MoeConfig cfg = a.shape.resolve();
  FP4MOE_CHECK(a.tokens >= 1, "--tokens must be >= 1, got ", a.tokens);
  const int threads = a.threads > 0 ? a.threads : default_thread_count();
  std::printf("layer %s: H %lld, I %lld, E %d, top-%d %s (n_group %d, topk_group %d, scale %.2f)"
              ", shared expert I %lld\n",
              cfg.name.c_str(), static_cast<long long>(cfg.hidden),
              static_cast<long long>(cfg.intermediate), cfg.num_experts, cfg.routing.top_k,
              to_string(cfg.routing.mode), cfg.routing.n_group, cfg.routing.topk_group,
              cfg.routing.routed_scaling_factor, static_cast<long long>(cfg.shared_intermediate));

  // The router is part of the layer: make it first, route, then materialise only the experts
  // that received tokens (a full GLM-5 layer holds 5.4 GB of NVFP4 weights).
  SyntheticOptions so;
  so.seed = a.seed;
  so.threads = threads;
  so.materialize.assign(cfg.num_experts, false);
  MoeWeights w = make_synthetic_moe(cfg, so);
  const std::vector<float> hidden = make_hidden_states(a.tokens, cfg.hidden, a.seed);
  std::vector<float> logits = router_logits_reference(hidden, a.tokens, w);
  if (a.skew > 0) {
    const std::vector<float> bias = make_router_logits(1, cfg.num_experts, a.seed, a.skew);
    for (int64_t t = 0; t < a.tokens; ++t)
      for (int e = 0; e < cfg.num_experts; ++e) logits[t * cfg.num_experts + e] += bias[e];
  }
  const Routing routing =
      route_reference(cfg.routing, logits, a.tokens, cfg.num_experts, w.correction_bias);
  std::vector<bool> active(cfg.num_experts, false);
  int n_active = 0;
  for (int32_t e : routing.ids) {
    if (!active[e]) ++n_active;
    active[e] = true;
  }
  so.materialize = active;
  so.router = false;
  const auto t_gen = std::chrono::steady_clock::now();
  MoeWeights experts = make_synthetic_moe(cfg, so);
  w.experts = std::move(experts.experts);
  w.shared = std::move(experts.shared);
  const double expert_bytes =
      (3.0 * cfg.hidden * cfg.intermediate) * (0.5 + 1.0 / kNvfp4BlockSize);
  std::printf("tokens %lld: %lld (token, expert) pairs on %d of %d experts; weights: seeded random"
              " NVFP4 (seed %llu), %.2f GB materialised in %.2f s\n",
              static_cast<long long>(a.tokens), static_cast<long long>(a.tokens * cfg.routing.top_k),
              n_active, cfg.num_experts, static_cast<unsigned long long>(a.seed),
              n_active * expert_bytes / 1e9, seconds_since(t_gen));

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<double> out =
      moe_reference(w, hidden, a.tokens, routing, ReferenceOptions{threads});
  const double secs = seconds_since(t0);
  double sum_abs = 0, max_abs = 0;
  for (double v : out) {
    sum_abs += std::fabs(v);
    max_abs = std::max(max_abs, std::fabs(v));
  }
  std::printf("cpu reference (float64, %d threads): %.3f s\n", threads, secs);
  std::printf("output [%lld, %lld]: checksum %016llx  mean |out| %.6f  max |out| %.6f\n",
              static_cast<long long>(a.tokens), static_cast<long long>(cfg.hidden),
              static_cast<unsigned long long>(bf16_checksum(out)), sum_abs / out.size(), max_abs);
}

}  // namespace

void register_run(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Run one MoE layer (built-in GLM-5-shaped default)");
  args->shape.add_to(cmd);
  cmd->add_option("--tokens,-t", args->tokens, "Tokens in the batch")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "Seed of the synthetic weights and inputs");
  cmd->add_option("--threads", args->threads, "CPU threads (0: all)");
  cmd->add_option("--skew", args->skew, "Routing skew: >0 favours a few experts")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([args] { run_layer(*args); });
}

}  // namespace fp4moe::cli
