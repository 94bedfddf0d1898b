#include "cli/shape_options.h"

#include <algorithm>
#include <optional>
#include <string>

#include "cli/validators.h"
#include "fp4moe/error.h"

namespace fp4moe::cli {

void ShapeArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--preset", preset, "Layer shape preset: glm5, glm5-tp8, deepseek-v3")
      ->check(CLI::IsMember(MoeConfig::preset_names()));
  // Whole numbers only, as typed: the config's own checks then name the field and its bound.
  cmd->add_option("--hidden", hidden, "Override H (model width)")->transform(WholeNumber<int64_t>());
  cmd->add_option("--intermediate", intermediate,
                  "Override I (expert width; the shared expert's too unless --shared-intermediate)")
      ->transform(WholeNumber<int64_t>());
  cmd->add_option("--shared-intermediate", shared_intermediate,
                  "Override the shared expert's width (0: none)")
      ->transform(WholeNumber<int64_t>());
  cmd->add_option("--experts", experts, "Override E (routed experts)")->transform(WholeNumber<int>());
  cmd->add_option("--top-k", top_k, "Override k (experts per token)")->transform(WholeNumber<int>());
  cmd->add_option("--n-group", n_group, "Override n_group (noaux_tc groups)")->transform(WholeNumber<int>());
  cmd->add_option("--topk-group", topk_group, "Override topk_group")->transform(WholeNumber<int>());
  cmd->add_option("--routing", routing, "Override the routing: softmax or sigmoid (noaux_tc)")
      ->check(CLI::IsMember({"softmax", "sigmoid"}));
}

MoeConfig ShapeArgs::resolve() const {
  MoeConfig c = MoeConfig::preset(preset);
  bool custom = false;
  if (hidden) { c.hidden = *hidden; custom = true; }
  if (intermediate) {
    c.intermediate = *intermediate;
    if (!shared_intermediate && c.shared_intermediate > 0) c.shared_intermediate = *intermediate;
    custom = true;
  }
  if (shared_intermediate) { c.shared_intermediate = *shared_intermediate; custom = true; }
  if (experts) { c.num_experts = *experts; custom = true; }
  if (top_k) { c.routing.top_k = *top_k; custom = true; }
  if (n_group) { c.routing.n_group = *n_group; custom = true; }
  if (topk_group) { c.routing.topk_group = *topk_group; custom = true; }
  if (!routing.empty()) {
    c.routing.mode = routing == "softmax" ? RoutingMode::kSoftmaxTopK : RoutingMode::kSigmoidNoAuxTc;
    // A preset's groups belong to its noaux_tc routing; softmax has none. Groups typed with
    // --routing softmax stay, for validate() to refuse by name.
    if (c.routing.mode == RoutingMode::kSoftmaxTopK) {
      if (!n_group) c.routing.n_group = 1;
      if (!topk_group) c.routing.topk_group = 1;
    }
    custom = true;
  }
  if (custom) c.name = preset + "+custom";
  c.validate();
  return c;
}

namespace {

// The items of a --tokens list, or the message naming the first that is not a token count: each
// item a decimal count as --tokens of `run` takes it, no sign, no spaces, no empty item (a
// trailing comma's included), none out of range.
std::vector<int64_t> token_counts(const std::string& s, std::string& error) {
  std::vector<int64_t> v;
  size_t begin = 0;
  for (;;) {
    const size_t end = std::min(s.find(',', begin), s.size());
    const std::string item = s.substr(begin, end - begin);
    const std::optional<int64_t> t = integer_in(item, 1, kMaxTokens);
    if (!t) {
      error = "'" + item + "' is not a token count in [1, " + std::to_string(kMaxTokens) + "]";
      return {};
    }
    v.push_back(*t);
    if (end == s.size()) return v;
    begin = end + 1;
  }
}

}  // namespace

std::vector<int64_t> parse_token_list(const std::string& s) {
  std::string error;
  std::vector<int64_t> v = token_counts(s, error);
  FP4MOE_CHECK(error.empty(), "--tokens: ", error);
  return v;
}

CLI::Validator TokenList() {
  return CLI::Validator(
      [](std::string& text) {
        std::string error;
        token_counts(text, error);
        return error;
      },
      "LIST");
}

}  // namespace fp4moe::cli
