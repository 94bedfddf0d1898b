// fp4moe/sharding.h - how a MoE layer splits over P GPUs (docs/ARCHITECTURE.md, "Multi-GPU").
//
// Tensor parallel (TP): rank r holds the intermediate columns [r * I/P, (r+1) * I/P) of every
// expert (the shared expert's likewise): FC1's gate and up rows, FC2's columns. SwiGLU acts on
// each intermediate column alone, so the ranks' layer outputs sum to the whole layer's; the
// layer ends with an all-reduce. I/P must be a multiple of 16 (an NVFP4 block of FC2's K).
// Expert parallel (EP): rank r holds the routed experts [r * E/P, (r+1) * E/P) whole; the
// shared expert is computed by every rank for its own tokens.
#pragma once

#include <cstdint>

#include "fp4moe/format.h"
#include "fp4moe/moe.h"

namespace fp4moe {

enum class ShardMode { kTensor, kExpert };
const char* to_string(ShardMode m);

struct Shard {
  ShardMode mode = ShardMode::kTensor;
  int rank = 0;
  int world = 1;
};

struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Throws fp4moe::Error naming what does not divide (or a rank outside [0, world)).
void validate_shard(const MoeConfig& cfg, const Shard& s);

// TP: the intermediate columns of rank s.rank (of a width `intermediate`: I or the shared I).
IndexRange tp_columns(int64_t intermediate, const Shard& s);
// EP: the routed experts of rank s.rank.
IndexRange ep_experts(int num_experts, const Shard& s);

// Rows [r.begin, r.end) of m; columns [c.begin, c.end) of m (multiples of 16: whole blocks).
Nvfp4Matrix slice_rows(const Nvfp4Matrix& m, IndexRange r);
Nvfp4Matrix slice_cols(const Nvfp4Matrix& m, IndexRange c);

// The config a rank runs: TP divides I and the shared I by P; EP keeps the shape.
MoeConfig shard_config(const MoeConfig& cfg, const Shard& s);

// The weights rank s.rank holds: TP slices every expert; EP keeps its own experts and the shared
// expert and leaves the others unmaterialized. Router and correction bias stay whole.
MoeWeights shard_weights(const MoeWeights& full, const Shard& s);

}  // namespace fp4moe
