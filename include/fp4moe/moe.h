// fp4moe/moe.h - the MoE layer's description (shape, routing), its NVFP4 weights, and the
// float64 CPU reference that every test compares with.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fp4moe/format.h"

namespace fp4moe {

// ---- configuration -----------------------------------------------------------------------------
enum class RoutingMode {
  kSoftmaxTopK,     // softmax over all experts, then top-k (Mixtral, Qwen-MoE)
  kSigmoidNoAuxTc,  // sigmoid scores + e_score_correction_bias choose; un-biased scores weigh
                    // (DeepSeek-V3 / GLM-5 "noaux_tc", with n_group / topk_group)
};
const char* to_string(RoutingMode m);

struct RoutingConfig {
  RoutingMode mode = RoutingMode::kSigmoidNoAuxTc;
  int top_k = 8;
  int n_group = 1;     // experts are split into n_group equal groups ...
  int topk_group = 1;  // ... and only the best topk_group groups compete
  bool norm_topk_prob = true;         // renormalise the k weights to sum to 1
  float routed_scaling_factor = 1.0f; // then multiply them by this

  bool operator==(const RoutingConfig&) const = default;
};

struct MoeConfig {
  std::string name = "custom";
  int64_t hidden = 0;        // H: model width, FC1's K and FC2's N
  int64_t intermediate = 0;  // I: per-expert width (moe_intermediate_size, per GPU shard)
  int num_experts = 0;       // E: routed experts
  RoutingConfig routing;
  int64_t shared_intermediate = 0;  // 0: no shared expert
  // Quantize each GEMM's input activations to NVFP4 with the expert's input_scale before the
  // GEMM (the Blackwell W4A4 numerics). Off: activations enter the GEMMs in full precision.
  bool quantize_activations = false;

  bool has_shared_expert() const { return shared_intermediate > 0; }
  void validate() const;  // throws fp4moe::Error naming the bad field
  bool operator==(const MoeConfig&) const = default;

  static MoeConfig glm5();         // H 6144, I 2048, E 256, top-8, sigmoid noaux_tc, 1 shared
  static MoeConfig glm5_tp8();     // GLM-5 with I sharded 8 ways: I 256 (shared expert too)
  static MoeConfig deepseek_v3();  // H 7168, I 2048, E 256, top-8, n_group 8, topk_group 4
  static MoeConfig preset(const std::string& name);  // "glm5", "glm5-tp8", "deepseek-v3"
  static std::vector<std::string> preset_names();
};

// ---- weights -----------------------------------------------------------------------------------
// One SwiGLU expert: out = down( silu(gate(x)) * up(x) ). gate/up: [I, H]; down: [H, I].
// gate and up keep their own global scales (real checkpoints differ there).
struct ExpertWeights {
  Nvfp4Matrix gate, up, down;
  float gate_input_scale = 1.0f, up_input_scale = 1.0f, down_input_scale = 1.0f;

  bool materialized() const { return gate.rows > 0; }
  void validate(int64_t hidden, int64_t intermediate, const std::string& what) const;
};

struct MoeWeights {
  MoeConfig config;
  std::vector<ExpertWeights> experts;     // E entries; an unmaterialised one has empty matrices
  std::optional<ExpertWeights> shared;    // present iff config.has_shared_expert()
  std::vector<float> router_weight;       // [E, H] (mlp.gate.weight), may be empty
  std::vector<float> correction_bias;     // [E] (e_score_correction_bias); empty = zeros

  void validate() const;  // every materialised expert; router and bias shapes
};

// ---- reference computation ---------------------------------------------------------------------
struct Routing {
  int64_t tokens = 0;
  int top_k = 0;
  std::vector<int32_t> ids;     // [tokens, top_k], the chosen experts in rank order
  std::vector<float> weights;   // [tokens, top_k], final weights (normalised and scaled)
};

// logits [T, E] = hidden [T, H] . router_weight[E, H]^T, accumulated in double.
std::vector<float> router_logits_reference(std::span<const float> hidden, int64_t tokens,
                                           const MoeWeights& w);

// noaux_tc's group scores: per group of n_group equal groups of `choice` (one token's choice
// scores, sigmoid + correction bias), the sum of its two largest.
std::vector<double> expert_group_scores(std::span<const double> choice, int n_group);

// Refuses, naming `what`, the token and the expert, router logits [T, E] that route nothing: a
// NaN or +inf, or (softmax) a token whose every logit is -inf. -inf alone masks its expert
// (docs/ROUTING.md). The host entry points check with it: the GPU routing would give such a
// token a NaN output row. Logits of another size than T x E are refused before any is read.
void check_router_logits(RoutingMode mode, std::span<const float> logits, int64_t tokens, int num_experts,
                         const char* what);

// Deterministic top-k routing (semantics in docs/ROUTING.md): ties between equal scores go to
// the lower expert index (and the lower group index), as a stable sort would order them.
Routing route_reference(const RoutingConfig& cfg, std::span<const float> logits, int64_t tokens,
                        int num_experts, std::span<const float> correction_bias);

struct ReferenceOptions {
  int threads = 0;  // 0: all hardware threads
  // Round each expert's SwiGLU output to bf16 before FC2, as the GPU layer stores it (act is
  // bf16 between its two GEMMs in every kernel family). Off, the float64 reference of the layer's
  // mathematics; on, what a correct GPU layer differs from by its fp32 sums and the output's
  // rounding only, so that its tests can hold it to a tighter tolerance.
  bool round_act_to_bf16 = false;
};

// out [T, H] = sum_j weight(t, j) * expert_{id(t,j)}(x_t)  (+ shared(x_t)), float64 throughout.
// hidden holds the layer input's values (round them to bf16 first to mirror a bf16 input).
std::vector<double> moe_reference(const MoeWeights& w, std::span<const float> hidden,
                                  int64_t tokens, const Routing& routing,
                                  const ReferenceOptions& opt = {});

// Host bytes moe_reference holds at its peak for `tokens` tokens (its float64 rows: k routed
// outputs, the sum, the shared expert's input, intermediates and output), the weights not
// included: for callers that check a batch fits before they start.
double moe_reference_host_bytes(const MoeConfig& cfg, int64_t tokens);

// One expert (or the shared expert) on a set of rows: out [n, H] (float64).
std::vector<double> expert_reference(const ExpertWeights& e, const MoeConfig& cfg,
                                     std::span<const float> x, int64_t rows,
                                     const ReferenceOptions& opt = {});

}  // namespace fp4moe
