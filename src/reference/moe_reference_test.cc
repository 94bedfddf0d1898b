// The CPU reference MoE layer: a hand-computed layer, the textbook loop over dequantized
// matrices, and invariants (relabelling experts, a zero expert, k = 1, the shared expert, W4A4
// numerics).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/moe.h"
#include "fp4moe/synthetic.h"

namespace fp4moe {
namespace {

// An NVFP4 matrix whose every element is `code` (scale 1.0, global 1.0).
Nvfp4Matrix constant_matrix(int64_t rows, int64_t cols, uint8_t code) {
  Nvfp4Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.data.assign(rows * cols / 2, static_cast<uint8_t>(code | (code << 4)));
  m.block_scales.assign(rows * cols / 16, e4m3_from_float(1.0f));
  m.global_scale = 1.0f;
  return m;
}

MoeConfig tiny_config(int experts, int k) {
  MoeConfig c;
  c.name = "tiny";
  c.hidden = 16;
  c.intermediate = 16;
  c.num_experts = experts;
  c.routing = RoutingConfig{RoutingMode::kSoftmaxTopK, k, 1, 1, true, 1.0f};
  return c;
}

TEST(MoeReference, HandComputedLayer) {
  // Expert 0: gate = up = down = all ones; expert 1: all 0.5. x = (2, 0, ..., 0).
  // Expert 0: gate_i = up_i = 2; act_i = silu(2) * 2; out_h = 16 * act = 32 silu(2).
  // Expert 1: gate_i = up_i = 1; act_i = silu(1); out_h = 16 * 0.5 * silu(1) = 8 silu(1).
  MoeWeights w;
  w.config = tiny_config(2, 2);
  w.config.routing.norm_topk_prob = false;
  for (uint8_t code : {uint8_t{0x2}, uint8_t{0x1}}) {  // 1.0, 0.5
    ExpertWeights e;
    e.gate = e.up = constant_matrix(16, 16, code);
    e.down = constant_matrix(16, 16, code);
    w.experts.push_back(e);
  }
  std::vector<float> x(16, 0.0f);
  x[0] = 2.0f;
  Routing r;
  r.tokens = 1;
  r.top_k = 2;
  r.ids = {0, 1};
  r.weights = {0.75f, 0.25f};
  const std::vector<double> out = moe_reference(w, x, 1, r);
  const double silu2 = 2.0 / (1.0 + std::exp(-2.0)), silu1 = 1.0 / (1.0 + std::exp(-1.0));
  const double expected = 0.75 * 32 * silu2 + 0.25 * 8 * silu1;
  for (double v : out) EXPECT_NEAR(v, expected, 1e-12);
}

struct Layer {
  MoeWeights w;
  std::vector<float> x;
  std::vector<float> logits;
  int64_t tokens;
};

Layer random_layer(int experts, int k, int64_t tokens, uint64_t seed) {
  Layer l;
  MoeConfig c = tiny_config(experts, k);
  c.hidden = 64;
  c.intermediate = 32;
  SyntheticOptions so;
  so.seed = seed;
  so.init = WeightInit::kQuantizedGaussian;
  l.w = make_synthetic_moe(c, so);
  l.tokens = tokens;
  l.x = make_hidden_states(tokens, c.hidden, seed);
  l.logits = make_router_logits(tokens, experts, seed);
  return l;
}

// The whole layer against the textbook loop over dequantized matrices (`dequantize_f64`, the
// format's own decoder, not the reference's row decoder): random gate, up and down matrices of
// every expert and the shared one, several tokens, two slots with unequal weights. A gate / up
// swap, a transposed matrix, a token's slots mixed up or a slot's weight misapplied all change
// the result.
TEST(MoeReference, MatchesTheTextbookLoopOverDequantizedMatrices) {
  constexpr int kExperts = 6, kTopK = 2;
  constexpr int64_t kTokens = 5, H = 64, kSharedI = 48;  // the routed experts: I = 32
  Layer l = random_layer(kExperts, kTopK, kTokens, 27);
  l.w.config.shared_intermediate = kSharedI;
  l.w.shared = make_synthetic_expert(H, kSharedI, 98, 0, WeightInit::kQuantizedGaussian);
  Routing r;
  r.tokens = kTokens;
  r.top_k = kTopK;
  r.ids = {4, 1, 0, 5, 2, 4, 3, 0, 5, 2};  // every expert used, in both slots
  r.weights = {0.7f, 0.2f, 0.45f, 1.3f, 0.15f, 0.6f, 0.9f, 0.05f, 0.3f, 0.8f};
  const std::vector<double> out = moe_reference(l.w, l.x, kTokens, r);

  // y = down(silu(gate x) * up x), every matrix dequantized whole, once: [rows, cols] row-major.
  struct Dense {
    std::vector<double> gate, up, down;
    int64_t inter;
  };
  auto dense = [](const ExpertWeights& e) {
    return Dense{e.gate.dequantize_f64(), e.up.dequantize_f64(), e.down.dequantize_f64(), e.gate.rows};
  };
  std::vector<Dense> routed;
  for (const ExpertWeights& e : l.w.experts) routed.push_back(dense(e));
  const Dense shared = dense(*l.w.shared);
  // round_act: the SwiGLU output rounded to bf16 (through float, as the GPU's fp32 epilogue
  // stores it) before the down projection.
  auto expert = [&](const Dense& e, const float* x, bool round_act) {
    std::vector<double> act(static_cast<size_t>(e.inter)), y(static_cast<size_t>(H), 0.0);
    for (int64_t i = 0; i < e.inter; ++i) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < H; ++k) {
        g += e.gate[i * H + k] * x[k];
        u += e.up[i * H + k] * x[k];
      }
      act[i] = g / (1.0 + std::exp(-g)) * u;
      if (round_act) act[i] = Bf16::from_float(static_cast<float>(act[i])).to_float();
    }
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < e.inter; ++i) y[h] += e.down[h * e.inter + i] * act[i];
    return y;
  };
  ReferenceOptions rounding;
  rounding.round_act_to_bf16 = true;
  const std::vector<double> out_rounded = moe_reference(l.w, l.x, kTokens, r, rounding);
  for (const bool round_act : {false, true}) {
    const std::vector<double>& got = round_act ? out_rounded : out;
    double err = 0, norm = 0;
    for (int64_t t = 0; t < kTokens; ++t) {
      const float* xt = l.x.data() + t * H;
      std::vector<double> want = expert(shared, xt, round_act);
      for (int j = 0; j < kTopK; ++j) {
        const std::vector<double> y = expert(routed[r.ids[t * kTopK + j]], xt, round_act);
        for (int64_t h = 0; h < H; ++h) want[h] += r.weights[t * kTopK + j] * y[h];
      }
      for (int64_t h = 0; h < H; ++h) {
        EXPECT_NEAR(got[t * H + h], want[h], 1e-10 * (1 + std::fabs(want[h])))
            << "t " << t << " h " << h << (round_act ? " (act rounded to bf16)" : "");
        err += (got[t * H + h] - want[h]) * (got[t * H + h] - want[h]);
        norm += want[h] * want[h];
      }
    }
    EXPECT_GT(norm, 1.0);  // the inputs are not degenerate
    EXPECT_LT(std::sqrt(err / norm), 1e-12);
  }
  // The rounding is there: bf16's 8 bits move the output by ~1e-3, far beyond the 1e-10 above.
  double moved = 0, norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    moved += (out_rounded[i] - out[i]) * (out_rounded[i] - out[i]);
    norm += out[i] * out[i];
  }
  EXPECT_GT(std::sqrt(moved / norm), 1e-4);
}

