// The float64 CPU reference MoE layer: the oracle of every GPU test.
//
// Each expert is evaluated straight from its packed NVFP4 weights: one weight row is decoded
// into float64 once (e2m1 * e4m3 * global, exact) and dotted with every token routed to the
// expert, so a GLM-5-sized expert never needs a dequantized copy.
#include <cmath>

#include "common/parallel.h"
#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/moe.h"

namespace fp4moe {
namespace {

// y[n, rows] = x[n, K] . W[rows, K]^T with W NVFP4, float64 accumulation.
std::vector<double> nvfp4_gemm_nt(const Nvfp4Matrix& w, const std::vector<double>& x, int64_t n,
                                  int threads) {
  const int64_t K = w.cols, R = w.rows;
  std::vector<double> y(static_cast<size_t>(n * R));
  double e2m1_table[16];
  for (int c = 0; c < 16; ++c) e2m1_table[c] = e2m1_to_float(static_cast<uint8_t>(c));
  parallel_for(R, threads, [&](int64_t r0, int64_t r1) {
    std::vector<double> row(static_cast<size_t>(K));
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* codes = w.data.data() + r * K / 2;
      const uint8_t* scales = w.block_scales.data() + r * (K / kNvfp4BlockSize);
      for (int64_t b = 0; b < K / kNvfp4BlockSize; ++b) {
        const double s = static_cast<double>(e4m3_to_float(scales[b])) * w.global_scale;
        for (int i = 0; i < kNvfp4BlockSize; i += 2) {
          const uint8_t byte = codes[(b * kNvfp4BlockSize + i) / 2];
          row[b * kNvfp4BlockSize + i] = e2m1_table[byte & 0xF] * s;
          row[b * kNvfp4BlockSize + i + 1] = e2m1_table[byte >> 4] * s;
        }
      }
      for (int64_t t = 0; t < n; ++t) {
        // Four partial sums (K is a multiple of 16): independent FMA chains, same result on
        // every machine since the order is fixed.
        const double* xt = x.data() + t * K;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int64_t k = 0; k < K; k += 4) {
          a0 += row[k] * xt[k];
          a1 += row[k + 1] * xt[k + 1];
          a2 += row[k + 2] * xt[k + 2];
          a3 += row[k + 3] * xt[k + 3];
        }
        y[t * R + r] = (a0 + a1) + (a2 + a3);
      }
    }
  });
  return y;
}

// The GEMM input as the GEMM sees it: the values themselves, or (W4A4) their NVFP4
// quantization with the given input scale, dequantized.
std::vector<double> gemm_input(std::span<const float> x, int64_t n, int64_t K, bool quantize,
                               float input_scale) {
  if (!quantize) return std::vector<double>(x.begin(), x.end());
  return quantize_nvfp4_activations(x, n, K, input_scale).dequantize_f64();
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// The expert's float64 forward on rows x H inputs; its callers have validated both.
std::vector<double> expert_forward(const ExpertWeights& e, const MoeConfig& cfg, std::span<const float> x,
                                   int64_t rows, const ReferenceOptions& opt) {
  const int64_t H = e.gate.cols, I = e.gate.rows;
  const bool q = cfg.quantize_activations;
  const std::vector<double> gate =
      nvfp4_gemm_nt(e.gate, gemm_input(x, rows, H, q, e.gate_input_scale), rows, opt.threads);
  const std::vector<double> up =
      nvfp4_gemm_nt(e.up, gemm_input(x, rows, H, q, e.up_input_scale), rows, opt.threads);
  std::vector<double> act(static_cast<size_t>(rows * I));
  for (size_t i = 0; i < act.size(); ++i) act[i] = silu(gate[i]) * up[i];
  if (opt.round_act_to_bf16)
    for (double& v : act) v = round_to_bf16(static_cast<float>(v));
  std::vector<double> down_in;
  if (q) {
    std::vector<float> act_f(act.begin(), act.end());
    down_in = gemm_input(act_f, rows, I, true, e.down_input_scale);
  } else {
    down_in = std::move(act);
  }
  return nvfp4_gemm_nt(e.down, down_in, rows, opt.threads);
}

void check_finite(std::span<const float> x, const char* what) {
  for (size_t i = 0; i < x.size(); ++i) FP4MOE_CHECK(std::isfinite(x[i]), what, ": input value ", i, " is ", x[i]);
}

}  // namespace

