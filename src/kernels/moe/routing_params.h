// routing_params.h - the parameters of the GPU routing (routing.cuh), in a header of its own
// (no CUDA or model headers) so that the GEMM parameters, which host-only code includes, can
// carry them (the w4a16_gemv family routes inside its FC1).
#pragma once

namespace fp4moe::kernels {

struct RoutingParams {
  const float* logits = nullptr;            // [T][E]
  const float* correction_bias = nullptr;   // [E] or null
  int tokens = 0, experts = 0, top_k = 0;
  int mode = 0;                             // 0 softmax top-k, 1 sigmoid noaux_tc
  int n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  bool shared_expert = false;
  // outputs
  int* topk_ids = nullptr;
  float* topk_weights = nullptr;
  int* expert_offsets = nullptr;  // [E + 2]
  int* row_token = nullptr;
  float* row_weight = nullptr;
  int* pair_row = nullptr;
  // scratch for the multi-CTA path: each chunk's count per group, [kMaxRouteChunks][E + 1]
  // (routing_scratch_ints); written whole by the routing, nothing to zero
  int* chunk_counts = nullptr;
};

}  // namespace fp4moe::kernels
