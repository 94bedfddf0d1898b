// Reference routing: softmax top-k, and sigmoid + correction bias "noaux_tc" with groups.
//
// noaux_tc (DeepSeek-V3 / GLM-5 modeling code):
//   s      = sigmoid(logits)                      weights come from these un-biased scores
//   c      = s + e_score_correction_bias          choice scores
//   group  = sum of the 2 largest c in each of n_group equal groups
//   keep the topk_group best groups; experts of other groups cannot be chosen (we exclude
//   them outright; the HF code masks them with 0.0, which could let a masked expert beat a
//   negative choice score - an artefact we do not reproduce)
//   ids    = top_k experts by c;  w = s[ids];  w /= sum(w) if norm_topk_prob;  w *= scale
// Every top-k here orders by (score descending, index ascending): equal scores go to the lower
// expert / group index. Scores are evaluated in double from the float32 logits.
// A logit of -inf masks its expert (how a caller drops experts, e.g. pruned ones): softmax gives
// it probability 0 and chooses it only where fewer than top_k logits are finite (weight 0, the
// lowest such indices first); the sigmoid gives it score 0, its choice score is its bias alone.
// NaN and +inf mean nothing as a logit and are refused, as is a softmax row of -inf only.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "fp4moe/error.h"
#include "fp4moe/moe.h"

