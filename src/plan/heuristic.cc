// The decode family's tactic heuristic (see include/fp4moe/heuristic.h).
#include "fp4moe/heuristic.h"

#include <algorithm>
#include <cmath>

namespace fp4moe {
namespace {

// The compiled decode tactics (src/kernels/inst): 4 stages while a stage stays small enough
// for 2 CTAs per SM, 3 beyond; 8 warps (16 per SM: the dequantization is issue-bound and needs
// the latency hiding) except for the 128 x 32 tile, whose 2 x 2 warps fit 4.
Tactic decode_tactic(int rows, int tokens, Epilogue ep) {
  const int stages = (rows == 64 && tokens <= 16) || (rows == 128 && tokens <= 16) ? 4 : 3;
  const int warps = rows == 128 && tokens != 32 ? 8 : 4;
  return Tactic{Family::kW4a16Mma, rows, tokens, 256, stages, warps, 1, ep, false};
}

}  // namespace

double expected_active_experts(const MoeConfig& cfg, int64_t tokens) {
  const double e = cfg.num_experts, k = cfg.routing.top_k;
  return e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(tokens)));
}

int heuristic_token_tile(const MoeConfig& cfg, int64_t tokens) {
  const double mean = static_cast<double>(tokens) * cfg.routing.top_k / cfg.num_experts;
  const double busiest = mean + 2.0 * std::sqrt(mean) + 1.0;
  for (int n : {8, 16, 32}) if (busiest <= n) return n;
  return 64;
}

LayerPlan heuristic_plan(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu) {
  (void)gpu;  // stream-K balances any unit count over the GPU's CTAs
  const int n = heuristic_token_tile(cfg, tokens);
  return LayerPlan{decode_tactic(128, n, Epilogue::kSwiglu), decode_tactic(128, n, Epilogue::kFinalize)};
}

}  // namespace fp4moe
