// fp4moe/synthetic.h - seeded random MoE layers and inputs for tests, `fp4moe run` and the
// benchmark. Every expert draws from its own stream, so a layer is the same whichever experts
// are materialised and in whatever order.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4moe/moe.h"

namespace fp4moe {

enum class WeightInit {
  // Gaussian floats (std 1/sqrt(K)) quantized with the ModelOpt recipe: realistic codes and
  // scales; costs a full quantization pass (use for small shapes and tests).
  kQuantizedGaussian,
  // Random E2M1 codes and random E4M3 block scales in [0.25, 2] with a global scale chosen so
  // that a dot product over K stays O(1): valid NVFP4 tensors at memory speed (full GLM-5
  // layers: 5.4 GB of weights in seconds).
  kRandomCodes,
};

struct SyntheticOptions {
  uint64_t seed = 1;
  WeightInit init = WeightInit::kRandomCodes;
  std::vector<bool> materialize;  // per expert; empty = all experts
  bool router = true;             // also make the router weight and correction bias
  int threads = 0;
};

MoeWeights make_synthetic_moe(const MoeConfig& cfg, const SyntheticOptions& opt);
ExpertWeights make_synthetic_expert(int64_t hidden, int64_t intermediate, uint64_t seed,
                                    uint64_t stream, WeightInit init);
Nvfp4Matrix make_synthetic_nvfp4(int64_t rows, int64_t cols, uint64_t seed, uint64_t stream,
                                 WeightInit init);

// Layer input: N(0, 1) values rounded to bf16 (as a bf16 activation would hold them).
std::vector<float> make_hidden_states(int64_t tokens, int64_t hidden, uint64_t seed);

// Router logits [T, E] with a controllable spread: N(0, 1) per entry, plus, when skew > 0, a
// per-expert popularity offset skew * N(0, 1) favouring a few experts (skewed routing).
// skew is in [0, kMaxRoutingSkew].
inline constexpr double kMaxRoutingSkew = 1000.0;
std::vector<float> make_router_logits(int64_t tokens, int num_experts, uint64_t seed,
                                      double skew = 0.0);

}  // namespace fp4moe
