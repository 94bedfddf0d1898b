// Options shared by run, bench and tune: the layer shape (a preset, then per-field overrides)
// and token-count lists.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/moe.h"

namespace fp4moe::cli {

struct ShapeArgs {
  std::string preset = "glm5";
  int64_t hidden = 0, intermediate = 0, shared_intermediate = -1;
  int experts = 0, top_k = 0, n_group = 0, topk_group = 0;
  std::string routing;  // "", "softmax", "sigmoid"

  void add_to(CLI::App* cmd);
  MoeConfig resolve() const;  // preset + overrides, validated
};

// "1,16,64" -> {1, 16, 64}; every item a whole number in [1, 2^24], else a one-line error
// naming the item. An empty string gives an empty list (the caller's default).
std::vector<int64_t> parse_token_list(const std::string& s);

}  // namespace fp4moe::cli
