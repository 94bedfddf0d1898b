// Layer-shape options shared by run, bench and tune: a preset, then per-field overrides.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

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

}  // namespace fp4moe::cli
