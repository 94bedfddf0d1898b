// Options shared by run, bench, tune and synth: the layer shape (a preset, then per-field
// overrides) and token-count lists.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp4moe/moe.h"

namespace fp4moe::cli {

struct ShapeArgs {
  std::string preset = "glm5";
  // Overrides of the preset's fields: unset keeps the preset's value; a value given is always
  // applied and validated, so `--experts 0` is an error rather than the preset's 256.
  std::optional<int64_t> hidden, intermediate, shared_intermediate;
  std::optional<int> experts, top_k, n_group, topk_group;
  std::string routing;  // "", "softmax", "sigmoid"

  void add_to(CLI::App* cmd);
  MoeConfig resolve() const;  // preset + overrides, validated
};

// The largest batch a command takes (the GPU layer's limit too).
inline constexpr int64_t kMaxTokens = int64_t{1} << 24;

// "1,16,64" -> {1, 16, 64}; every item a decimal whole number in [1, kMaxTokens], else a one-line
// error naming the item (an empty item, a trailing comma's included). The callers take their
// default for an empty string before.
std::vector<int64_t> parse_token_list(const std::string& s);

// The same check as the option is parsed (->check(TokenList())): a bad list is a command-line
// error, exit 2, like any other option's bad value.
CLI::Validator TokenList();

}  // namespace fp4moe::cli
