// NVIDIA ModelOpt NVFP4 checkpoints (Hugging Face layout: docs/ARCHITECTURE.md, "Checkpoints"): the model
// config (GLM-5 glm_moe_dsa and DeepSeek-V3 fields), the quantization config, the import of one
// MoE layer, and the writer of synthetic checkpoints in the same layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/moe.h"
#include "fp4moe/sharding.h"
#include "fp4moe/synthetic.h"
#include "io/checkpoint.h"

namespace fp4moe {

struct ModelInfo {
  std::string model_type;      // config.json "model_type"
  MoeConfig moe;               // the MoE layers' shape and routing
  int num_layers = 0;          // num_hidden_layers
  int first_moe_layer = 0;     // first_k_dense_replace: layers before it are dense
  std::string quant_algo;      // "NVFP4"
  int group_size = 16;
  std::vector<std::string> exclude_modules;  // glob patterns of unquantized modules
};

// Reads config.json and hf_quant_config.json (or config.json's quantization_config). Throws
// naming the file and field on a missing field, an unknown routing, or a quant_algo that is not
// NVFP4 with group size 16.
ModelInfo read_model_info(const Checkpoint& ckpt);

// Imports MoE layer `layer`: every routed expert (gate/up/down weight, weight_scale,
// weight_scale_2, input_scale), the router (mlp.gate.weight, e_score_correction_bias) and the
// shared expert. Throws naming the tensor on a missing tensor, a wrong dtype or shape, or a
// layer that is dense or excluded from quantization.
MoeWeights load_moe_layer(const Checkpoint& ckpt, const ModelInfo& info, int layer);
// The part of that layer one rank of a sharded deployment holds (fp4moe/sharding.h), read
// straight from the mapped shards: its intermediate columns (TP) or its experts (EP) only;
// equal, byte for byte, to shard_weights() of the whole layer.
MoeWeights load_moe_layer(const Checkpoint& ckpt, const ModelInfo& info, int layer, const Shard& shard);
// What load_moe_layer checks of layer `layer` - every tensor it reads there, with its dtype and
// shape, each global scale finite and > 0, the router and bias finite - without copying a
// weight: `inspect` runs it on every MoE layer. What it leaves to the load is the block scales'
// values (a NaN code): gigabytes a layer, read only where a layer is loaded. Throws as
// load_moe_layer does.
void check_moe_layer(const Checkpoint& ckpt, const ModelInfo& info, int layer);

// fnmatch-style glob ('*' and '?') used for exclude_modules.
bool glob_match(const std::string& pattern, const std::string& text);

struct SynthCheckpointOptions {
  int layers = 1;
  uint64_t seed = 1;
  WeightInit init = WeightInit::kRandomCodes;
  std::string model_type;  // default: glm_moe_dsa for glm5 presets, deepseek_v3 otherwise
};

// Writes a ModelOpt-format NVFP4 checkpoint of `layers` MoE layers: config.json,
// hf_quant_config.json, one safetensors shard per layer and model.safetensors.index.json.
// Layer L's weights are make_synthetic_moe(cfg, seed = options.seed + L) (streamed: one expert
// in memory at a time).
void write_synthetic_checkpoint(const std::string& dir, const MoeConfig& cfg, const SynthCheckpointOptions& opt);
// The files it writes in `dir`: config.json, hf_quant_config.json, the index and one shard a
// layer ("model-00001-of-00002.safetensors").
std::vector<std::string> synthetic_checkpoint_files(int layers);

// The synthetic layer as write_synthetic_checkpoint writes it (for comparisons).
MoeWeights synthetic_checkpoint_layer(const MoeConfig& cfg, const SynthCheckpointOptions& opt, int layer);

}  // namespace fp4moe