TEST(MoeReference, RelabellingExpertsChangesNothing) {
  Layer l = random_layer(6, 2, 5, 21);
  const Routing r = route_reference(l.w.config.routing, l.logits, l.tokens, 6, {});
  const std::vector<double> out = moe_reference(l.w, l.x, l.tokens, r);
  // Permute experts and the logit columns the same way.
  const std::vector<int> perm = {3, 5, 0, 1, 4, 2};  // new index of old expert i
  MoeWeights p = l.w;
  std::vector<float> logits(l.logits.size());
  for (int i = 0; i < 6; ++i) {
    p.experts[perm[i]] = l.w.experts[i];
    for (int64_t t = 0; t < l.tokens; ++t) logits[t * 6 + perm[i]] = l.logits[t * 6 + i];
  }
  const Routing rp = route_reference(p.config.routing, logits, l.tokens, 6, {});
  const std::vector<double> outp = moe_reference(p, l.x, l.tokens, rp);
  ASSERT_EQ(out.size(), outp.size());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], outp[i], 1e-12 * (1 + std::fabs(out[i])));
}

TEST(MoeReference, ZeroExpertContributesNothing) {
  Layer l = random_layer(4, 2, 3, 22);
  Routing r;
  r.tokens = 3;
  r.top_k = 2;
  r.ids = {0, 1, 2, 1, 3, 1};  // expert 1 in every token's second slot
  r.weights = {0.6f, 0.4f, 0.3f, 0.7f, 0.5f, 0.5f};
  l.w.experts[1].gate = constant_matrix(32, 64, 0x0);
  l.w.experts[1].up = constant_matrix(32, 64, 0x0);
  const std::vector<double> out = moe_reference(l.w, l.x, 3, r);
  // Only slot 0 contributes: compare with k = 1 routing of the first slots.
  MoeWeights w1 = l.w;
  w1.config.routing.top_k = 1;
  Routing r1;
  r1.tokens = 3;
  r1.top_k = 1;
  r1.ids = {0, 2, 3};
  r1.weights = {0.6f, 0.3f, 0.5f};
  const std::vector<double> out1 = moe_reference(w1, l.x, 3, r1);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], out1[i], 1e-12);
}

