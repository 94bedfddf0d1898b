#include "bench/roofline.h"

#include <algorithm>
#include <cmath>

#include "fp4moe/error.h"

namespace fp4moe {

double expert_weight_bytes(int64_t hidden, int64_t intermediate) {
  return 3.0 * static_cast<double>(hidden) * static_cast<double>(intermediate) * (0.5 + 1.0 / kNvfp4BlockSize) + 3 * 4;
}

LayerCost layer_cost(const MoeConfig& cfg, int64_t tokens, int active_experts) {
  FP4MOE_CHECK(tokens >= 0 && active_experts >= 0 && active_experts <= cfg.num_experts,
               "layer_cost: bad arguments (tokens ", tokens, ", active experts ", active_experts, ")");
  const double H = static_cast<double>(cfg.hidden), I = static_cast<double>(cfg.intermediate);
  const double Is = static_cast<double>(cfg.shared_intermediate);
  LayerCost c;
  c.tokens = tokens;
  c.active_experts = active_experts;
  c.weight_bytes = active_experts * expert_weight_bytes(cfg.hidden, cfg.intermediate) +
                   (cfg.has_shared_expert() ? expert_weight_bytes(cfg.hidden, cfg.shared_intermediate) : 0);
  const double T = static_cast<double>(tokens);
  c.activation_bytes = T * H * 2 + T * cfg.num_experts * 4 + T * H * 2;
  c.bytes = c.weight_bytes + c.activation_bytes;
  const double k = cfg.routing.top_k;
  c.flops = 2.0 * T * k * 3.0 * H * I + (cfg.has_shared_expert() ? 2.0 * T * 3.0 * H * Is : 0.0);
  return c;
}

LayerCost bf16_layer_cost(const MoeConfig& cfg, int64_t tokens, int active_experts) {
  LayerCost c = layer_cost(cfg, tokens, active_experts);
  const double H = static_cast<double>(cfg.hidden), I = static_cast<double>(cfg.intermediate);
  const double Is = cfg.has_shared_expert() ? static_cast<double>(cfg.shared_intermediate) : 0.0;
  c.weight_bytes = (active_experts * 3.0 * H * I + 3.0 * H * Is) * 2.0;
  c.activation_bytes = static_cast<double>(tokens) * H * 2 * 2;
  c.bytes = c.weight_bytes + c.activation_bytes;
  return c;
}

int count_active_experts(const std::vector<int32_t>& ids, int num_experts) {
  FP4MOE_CHECK(num_experts >= 1, "count_active_experts: ", num_experts, " experts");
  std::vector<bool> seen(static_cast<size_t>(num_experts), false);
  int n = 0;
  for (int32_t e : ids) {
    FP4MOE_CHECK(e >= 0 && e < num_experts, "count_active_experts: id ", e, " out of range");
    if (!seen[e]) ++n;
    seen[e] = true;
  }
  return n;
}

Roofline roofline(const LayerCost& c, double read_bytes_per_s, double flops_per_s) {
  FP4MOE_CHECK(std::isfinite(read_bytes_per_s) && std::isfinite(flops_per_s) && read_bytes_per_s > 0 && flops_per_s > 0,
               "roofline: ceilings must be finite and > 0, got ", read_bytes_per_s, " B/s and ", flops_per_s, " FLOP/s");
  Roofline r;
  r.memory_s = c.bytes / read_bytes_per_s;
  r.compute_s = c.flops / flops_per_s;
  r.floor_s = std::max(r.memory_s, r.compute_s);
  r.intensity = c.bytes > 0 ? c.flops / c.bytes : 0;
  r.ridge = flops_per_s / read_bytes_per_s;
  r.memory_bound = r.memory_s >= r.compute_s;
  return r;
}

}  // namespace fp4moe
