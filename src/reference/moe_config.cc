// MoE configurations: presets from the models' config.json files and the
// validation that every entry point runs first.
#include <algorithm>
#include <cmath>

#include "fp4moe/error.h"
#include "fp4moe/moe.h"

namespace fp4moe {

const char* to_string(RoutingMode m) {
  switch (m) {
    case RoutingMode::kSoftmaxTopK: return "softmax_topk";
    case RoutingMode::kSigmoidNoAuxTc: return "sigmoid_noaux_tc";
  }
  return "?";
}

void MoeConfig::validate() const {
  FP4MOE_CHECK(hidden > 0, "MoE config '", name, "': hidden size must be > 0, got ", hidden);
  FP4MOE_CHECK(intermediate > 0, "MoE config '", name, "': intermediate size must be > 0, got ",
               intermediate);
  // Bounds far above any model's (GLM-5: H 6144, I 2048), so that the sizes derived from these
  // fields - 2 I rows and H columns as int in the kernels' parameters, E x H router values, the
  // whole layer's weight count (3 x 2^40 x (2^16 + 1) < 2^58 with E bounded above) - are
  // representable wherever they are formed.
  constexpr int64_t kMaxWidth = int64_t{1} << 20;
  for (const auto& [field, v] : {std::pair{"hidden size", hidden}, std::pair{"intermediate size", intermediate},
                                 std::pair{"shared expert intermediate size", shared_intermediate}})
    FP4MOE_CHECK(v <= kMaxWidth, "MoE config '", name, "': ", field, " ", v, " exceeds 2^20 = ", kMaxWidth);
  FP4MOE_CHECK(hidden % kNvfp4BlockSize == 0, "MoE config '", name, "': hidden size ", hidden,
               " is not a multiple of the NVFP4 block size 16 (it is FC1's K)");
  FP4MOE_CHECK(intermediate % kNvfp4BlockSize == 0, "MoE config '", name,
               "': intermediate size ", intermediate,
               " is not a multiple of the NVFP4 block size 16 (it is FC2's K)");
  FP4MOE_CHECK(shared_intermediate >= 0 && shared_intermediate % kNvfp4BlockSize == 0,
               "MoE config '", name, "': shared expert intermediate size ", shared_intermediate,
               " must be 0 or a multiple of 16");
  FP4MOE_CHECK(num_experts > 0, "MoE config '", name, "': number of experts must be > 0, got ",
               num_experts);
  FP4MOE_CHECK(num_experts <= (1 << 16), "MoE config '", name, "': ", num_experts,
               " experts exceed 2^16 = 65536 (sizes derived from E + 1 are formed in int)");
  const RoutingConfig& r = routing;
  FP4MOE_CHECK(r.top_k > 0 && r.top_k <= num_experts, "MoE config '", name, "': top_k = ",
               r.top_k, " must be in [1, num_experts = ", num_experts, "]");
  FP4MOE_CHECK(r.n_group >= 1 && num_experts % r.n_group == 0, "MoE config '", name,
               "': n_group = ", r.n_group, " must divide num_experts = ", num_experts);
  FP4MOE_CHECK(r.topk_group >= 1 && r.topk_group <= r.n_group, "MoE config '", name,
               "': topk_group = ", r.topk_group, " must be in [1, n_group = ", r.n_group, "]");
  FP4MOE_CHECK(r.top_k <= r.topk_group * (num_experts / r.n_group), "MoE config '", name,
               "': top_k = ", r.top_k, " exceeds the experts in the ", r.topk_group,
               " selected groups");
  // Groups are noaux_tc's: softmax top-k has none, and a config that gives them would be routed
  // as if it had not (DeepSeek-V2's softmax group_limited_greedy is not implemented).
  FP4MOE_CHECK(r.mode == RoutingMode::kSigmoidNoAuxTc || (r.n_group == 1 && r.topk_group == 1), "MoE config '",
               name, "': softmax top-k routing has no expert groups (n_group = ", r.n_group,
               ", topk_group = ", r.topk_group, "; both must be 1)");
  if (r.mode == RoutingMode::kSigmoidNoAuxTc && r.n_group > 1) {
    FP4MOE_CHECK(num_experts / r.n_group >= 2, "MoE config '", name,
                 "': noaux_tc group scores need at least 2 experts per group (", num_experts, " experts in n_group = ",
                 r.n_group, " groups)");
  }
  FP4MOE_CHECK(std::isfinite(r.routed_scaling_factor) && r.routed_scaling_factor > 0,
               "MoE config '", name, "': routed_scaling_factor must be finite and > 0");
}

MoeConfig MoeConfig::glm5() {
  MoeConfig c;
  c.name = "glm5";
  c.hidden = 6144;
  c.intermediate = 2048;
  c.num_experts = 256;
  c.routing = RoutingConfig{RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f};
  c.shared_intermediate = 2048;  // n_shared_experts 1 x moe_intermediate_size
  return c;
}

MoeConfig MoeConfig::glm5_tp8() {
  MoeConfig c = glm5();
  c.name = "glm5-tp8";
  c.intermediate = 2048 / 8;
  c.shared_intermediate = 2048 / 8;
  return c;
}

MoeConfig MoeConfig::deepseek_v3() {
  MoeConfig c;
  c.name = "deepseek-v3";
  c.hidden = 7168;
  c.intermediate = 2048;
  c.num_experts = 256;
  c.routing = RoutingConfig{RoutingMode::kSigmoidNoAuxTc, 8, 8, 4, true, 2.5f};
  c.shared_intermediate = 2048;
  return c;
}

std::vector<std::string> MoeConfig::preset_names() { return {"glm5", "glm5-tp8", "deepseek-v3"}; }

MoeConfig MoeConfig::preset(const std::string& name) {
  if (name == "glm5") return glm5();
  if (name == "glm5-tp8") return glm5_tp8();
  if (name == "deepseek-v3") return deepseek_v3();
  FP4MOE_FAIL("unknown preset '", name, "' (known: glm5, glm5-tp8, deepseek-v3)");
}

void ExpertWeights::validate(int64_t hidden, int64_t intermediate, const std::string& what) const {
  const std::string g = what + ".gate_proj", u = what + ".up_proj", d = what + ".down_proj";
  gate.validate(g.c_str());
  up.validate(u.c_str());
  down.validate(d.c_str());
  FP4MOE_CHECK(gate.rows == intermediate && gate.cols == hidden, g, ": shape [", gate.rows, ", ",
               gate.cols, "], expected [", intermediate, ", ", hidden, "]");
  FP4MOE_CHECK(up.rows == intermediate && up.cols == hidden, u, ": shape [", up.rows, ", ",
               up.cols, "], expected [", intermediate, ", ", hidden, "]");
  FP4MOE_CHECK(down.rows == hidden && down.cols == intermediate, d, ": shape [", down.rows, ", ",
               down.cols, "], expected [", hidden, ", ", intermediate, "]");
  for (float s : {gate_input_scale, up_input_scale, down_input_scale}) {
    FP4MOE_CHECK(std::isfinite(s) && s > 0, what, ": input_scale must be finite and > 0, got ", s);
  }
}

void MoeWeights::validate() const {
  config.validate();
  FP4MOE_CHECK(static_cast<int>(experts.size()) == config.num_experts, "MoE weights: ",
               experts.size(), " experts, config says ", config.num_experts);
  for (size_t e = 0; e < experts.size(); ++e) {
    if (experts[e].materialized())
      experts[e].validate(config.hidden, config.intermediate, "experts." + std::to_string(e));
  }
  FP4MOE_CHECK(shared.has_value() == config.has_shared_expert(), "MoE weights: shared expert ",
               shared ? "present" : "missing", " but the config ",
               config.has_shared_expert() ? "has one" : "has none");
  if (shared) shared->validate(config.hidden, config.shared_intermediate, "shared_experts");
  FP4MOE_CHECK(router_weight.empty() ||
                   static_cast<int64_t>(router_weight.size()) == config.num_experts * config.hidden,
               "MoE weights: router weight holds ", router_weight.size(), " values, expected [",
               config.num_experts, ", ", config.hidden, "]");
  FP4MOE_CHECK(correction_bias.empty() ||
                   static_cast<int>(correction_bias.size()) == config.num_experts,
               "MoE weights: e_score_correction_bias holds ", correction_bias.size(),
               " values, expected ", config.num_experts);
  // NaN would pass every comparison of the routing's sorts (their order then undefined).
  for (size_t i = 0; i < router_weight.size(); ++i)
    FP4MOE_CHECK(std::isfinite(router_weight[i]), "MoE weights: router weight [", i / config.hidden, ", ",
                 i % config.hidden, "] is ", router_weight[i]);
  for (size_t e = 0; e < correction_bias.size(); ++e)
    FP4MOE_CHECK(std::isfinite(correction_bias[e]), "MoE weights: e_score_correction_bias of expert ", e,
                 " is ", correction_bias[e]);
}

}  // namespace fp4moe
