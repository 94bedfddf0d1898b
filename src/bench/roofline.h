// The roofline accounting of one MoE layer call: the bytes it must move, the FLOPs it must
// do, and the floor time they imply on a GPU with a given read bandwidth and tensor rate.
// Decode-sized batches are bound by reading weights; the yardstick there is bytes per second
// against the measured read bandwidth, not FLOPs against a tensor peak.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/moe.h"

namespace fp4moe {

struct LayerCost {
  int64_t tokens = 0;
  int active_experts = 0;      // routed experts that received at least one token
  double weight_bytes = 0;     // NVFP4 codes + E4M3 block scales + global scales of the
                               // active experts and the shared expert (checkpoint bytes)
  double activation_bytes = 0; // hidden in (bf16) + router logits (fp32) + out (bf16)
  double bytes = 0;            // the two above
  double flops = 0;            // 2 x MACs of FC1 (gate + up) and FC2 over all (token, expert)
                               // pairs and the shared expert
};

// Bytes and FLOPs for `tokens` tokens whose routing activates `active_experts` experts.
LayerCost layer_cost(const MoeConfig& cfg, int64_t tokens, int active_experts);
// The same layer as the cuBLAS BF16 baseline computes it: the same FLOPs; its weights 2 bytes an
// element (no scales), its activations hidden in and out (its routing is given, no logits).
LayerCost bf16_layer_cost(const MoeConfig& cfg, int64_t tokens, int active_experts);

// One expert's NVFP4 bytes: gate [I, H], up [I, H], down [H, I] - codes 1/2 byte and scales
// 1/16 byte an element, and three fp32 global scales.
double expert_weight_bytes(int64_t hidden, int64_t intermediate);
// Distinct experts in a [T, k] id list.
int count_active_experts(const std::vector<int32_t>& ids, int num_experts);

struct Roofline {
  double memory_s = 0;   // bytes / read bandwidth
  double compute_s = 0;  // flops / tensor rate
  double floor_s = 0;    // max of the two: no implementation runs faster
  double intensity = 0;  // flops per byte
  double ridge = 0;      // the intensity where both terms are equal
  bool memory_bound = true;
};
Roofline roofline(const LayerCost& c, double read_bytes_per_s, double flops_per_s);

}  // namespace fp4moe