TEST(MoeReference, TopOneWithNormalisationIsTheScaledExpert) {
  Layer l = random_layer(4, 1, 4, 23);
  l.w.config.routing.routed_scaling_factor = 2.5f;
  const Routing r = route_reference(l.w.config.routing, l.logits, 4, 4, {});
  for (float wt : r.weights) EXPECT_FLOAT_EQ(wt, 2.5f);
  const std::vector<double> out = moe_reference(l.w, l.x, 4, r);
  for (int64_t t = 0; t < 4; ++t) {
    const std::vector<float> xt(l.x.begin() + t * 64, l.x.begin() + (t + 1) * 64);
    const std::vector<double> y = expert_reference(l.w.experts[r.ids[t]], l.w.config, xt, 1);
    for (int h = 0; h < 64; ++h) EXPECT_NEAR(out[t * 64 + h], 2.5 * y[h], 1e-12);
  }
}

TEST(MoeReference, SharedExpertIsAdded) {
  Layer l = random_layer(4, 2, 3, 24);
  const Routing r = route_reference(l.w.config.routing, l.logits, 3, 4, {});
  const std::vector<double> base = moe_reference(l.w, l.x, 3, r);
  MoeWeights s = l.w;
  s.config.shared_intermediate = 48;
  s.shared = make_synthetic_expert(64, 48, 99, 0, WeightInit::kQuantizedGaussian);
  const std::vector<double> with = moe_reference(s, l.x, 3, r);
  const std::vector<double> shared = expert_reference(*s.shared, s.config, l.x, 3);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_NEAR(with[i], base[i] + shared[i], 1e-12);
  MoeWeights missing = s;
  missing.shared.reset();
  EXPECT_THROW(moe_reference(missing, l.x, 3, r), Error);
}

TEST(MoeReference, W4A4NumericsQuantizeEachGemmInput) {
  Layer l = random_layer(3, 1, 2, 25);
  const Routing r = route_reference(l.w.config.routing, l.logits, 2, 3, {});
  MoeWeights q = l.w;
  q.config.quantize_activations = true;
  const std::vector<double> a4 = moe_reference(q, l.x, 2, r);
  // Token 0 by hand: x quantized with the gate and up input scales, the SwiGLU product rounded
  // to float and quantized with the down input scale (top-1, normalised: weight 1).
  const ExpertWeights& e = q.experts[r.ids[0]];
  const std::vector<float> x0(l.x.begin(), l.x.begin() + 64);
  const std::vector<double> xg =
      quantize_nvfp4_activations(x0, 1, 64, e.gate_input_scale).dequantize_f64();
  const std::vector<double> xu =
      quantize_nvfp4_activations(x0, 1, 64, e.up_input_scale).dequantize_f64();
  std::vector<float> act(32);
  for (int i = 0; i < 32; ++i) {
    double g = 0, u = 0;
    for (int k = 0; k < 64; ++k) {
      g += e.gate.value(i, k) * xg[k];
      u += e.up.value(i, k) * xu[k];
    }
    act[i] = static_cast<float>(g / (1 + std::exp(-g)) * u);
  }
  const std::vector<double> aq =
      quantize_nvfp4_activations(act, 1, 32, e.down_input_scale).dequantize_f64();
  for (int h = 0; h < 64; ++h) {
    double y = 0;
    for (int i = 0; i < 32; ++i) y += e.down.value(h, i) * aq[i];
    EXPECT_NEAR(a4[h], y, 1e-9 * (1 + std::fabs(y))) << "h = " << h;
  }
  // And it differs from the W4A16 result, which it approximates.
  const std::vector<double> a16 = moe_reference(l.w, l.x, 2, r);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a16.size(); ++i) {
    diff += (a4[i] - a16[i]) * (a4[i] - a16[i]);
    norm += a16[i] * a16[i];
  }
  EXPECT_GT(std::sqrt(diff / norm), 1e-3);
  EXPECT_LT(std::sqrt(diff / norm), 0.3);
}

TEST(MoeReference, RejectsBadInput) {
  Layer l = random_layer(4, 2, 2, 26);
  Routing r = route_reference(l.w.config.routing, l.logits, 2, 4, {});
  EXPECT_THROW(moe_reference(l.w, std::vector<float>(10), 2, r), Error);
  Routing bad = r;
  bad.ids[1] = 7;
  EXPECT_THROW(moe_reference(l.w, l.x, 2, bad), Error);
  MoeWeights unmat = l.w;
  unmat.experts[r.ids[0]] = ExpertWeights{};
  EXPECT_THROW(moe_reference(unmat, l.x, 2, r), Error);
  // An expert whose matrix disagrees with the config (it overran the SwiGLU's rows), a NaN
  // routing weight and a NaN input are errors, not NaN outputs.
  MoeWeights narrow = l.w;
  narrow.experts[r.ids[0]].up = quantize_nvfp4(std::vector<float>(16 * 4, 1.0f), 1, 64);
  EXPECT_THROW(moe_reference(narrow, l.x, 2, r), Error);
  Routing nan_weight = r;
  nan_weight.weights[0] = std::nanf("");
  EXPECT_THROW(moe_reference(l.w, l.x, 2, nan_weight), Error);
  std::vector<float> nan_x = l.x;
  nan_x[5] = std::nanf("");
  EXPECT_THROW(moe_reference(l.w, nan_x, 2, r), Error);
}

}  // namespace
}  // namespace fp4moe
