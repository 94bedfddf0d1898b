// The decode family's tactic heuristic (see include/fp4moe/heuristic.h).
#include "fp4moe/heuristic.h"

#include <algorithm>
#include <cmath>

namespace fp4moe {
namespace {

int stages_for(int rows, int tokens) {
  // Must match the instantiation list (src/kernels/inst): 4 stages up to 32 tokens with 64
  // rows and up to 16 with 128 rows, 3 beyond (shared memory).
  if (rows == 64) return tokens <= 32 ? 4 : 3;
  return tokens <= 16 ? 4 : 3;
}

Tactic decode_tactic(int rows, int tokens, int split, Epilogue ep) {
  return Tactic{Family::kW4a16Mma, rows, tokens, 256, stages_for(rows, tokens), 4, split, ep, false};
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
  const int n = heuristic_token_tile(cfg, tokens);
  const double groups = expected_active_experts(cfg, tokens) + (cfg.has_shared_expert() ? 1 : 0);
  const double mean = static_cast<double>(tokens) * cfg.routing.top_k / cfg.num_experts;
  const double token_tiles = std::max(1.0, std::ceil(mean / n));
  const int sms = std::max(1, gpu.sm_count);
  auto pick = [&](int64_t out_rows, int64_t k, Epilogue ep) {
    int rows = 128;
    auto units = [&](int r) { return groups * token_tiles * std::ceil(out_rows / double(r)); };
    if (units(128) < 2.0 * sms) rows = 64;
    const int kgroups = static_cast<int>((k + 255) / 256);
    int split = static_cast<int>(std::ceil(2.0 * sms / units(rows)));
    split = std::clamp(split, 1, std::min(8, kgroups));
    return decode_tactic(rows, n, split, ep);
  };
  return LayerPlan{pick(2 * cfg.intermediate, cfg.hidden, Epilogue::kSwiglu),
                   pick(cfg.hidden, cfg.intermediate, Epilogue::kFinalize)};
}

}  // namespace fp4moe
