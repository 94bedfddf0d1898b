// A Hugging Face checkpoint directory: config.json, hf_quant_config.json, and safetensors
// shards (model.safetensors.index.json's weight_map, or a single model.safetensors). Shards are
// opened (memory-mapped, validated) the first time one of their tensors is asked for.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace fp4moe {

// Parses model.safetensors.index.json text: {"weight_map": {tensor: shard file}, ...}. Shard
// names must be plain file names (no directories, no ".."). Throws naming `label`.
std::map<std::string, std::string> parse_safetensors_index(const std::string& json_text,
                                                           const std::string& label);

class Checkpoint {
 public:
  // Throws when the directory holds neither an index nor a model.safetensors.
  static Checkpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool contains(const std::string& tensor) const { return shard_of_.count(tensor) != 0; }
  // The tensor's view; throws naming the tensor (and its shard) when it is missing.
  const StTensorView& tensor(const std::string& name) const;
  std::vector<std::string> tensor_names() const;
  // DIR/name's text, nullopt where there is no such file (read_text_file's checks).
  std::optional<std::string> read_text(const std::string& name) const;

 private:
  std::string dir_;
  std::map<std::string, std::string> shard_of_;  // tensor -> shard file
  // Shards are opened on first use, from const calls of any thread (the loaders of two layers, or
  // of two ranks, at once): the map is changed under the mutex. A view returned stays valid: the
  // map's nodes and the files do not move.
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> shards_;
  mutable std::unique_ptr<std::mutex> shards_mutex_ = std::make_unique<std::mutex>();
};

}  // namespace fp4moe