std::vector<double> expert_reference(const ExpertWeights& e, const MoeConfig& cfg,
                                     std::span<const float> x, int64_t rows,
                                     const ReferenceOptions& opt) {
  FP4MOE_CHECK(e.materialized(), "expert_reference: expert weights are not materialised");
  const int64_t H = e.gate.cols;
  e.validate(H, e.gate.rows, "expert_reference: expert");  // the three matrices agree and hold their shapes
  FP4MOE_CHECK(static_cast<int64_t>(x.size()) == checked_size(rows, H, "expert_reference: input"),
               "expert_reference: input holds ", x.size(), " values, expected [", rows, ", ", H, "]");
  check_finite(x, "expert_reference");
  return expert_forward(e, cfg, x, rows, opt);
}

double moe_reference_host_bytes(const MoeConfig& cfg, int64_t tokens) {
  const double H = static_cast<double>(cfg.hidden), I = static_cast<double>(cfg.intermediate);
  const double per_token = H * (cfg.routing.top_k + 3) + 4 * I;  // doubles; see moe_reference
  return 8.0 * per_token * static_cast<double>(tokens);
}

std::vector<double> moe_reference(const MoeWeights& w, std::span<const float> hidden,
                                  int64_t tokens, const Routing& routing,
                                  const ReferenceOptions& opt) {
  const MoeConfig& cfg = w.config;
  cfg.validate();
  const int64_t H = cfg.hidden;
  const int k = cfg.routing.top_k;
  FP4MOE_CHECK(static_cast<int64_t>(hidden.size()) == checked_size(tokens, H, "moe_reference: hidden"),
               "moe_reference: hidden holds ", hidden.size(), " values, expected [", tokens, ", ", H, "]");
  FP4MOE_CHECK(routing.tokens == tokens && routing.top_k == k &&
                   static_cast<int64_t>(routing.ids.size()) == tokens * k &&
                   routing.weights.size() == routing.ids.size(),
               "moe_reference: routing is for ", routing.tokens, " tokens x top-", routing.top_k,
               ", the layer needs ", tokens, " x top-", k);
  FP4MOE_CHECK(static_cast<int>(w.experts.size()) == cfg.num_experts,
               "moe_reference: weights hold ", w.experts.size(), " experts, config says ",
               cfg.num_experts);
  check_finite(hidden, "moe_reference");

  // Group the (token, slot) pairs by expert.
  std::vector<std::vector<int64_t>> pairs(cfg.num_experts);
  for (int64_t p = 0; p < tokens * k; ++p) {
    const int32_t e = routing.ids[p];
    FP4MOE_CHECK(e >= 0 && e < cfg.num_experts, "moe_reference: routed expert id ", e,
                 " (token ", p / k, ", slot ", p % k, ") is out of range [0, ", cfg.num_experts,
                 ")");
    FP4MOE_CHECK(std::isfinite(routing.weights[p]), "moe_reference: routing weight of token ", p / k,
                 ", slot ", p % k, " is ", routing.weights[p]);
    pairs[e].push_back(p);
  }
  // rows[p] = expert output of pair p, unweighted.
  std::vector<double> rows(static_cast<size_t>(tokens * k * H));
  for (int e = 0; e < cfg.num_experts; ++e) {
    if (pairs[e].empty()) continue;
    FP4MOE_CHECK(w.experts[e].materialized(), "moe_reference: expert ", e,
                 " received tokens but its weights are not materialised");
    w.experts[e].validate(H, cfg.intermediate, "moe_reference: experts." + std::to_string(e));
    std::vector<float> x(pairs[e].size() * H);
    for (size_t i = 0; i < pairs[e].size(); ++i) {
      const int64_t t = pairs[e][i] / k;
      std::copy(hidden.begin() + t * H, hidden.begin() + (t + 1) * H, x.begin() + i * H);
    }
    const std::vector<double> y = expert_forward(w.experts[e], cfg, x, static_cast<int64_t>(pairs[e].size()), opt);
    for (size_t i = 0; i < pairs[e].size(); ++i)
      std::copy(y.begin() + i * H, y.begin() + (i + 1) * H, rows.begin() + pairs[e][i] * H);
  }
  // Finalize: weighted sum over each token's slots, in slot order.
  std::vector<double> out(static_cast<size_t>(tokens * H), 0.0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j) {
      const double wt = routing.weights[t * k + j];
      const double* y = rows.data() + (t * k + j) * H;
      for (int64_t h = 0; h < H; ++h) out[t * H + h] += wt * y[h];
    }
  if (cfg.has_shared_expert()) {
    FP4MOE_CHECK(w.shared && w.shared->materialized(),
                 "moe_reference: the config has a shared expert but its weights are missing");
    w.shared->validate(H, cfg.shared_intermediate, "moe_reference: shared_experts");
    const std::vector<double> s = expert_forward(*w.shared, cfg, hidden, tokens, opt);
    for (size_t i = 0; i < out.size(); ++i) out[i] += s[i];
  }
  return out;
}

}  // namespace fp4moe