namespace fp4moe {
namespace {

// Indices of the k largest values, ordered by (value desc, index asc).
std::vector<int> top_k_indices(const std::vector<double>& v, int k,
                               const std::vector<bool>* allowed = nullptr) {
  std::vector<int> idx;
  idx.reserve(v.size());
  for (int i = 0; i < static_cast<int>(v.size()); ++i)
    if (!allowed || (*allowed)[i]) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  idx.resize(std::min<size_t>(idx.size(), static_cast<size_t>(k)));
  return idx;
}

}  // namespace

std::vector<double> expert_group_scores(std::span<const double> choice, int n_group) {
  FP4MOE_CHECK(n_group >= 1 && !choice.empty() && choice.size() % n_group == 0, "route: ", choice.size(),
               " experts in ", n_group, " equal non-empty groups");
  // A NaN has no place in an order (the sort below would be undefined): route_reference refuses
  // the logits that would give one before it gets here.
  for (size_t i = 0; i < choice.size(); ++i)
    FP4MOE_CHECK(!std::isnan(choice[i]), "route: expert ", i, "'s choice score is NaN");
  const size_t per_group = choice.size() / n_group;
  std::vector<double> out(n_group);
  for (int g = 0; g < n_group; ++g) {
    std::vector<double> members(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
    std::partial_sort(members.begin(), members.begin() + std::min<size_t>(2, per_group), members.end(),
                      std::greater<>());
    out[g] = members[0] + (per_group > 1 ? members[1] : 0.0);
  }
  return out;
}

void check_router_logits(RoutingMode mode, std::span<const float> logits, int64_t tokens, int num_experts,
                         const char* what) {
  FP4MOE_CHECK(num_experts >= 1 &&
                   static_cast<int64_t>(logits.size()) == checked_size(tokens, num_experts, what),
               what, ": logits hold ", logits.size(), " values, expected [", tokens, ", ", num_experts, "]");
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = logits.data() + t * num_experts;
    bool unmasked = false;
    for (int e = 0; e < num_experts; ++e) {
      FP4MOE_CHECK(!std::isnan(l[e]) && l[e] != INFINITY, what, ": logit (token ", t, ", expert ", e, ") is ", l[e],
                   " (a logit is finite, or -inf to mask its expert)");
      unmasked |= l[e] != -INFINITY;
    }
    FP4MOE_CHECK(unmasked || mode != RoutingMode::kSoftmaxTopK, what, ": every logit of token ", t,
                 " is -inf (softmax routing needs one expert left unmasked)");
  }
}

Routing route_reference(const RoutingConfig& cfg, std::span<const float> logits, int64_t tokens,
                        int num_experts, std::span<const float> correction_bias) {
  FP4MOE_CHECK(tokens >= 0, "route: negative token count ", tokens);
  FP4MOE_CHECK(num_experts >= 1, "route: number of experts must be >= 1, got ", num_experts);
  check_router_logits(cfg.mode, logits, tokens, num_experts, "route");
  FP4MOE_CHECK(correction_bias.empty() || static_cast<int>(correction_bias.size()) == num_experts,
               "route: correction bias holds ", correction_bias.size(), " values, expected ",
               num_experts);
  FP4MOE_CHECK(cfg.top_k >= 1 && cfg.top_k <= num_experts, "route: top_k = ", cfg.top_k,
               " out of [1, ", num_experts, "]");
  FP4MOE_CHECK(cfg.n_group >= 1 && num_experts % cfg.n_group == 0 && cfg.topk_group >= 1 &&
                   cfg.topk_group <= cfg.n_group,
               "route: n_group = ", cfg.n_group, ", topk_group = ", cfg.topk_group,
               " invalid for ", num_experts, " experts");
  FP4MOE_CHECK(cfg.top_k <= cfg.topk_group * (num_experts / cfg.n_group), "route: top_k = ", cfg.top_k,
               " exceeds the ", cfg.topk_group * (num_experts / cfg.n_group), " experts of the ",
               cfg.topk_group, " selected groups");
  FP4MOE_CHECK(std::isfinite(cfg.routed_scaling_factor) && cfg.routed_scaling_factor > 0,
               "route: routed_scaling_factor must be finite and > 0, got ", cfg.routed_scaling_factor);
  for (size_t e = 0; e < correction_bias.size(); ++e)
    FP4MOE_CHECK(std::isfinite(correction_bias[e]), "route: correction bias of expert ", e, " is ",
                 correction_bias[e]);
  Routing r;
  r.tokens = tokens;
  r.top_k = cfg.top_k;
  r.ids.resize(static_cast<size_t>(tokens * cfg.top_k));
  r.weights.resize(r.ids.size());
  const int E = num_experts, k = cfg.top_k;
  std::vector<double> score(E), choice(E);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = logits.data() + t * E;
    std::vector<int> ids;
    if (cfg.mode == RoutingMode::kSoftmaxTopK) {
      const double m = *std::max_element(l, l + E);
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += (score[e] = std::exp(static_cast<double>(l[e]) - m));
      for (int e = 0; e < E; ++e) score[e] /= sum;
      // Chosen by logit: softmax keeps their order, and logits hundreds apart (a skewed router)
      // have probabilities that underflow to the same double, which would read as a tie.
      for (int e = 0; e < E; ++e) choice[e] = l[e];
      ids = top_k_indices(choice, k);
    } else {
      for (int e = 0; e < E; ++e) {
        score[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])));
        choice[e] = score[e] + (correction_bias.empty() ? 0.0 : correction_bias[e]);
      }
      std::vector<bool> allowed(E, true);
      if (cfg.topk_group < cfg.n_group) {
        const int per_group = E / cfg.n_group;
        const std::vector<int> groups = top_k_indices(expert_group_scores(choice, cfg.n_group), cfg.topk_group);
        std::fill(allowed.begin(), allowed.end(), false);
        for (int g : groups)
          std::fill(allowed.begin() + g * per_group, allowed.begin() + (g + 1) * per_group, true);
      }
      ids = top_k_indices(choice, k, &allowed);
    }
    double wsum = 0;
    for (int j = 0; j < k; ++j) wsum += score[ids[j]];
    for (int j = 0; j < k; ++j) {
      double w = score[ids[j]];
      if (cfg.norm_topk_prob) w /= (wsum + 1e-20);
      w *= cfg.routed_scaling_factor;
      r.ids[t * k + j] = ids[j];
      r.weights[t * k + j] = static_cast<float>(w);
    }
  }
  return r;
}

std::vector<float> router_logits_reference(std::span<const float> hidden, int64_t tokens,
                                           const MoeWeights& w) {
  const int64_t H = w.config.hidden;
  const int E = w.config.num_experts;
  FP4MOE_CHECK(!w.router_weight.empty(), "router logits: the layer has no router weight");
  FP4MOE_CHECK(E >= 1 && static_cast<int64_t>(w.router_weight.size()) == checked_size(E, H, "router logits"),
               "router logits: the router weight holds ", w.router_weight.size(), " values, expected [", E,
               ", ", H, "]");
  FP4MOE_CHECK(static_cast<int64_t>(hidden.size()) == checked_size(tokens, H, "router logits: hidden"),
               "router logits: hidden holds ", hidden.size(), " values, expected [", tokens, ", ", H, "]");
  std::vector<float> logits(static_cast<size_t>(tokens * E));
  for (int64_t t = 0; t < tokens; ++t)
    for (int e = 0; e < E; ++e) {
      double acc = 0;
      for (int64_t h = 0; h < H; ++h)
        acc += static_cast<double>(hidden[t * H + h]) * w.router_weight[e * H + h];
      logits[t * E + e] = static_cast<float>(acc);
    }
  return logits;
}

}  // namespace fp4moe
