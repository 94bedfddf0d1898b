// Seeded synthetic MoE layers (see include/fp4moe/synthetic.h).
#include "fp4moe/synthetic.h"

#include <cmath>

#include "common/parallel.h"
#include "common/rng.h"
#include "fp4moe/bf16.h"
#include "fp4moe/error.h"

namespace fp4moe {
namespace {
// Stream ids: expert e uses 16*e + {0: gate, 1: up, 2: down}; the shared expert, router and
// bias use streams past the last expert.
constexpr uint64_t kStreamsPerExpert = 16;
}  // namespace

Nvfp4Matrix make_synthetic_nvfp4(int64_t rows, int64_t cols, uint64_t seed, uint64_t stream,
                                 WeightInit init) {
  FP4MOE_CHECK(cols > 0 && cols % kNvfp4BlockSize == 0, "synthetic NVFP4: K = ", cols,
               " is not a positive multiple of 16");
  checked_size(rows, cols, "synthetic NVFP4");
  Rng rng(seed, stream);
  if (init == WeightInit::kQuantizedGaussian) {
    std::vector<float> w(static_cast<size_t>(rows * cols));
    const double std = 1.0 / std::sqrt(static_cast<double>(cols));
    for (auto& v : w) v = static_cast<float>(rng.normal() * std);
    return quantize_nvfp4(w, rows, cols);
  }
  Nvfp4Matrix q;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(static_cast<size_t>(rows * cols / 2));
  q.block_scales.resize(static_cast<size_t>(rows * cols / kNvfp4BlockSize));
  size_t i = 0;
  for (; i + 8 <= q.data.size(); i += 8) {
    const uint64_t r = rng.next_u64();
    for (int b = 0; b < 8; ++b) q.data[i + b] = static_cast<uint8_t>(r >> (8 * b));
  }
  for (; i < q.data.size(); ++i) q.data[i] = static_cast<uint8_t>(rng.next_u64());
  // E4M3 codes 0x28..0x40: 0.25 .. 2.0.
  for (auto& s : q.block_scales) s = static_cast<uint8_t>(0x28 + rng.below(0x19));
  // |e2m1| averages 2.25 and the scales about 1: keep a K-long dot product of N(0,1) inputs O(1).
  q.global_scale = static_cast<float>(1.0 / (2.25 * std::sqrt(static_cast<double>(cols))));
  return q;
}

ExpertWeights make_synthetic_expert(int64_t hidden, int64_t intermediate, uint64_t seed,
                                    uint64_t stream, WeightInit init) {
  ExpertWeights e;
  e.gate = make_synthetic_nvfp4(intermediate, hidden, seed, stream * kStreamsPerExpert + 0, init);
  e.up = make_synthetic_nvfp4(intermediate, hidden, seed, stream * kStreamsPerExpert + 1, init);
  e.down = make_synthetic_nvfp4(hidden, intermediate, seed, stream * kStreamsPerExpert + 2, init);
  // Real checkpoints carry different gate/up global scales: make sure ours differ too.
  e.up.global_scale *= 1.25f;
  // Calibrated activation amax of about 4 (inputs are N(0,1)-like): amax / (6 * 448).
  e.gate_input_scale = e.up_input_scale = 4.0f / (6.0f * 448.0f);
  e.down_input_scale = 2.0f / (6.0f * 448.0f);
  return e;
}

MoeWeights make_synthetic_moe(const MoeConfig& cfg, const SyntheticOptions& opt) {
  cfg.validate();
  FP4MOE_CHECK(opt.materialize.empty() || static_cast<int>(opt.materialize.size()) == cfg.num_experts,
               "synthetic MoE: materialize mask has ", opt.materialize.size(), " entries, expected ",
               cfg.num_experts);
  MoeWeights w;
  w.config = cfg;
  w.experts.resize(cfg.num_experts);
  parallel_for(cfg.num_experts, opt.threads, [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      if (!opt.materialize.empty() && !opt.materialize[e]) continue;
      w.experts[e] = make_synthetic_expert(cfg.hidden, cfg.intermediate, opt.seed,
                                           static_cast<uint64_t>(e), opt.init);
    }
  });
  const uint64_t after = static_cast<uint64_t>(cfg.num_experts);
  if (cfg.has_shared_expert())
    w.shared = make_synthetic_expert(cfg.hidden, cfg.shared_intermediate, opt.seed, after, opt.init);
  if (opt.router) {
    Rng rng(opt.seed, (after + 1) * kStreamsPerExpert);
    w.router_weight.resize(static_cast<size_t>(cfg.num_experts * cfg.hidden));
    const double std = 1.0 / std::sqrt(static_cast<double>(cfg.hidden));
    for (auto& v : w.router_weight) v = static_cast<float>(rng.normal() * std);
    w.correction_bias.resize(cfg.num_experts);
    for (auto& v : w.correction_bias) v = static_cast<float>(rng.normal() * 0.01);
  }
  return w;
}

std::vector<float> make_hidden_states(int64_t tokens, int64_t hidden, uint64_t seed) {
  Rng rng(seed, 0x48494444454Eull);  // "HIDDEN"
  std::vector<float> x(static_cast<size_t>(checked_size(tokens, hidden, "hidden states")));
  for (auto& v : x) v = round_to_bf16(static_cast<float>(rng.normal()));
  return x;
}

std::vector<float> make_router_logits(int64_t tokens, int num_experts, uint64_t seed, double skew) {
  // 2 already sends most tokens to a few experts; the bound keeps every logit a finite float
  // (skew * N(0, 1) cast to float overflowed to -inf from ~1e38).
  FP4MOE_CHECK(std::isfinite(skew) && skew >= 0 && skew <= kMaxRoutingSkew, "router logits: skew must be in [0, ",
               kMaxRoutingSkew, "], got ", skew);
  FP4MOE_CHECK(num_experts >= 1, "router logits: number of experts must be >= 1, got ", num_experts);
  const int64_t n = checked_size(tokens, num_experts, "router logits");
  Rng pop(seed, 0x504F50ull);  // per-expert popularity
  std::vector<double> offset(num_experts, 0.0);
  if (skew > 0)
    for (auto& o : offset) o = skew * pop.normal();
  Rng rng(seed, 0x4C4F474954ull);  // "LOGIT"
  std::vector<float> l(static_cast<size_t>(n));
  for (int64_t t = 0; t < tokens; ++t)
    for (int e = 0; e < num_experts; ++e)
      l[t * num_experts + e] = static_cast<float>(rng.normal() + offset[e]);
  return l;
}

}  // namespace fp4moe
