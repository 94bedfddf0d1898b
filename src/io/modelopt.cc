// ModelOpt NVFP4 import and synthetic checkpoints (see modelopt.h).
#include "io/modelopt.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/sharding.h"
#include "io/json_document.h"
#include "io/text_file.h"

namespace fp4moe {
namespace {

using json = nlohmann::json;

// A field of the expected JSON type, whole: nlohmann's get<int> would take 16.9 as 16 and
// 4294967312 as 16, and a size read that way would load another layer shape than written.
template <typename T>
T field(const json& j, const char* key, const std::string& label) {
  FP4MOE_CHECK(j.contains(key), label, ": missing field '", key, "'");
  const json& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    FP4MOE_CHECK(v.is_boolean(), label, ": field '", key, "' is not true or false");
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    FP4MOE_CHECK(v.is_number_integer(), label, ": field '", key, "' is not an integer");
    const bool in_range = v.is_number_unsigned()
                              ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                              : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                    v.get<int64_t>() <= std::numeric_limits<T>::max();
    FP4MOE_CHECK(in_range, label, ": field '", key, "' = ", v.dump(), " is out of range");
    return static_cast<T>(v.get<int64_t>());
  } else if constexpr (std::is_floating_point_v<T>) {
    FP4MOE_CHECK(v.is_number(), label, ": field '", key, "' is not a number");
    const double d = v.get<double>();
    FP4MOE_CHECK(std::isfinite(d) && std::fabs(d) <= std::numeric_limits<T>::max(), label, ": field '", key,
                 "' = ", v.dump(), " is out of range");
    return static_cast<T>(d);
  } else {
    FP4MOE_CHECK(v.is_string(), label, ": field '", key, "' is not a string");
    return v.get<std::string>();
  }
}

template <typename T>
T field_or(const json& j, const char* key, T fallback, const std::string& label) {
  return j.contains(key) && !j[key].is_null() ? field<T>(j, key, label) : fallback;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

const StTensorView& expect(const Checkpoint& c, const std::string& name, std::initializer_list<StDtype> dtypes,
                           const std::vector<int64_t>& shape) {
  const StTensorView& v = c.tensor(name);
  bool ok = false;
  for (StDtype d : dtypes) ok |= v.dtype == d;
  std::string accepted;
  for (StDtype d : dtypes) accepted += (accepted.empty() ? "" : " or ") + std::string(to_string(d));
  FP4MOE_CHECK(ok, c.dir(), ": tensor '", name, "' has dtype ", to_string(v.dtype), ", expected ", accepted);
  FP4MOE_CHECK(v.shape == shape, c.dir(), ": tensor '", name, "' has shape ", shape_text(v.shape),
               ", expected ", shape_text(shape));
  return v;
}

// A scalar F32 stored with shape [] or [1].
float scalar_f32(const Checkpoint& c, const std::string& name) {
  const StTensorView& v = c.tensor(name);
  FP4MOE_CHECK(v.dtype == StDtype::kF32, c.dir(), ": tensor '", name, "' has dtype ", to_string(v.dtype),
               ", expected F32");
  FP4MOE_CHECK(v.elements() == 1 && v.shape.size() <= 1, c.dir(), ": tensor '", name, "' has shape ",
               shape_text(v.shape), ", expected a scalar ([] or [1])");
  float f;
  std::memcpy(&f, v.bytes.data(), 4);
  FP4MOE_CHECK(std::isfinite(f) && f > 0, c.dir(), ": tensor '", name, "' = ", f, ", expected finite and > 0");
  return f;
}

std::vector<float> to_floats(const StTensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (v.dtype == StDtype::kF32) {
      std::memcpy(&out[i], v.bytes.data() + 4 * i, 4);
    } else {
      uint16_t b;
      std::memcpy(&b, v.bytes.data() + 2 * i, 2);
      if (v.dtype == StDtype::kBF16) {
        out[i] = Bf16::from_bits(b).to_float();
      } else {  // F16
        const uint32_t sign = (b >> 15) & 1, exp = (b >> 10) & 0x1F, man = b & 0x3FF;
        float f = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
                  : exp == 31 ? (man ? NAN : INFINITY)
                              : std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
        out[i] = sign ? -f : f;
      }
    }
  }
  return out;
}

// Rows `rs` x columns `cs` (whole 16-column blocks) of an NVFP4 tensor, copied straight from the
// mapped shard: a rank of a sharded layer touches only its own slice's bytes.
// `check_only`: the tensors' names, dtypes, shapes and global scale checked, no weight copied.
Nvfp4Matrix load_nvfp4(const Checkpoint& c, const std::string& prefix, int64_t rows, int64_t cols, IndexRange rs,
                       IndexRange cs, bool check_only) {
  Nvfp4Matrix m;
  m.rows = rs.size();
  m.cols = cs.size();
  const StTensorView& w = expect(c, prefix + ".weight", {StDtype::kU8}, {rows, cols / 2});
  const StTensorView& s = expect(c, prefix + ".weight_scale", {StDtype::kF8E4M3}, {rows, cols / 16});
  if (check_only) {
    m.global_scale = scalar_f32(c, prefix + ".weight_scale_2");
    return m;
  }
  m.data.reserve(m.rows * m.cols / 2);
  m.block_scales.reserve(m.rows * m.cols / 16);
  for (int64_t r = rs.begin; r < rs.end; ++r) {
    const auto row = w.bytes.begin() + r * (cols / 2);
    m.data.insert(m.data.end(), row + cs.begin / 2, row + cs.end / 2);
    const auto srow = s.bytes.begin() + r * (cols / 16);
    m.block_scales.insert(m.block_scales.end(), srow + cs.begin / 16, srow + cs.end / 16);
  }
  m.global_scale = scalar_f32(c, prefix + ".weight_scale_2");
  m.validate((c.dir() + ": " + prefix).c_str());
  return m;
}

// An expert, or its tensor-parallel slice: intermediate columns `ic` (gate/up rows, down
// columns).
ExpertWeights load_expert(const Checkpoint& c, const std::string& prefix, int64_t hidden, int64_t inter,
                          IndexRange ic, bool check_only) {
  ExpertWeights e;
  e.gate = load_nvfp4(c, prefix + ".gate_proj", inter, hidden, ic, {0, hidden}, check_only);
  e.up = load_nvfp4(c, prefix + ".up_proj", inter, hidden, ic, {0, hidden}, check_only);
  e.down = load_nvfp4(c, prefix + ".down_proj", hidden, inter, {0, hidden}, ic, check_only);
  // input_scale: the calibrated activation scale (W4A4 numerics only); absent means unused.
  auto input_scale = [&](const std::string& p) {
    return c.contains(p + ".input_scale") ? scalar_f32(c, p + ".input_scale") : 1.0f;
  };
  e.gate_input_scale = input_scale(prefix + ".gate_proj");
  e.up_input_scale = input_scale(prefix + ".up_proj");
  e.down_input_scale = input_scale(prefix + ".down_proj");
  return e;
}

std::string model_type_for(const MoeConfig& cfg) {
  return cfg.name.rfind("glm5", 0) == 0 ? "glm_moe_dsa" : "deepseek_v3";
}

}  // namespace

bool glob_match(const std::string& p, const std::string& t) {
  size_t pi = 0, ti = 0, star = std::string::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi;
      ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (star != std::string::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

ModelInfo read_model_info(const Checkpoint& ckpt) {
  const std::string cfg_label = ckpt.dir() + "/config.json";
  const std::optional<std::string> cfg_text = ckpt.read_text("config.json");
  FP4MOE_CHECK(cfg_text.has_value(), cfg_label, ": missing");
  FP4MOE_CHECK(!cfg_text->empty(), cfg_label, ": empty");
  const json c = parse_json_document(*cfg_text, cfg_label);
  ModelInfo info;
  info.model_type = field_or<std::string>(c, "model_type", "", cfg_label);
  MoeConfig& m = info.moe;
  m.name = info.model_type.empty() ? "checkpoint" : info.model_type;
  m.hidden = field<int64_t>(c, "hidden_size", cfg_label);
  m.intermediate = field<int64_t>(c, "moe_intermediate_size", cfg_label);
  m.num_experts = c.contains("n_routed_experts") ? field<int>(c, "n_routed_experts", cfg_label)
                                                 : field<int>(c, "num_experts", cfg_label);
  m.routing.top_k = field<int>(c, "num_experts_per_tok", cfg_label);
  const int n_shared = field_or<int>(c, "n_shared_experts", 0, cfg_label);
  FP4MOE_CHECK(n_shared >= 0, cfg_label, ": n_shared_experts = ", n_shared, " is negative");
  // (0 shared experts: 0, whatever the width, which validate() then checks with its own message.)
  m.shared_intermediate = n_shared == 0 ? 0
                                        : checked_size(n_shared, m.intermediate,
                                                       (cfg_label + ": n_shared_experts x moe_intermediate_size").c_str());
  // Without scoring_func, the model's own code decides: GLM-4.5/GLM-5 (glm4_moe, glm_moe_dsa)
  // hard-code sigmoid with noaux_tc and carry no such field, DeepSeek-V3's config defaults to
  // sigmoid, and a noaux_tc top-k is sigmoid's; softmax otherwise (Mixtral, Qwen-MoE).
  const std::string topk_method = field_or<std::string>(c, "topk_method", "", cfg_label);
  const bool sigmoid_model = info.model_type == "glm_moe_dsa" || info.model_type == "glm4_moe" ||
                             info.model_type == "deepseek_v3" || topk_method == "noaux_tc";
  const std::string scoring = field_or<std::string>(c, "scoring_func", sigmoid_model ? "sigmoid" : "softmax", cfg_label);
  if (scoring == "sigmoid") {
    FP4MOE_CHECK(topk_method.empty() || topk_method == "noaux_tc", cfg_label, ": topk_method '", topk_method,
                 "' with sigmoid scoring is not supported (noaux_tc is)");
    m.routing.mode = RoutingMode::kSigmoidNoAuxTc;
  } else {
    FP4MOE_CHECK(scoring == "softmax", cfg_label, ": scoring_func '", scoring, "' is not supported (sigmoid, softmax)");
    FP4MOE_CHECK(topk_method.empty() || topk_method == "greedy", cfg_label, ": topk_method '", topk_method,
                 "' with softmax scoring is not supported (greedy is)");
    m.routing.mode = RoutingMode::kSoftmaxTopK;
  }
  // Greedy softmax top-k ignores n_group and topk_group where a config carries them (as the
  // modeling code does); noaux_tc reads them.
  if (m.routing.mode == RoutingMode::kSigmoidNoAuxTc) {
    m.routing.n_group = field_or<int>(c, "n_group", 1, cfg_label);
    m.routing.topk_group = field_or<int>(c, "topk_group", 1, cfg_label);
  }
  m.routing.norm_topk_prob = field_or<bool>(c, "norm_topk_prob", true, cfg_label);
  m.routing.routed_scaling_factor = field_or<float>(c, "routed_scaling_factor", 1.0f, cfg_label);
  info.num_layers = field<int>(c, "num_hidden_layers", cfg_label);
  info.first_moe_layer = field_or<int>(c, "first_k_dense_replace", 0, cfg_label);
  FP4MOE_CHECK(info.num_layers >= 1, cfg_label, ": num_hidden_layers = ", info.num_layers, " must be >= 1");
  FP4MOE_CHECK(info.first_moe_layer >= 0 && info.first_moe_layer < info.num_layers, cfg_label,
               ": first_k_dense_replace = ", info.first_moe_layer, " must be in [0, num_hidden_layers = ",
               info.num_layers, ")");
  try {
    m.validate();
  } catch (const Error& e) {
    FP4MOE_FAIL(cfg_label, ": ", e.what());
  }

  // Quantization: hf_quant_config.json, else config.json's quantization_config.
  const std::optional<std::string> q_text = ckpt.read_text("hf_quant_config.json");
  json hf_quant;  // stays where q refers into it
  const json* quant = nullptr;
  std::string q_label;
  if (q_text) {
    q_label = ckpt.dir() + "/hf_quant_config.json";
    hf_quant = parse_json_document(*q_text, q_label);
    FP4MOE_CHECK(hf_quant.contains("quantization") && hf_quant["quantization"].is_object(), q_label,
                 ": missing object 'quantization'");
    quant = &hf_quant["quantization"];
  } else {
    q_label = cfg_label + " quantization_config";
    FP4MOE_CHECK(c.contains("quantization_config") && c["quantization_config"].is_object(), ckpt.dir(),
                 ": neither hf_quant_config.json nor config.json quantization_config: not a ModelOpt checkpoint");
    quant = &c["quantization_config"];
  }
  const json& q = *quant;
  info.quant_algo = field<std::string>(q, "quant_algo", q_label);
  FP4MOE_CHECK(info.quant_algo == "NVFP4", q_label, ": quant_algo '", info.quant_algo,
               "' is not supported (fp4moe runs NVFP4 checkpoints)");
  info.group_size = field_or<int>(q, "group_size", 16, q_label);
  FP4MOE_CHECK(info.group_size == 16, q_label, ": group_size ", info.group_size, " is not NVFP4's 16");
  if (q.contains("exclude_modules") && q["exclude_modules"].is_array())
    for (const auto& e : q["exclude_modules"])
      if (e.is_string()) info.exclude_modules.push_back(e.get<std::string>());
  return info;
}

namespace {

// Every value of tensor `name` finite, else an error naming it and the index ([row, column] with
// `cols` > 0): NaN passes every comparison of the routing's sorts.
void require_finite(const Checkpoint& ckpt, const std::string& name, const std::vector<float>& v, int64_t cols) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isfinite(v[i])) continue;
    const int64_t at = static_cast<int64_t>(i);
    FP4MOE_FAIL(ckpt.dir(), ": tensor '", name, "' [",
                cols > 0 ? std::to_string(at / cols) + ", " + std::to_string(at % cols) : std::to_string(at), "] is ",
                v[i]);
  }
}

// load_moe_layer, or with `check_only` the same walk over the layer's tensors without copying a
// weight (check_moe_layer).
MoeWeights read_moe_layer(const Checkpoint& ckpt, const ModelInfo& info, int layer, const Shard& shard,
                          bool check_only) {
  FP4MOE_CHECK(layer >= 0 && layer < info.num_layers, ckpt.dir(), ": layer ", layer, " out of range [0, ",
               info.num_layers, ")");
  FP4MOE_CHECK(layer >= info.first_moe_layer, ckpt.dir(), ": layer ", layer,
               " is dense (first_k_dense_replace = ", info.first_moe_layer, "); MoE layers start at ",
               info.first_moe_layer);
  const std::string prefix = "model.layers." + std::to_string(layer) + ".mlp";
  for (const std::string& pat : info.exclude_modules)
    FP4MOE_CHECK(!glob_match(pat, prefix + ".experts.0.gate_proj"), ckpt.dir(), ": the experts of layer ", layer,
                 " are excluded from quantization ('", pat, "'): not an NVFP4 layer");
  const MoeConfig& cfg = info.moe;
  MoeWeights w;
  w.config = shard_config(cfg, shard);  // validates the split
  // The router's [E, H] first: it confirms config.json's expert count before E slots are made.
  // The router and the bias are read in either mode (kilobytes to megabytes), and must be finite.
  const std::string router = prefix + ".gate.weight";
  w.router_weight =
      to_floats(expect(ckpt, router, {StDtype::kBF16, StDtype::kF32, StDtype::kF16}, {cfg.num_experts, cfg.hidden}));
  require_finite(ckpt, router, w.router_weight, cfg.hidden);
  w.experts.resize(cfg.num_experts);
  const bool tp = shard.mode == ShardMode::kTensor;
  const IndexRange mine = tp ? IndexRange{0, cfg.num_experts} : ep_experts(cfg.num_experts, shard);
  const IndexRange cols = tp ? tp_columns(cfg.intermediate, shard) : IndexRange{0, cfg.intermediate};
  for (int64_t e = mine.begin; e < mine.end; ++e)
    w.experts[e] =
        load_expert(ckpt, prefix + ".experts." + std::to_string(e), cfg.hidden, cfg.intermediate, cols, check_only);
  if (cfg.has_shared_expert())
    w.shared = load_expert(ckpt, prefix + ".shared_experts", cfg.hidden, cfg.shared_intermediate,
                           tp ? tp_columns(cfg.shared_intermediate, shard) : IndexRange{0, cfg.shared_intermediate},
                           check_only);
  const std::string bias = prefix + ".gate.e_score_correction_bias";
  if (ckpt.contains(bias)) {
    w.correction_bias = to_floats(expect(ckpt, bias, {StDtype::kF32, StDtype::kBF16}, {cfg.num_experts}));
    require_finite(ckpt, bias, w.correction_bias, 0);
  } else {
    FP4MOE_CHECK(cfg.routing.mode != RoutingMode::kSigmoidNoAuxTc, ckpt.dir(), ": missing tensor '", bias,
                 "' (noaux_tc routing needs it)");
  }
  if (!check_only) w.validate();
  return w;
}

}  // namespace

MoeWeights load_moe_layer(const Checkpoint& ckpt, const ModelInfo& info, int layer) {
  return read_moe_layer(ckpt, info, layer, Shard{}, false);
}

MoeWeights load_moe_layer(const Checkpoint& ckpt, const ModelInfo& info, int layer, const Shard& shard) {
  return read_moe_layer(ckpt, info, layer, shard, false);
}

void check_moe_layer(const Checkpoint& ckpt, const ModelInfo& info, int layer) {
  read_moe_layer(ckpt, info, layer, Shard{}, true);
}

MoeWeights synthetic_checkpoint_layer(const MoeConfig& cfg, const SynthCheckpointOptions& opt, int layer) {
  SyntheticOptions so;
  so.seed = opt.seed + static_cast<uint64_t>(layer);
  so.init = opt.init;
  MoeWeights w = make_synthetic_moe(cfg, so);
  for (float& v : w.router_weight) v = round_to_bf16(v);  // stored as BF16
  return w;
}

namespace {
std::string shard_file_name(int layer, int layers) {
  char shard[64];
  std::snprintf(shard, sizeof shard, "model-%05d-of-%05d.safetensors", layer + 1, layers);
  return shard;
}
}  // namespace

std::vector<std::string> synthetic_checkpoint_files(int layers) {
  std::vector<std::string> files = {"config.json", "hf_quant_config.json", "model.safetensors.index.json"};
  for (int layer = 0; layer < layers; ++layer) files.push_back(shard_file_name(layer, layers));
  return files;
}

void write_synthetic_checkpoint(const std::string& dir, const MoeConfig& cfg, const SynthCheckpointOptions& opt) {
  namespace fs = std::filesystem;
  cfg.validate();
  FP4MOE_CHECK(opt.layers >= 1, "synth: --layers must be >= 1");
  fs::create_directories(dir);
  const std::string model_type = opt.model_type.empty() ? model_type_for(cfg) : opt.model_type;
  const int n_shared = cfg.has_shared_expert() ? static_cast<int>(cfg.shared_intermediate / cfg.intermediate) : 0;
  FP4MOE_CHECK(!cfg.has_shared_expert() || cfg.shared_intermediate % cfg.intermediate == 0,
               "synth: the shared expert's width ", cfg.shared_intermediate, " is not a multiple of I = ",
               cfg.intermediate, " (config.json states it as n_shared_experts x moe_intermediate_size)");
  const json quant = {{"quant_algo", "NVFP4"}, {"group_size", 16}, {"kv_cache_quant_algo", nullptr},
                      {"exclude_modules", {"lm_head"}}};
  json config = {{"architectures", {"GlmMoeDsaForCausalLM"}},
                 {"model_type", model_type},
                 {"hidden_size", cfg.hidden},
                 {"moe_intermediate_size", cfg.intermediate},
                 {"n_routed_experts", cfg.num_experts},
                 {"num_experts_per_tok", cfg.routing.top_k},
                 {"n_shared_experts", n_shared},
                 {"scoring_func", cfg.routing.mode == RoutingMode::kSigmoidNoAuxTc ? "sigmoid" : "softmax"},
                 {"topk_method", cfg.routing.mode == RoutingMode::kSigmoidNoAuxTc ? "noaux_tc" : "greedy"},
                 {"n_group", cfg.routing.n_group},
                 {"topk_group", cfg.routing.topk_group},
                 {"norm_topk_prob", cfg.routing.norm_topk_prob},
                 {"routed_scaling_factor", cfg.routing.routed_scaling_factor},
                 {"hidden_act", "silu"},
                 {"num_hidden_layers", opt.layers},
                 {"first_k_dense_replace", 0},
                 {"torch_dtype", "bfloat16"},
                 {"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}}}};
  if (model_type == "deepseek_v3") config["architectures"] = {"DeepseekV3ForCausalLM"};
  write_text_file((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
  write_text_file((fs::path(dir) / "hf_quant_config.json").string(),
                  json{{"producer", {{"name", "modelopt"}, {"version", "fp4moe synthetic"}}}, {"quantization", quant}}
                          .dump(2) + "\n");

  json weight_map = json::object();
  for (int layer = 0; layer < opt.layers; ++layer) {
    const std::string shard = shard_file_name(layer, opt.layers);
    const std::string prefix = "model.layers." + std::to_string(layer) + ".mlp";
    const uint64_t seed = opt.seed + static_cast<uint64_t>(layer);
    // Tensors in write order: router, bias, then each expert's 12 tensors, then the shared one.
    std::vector<StTensorMeta> meta = {{prefix + ".gate.weight", StDtype::kBF16, {cfg.num_experts, cfg.hidden}}};
    if (cfg.routing.mode == RoutingMode::kSigmoidNoAuxTc)
      meta.push_back({prefix + ".gate.e_score_correction_bias", StDtype::kF32, {cfg.num_experts}});
    const size_t router_count = meta.size();
    auto expert_meta = [&](const std::string& p, int64_t inter) {
      for (auto [proj, rows, cols] : {std::tuple{"gate_proj", inter, cfg.hidden}, {"up_proj", inter, cfg.hidden},
                                      {"down_proj", cfg.hidden, inter}}) {
        const std::string q = p + "." + proj;
        meta.push_back({q + ".weight", StDtype::kU8, {rows, cols / 2}});
        meta.push_back({q + ".weight_scale", StDtype::kF8E4M3, {rows, cols / 16}});
        meta.push_back({q + ".weight_scale_2", StDtype::kF32, {}});
        meta.push_back({q + ".input_scale", StDtype::kF32, {}});
      }
    };
    for (int e = 0; e < cfg.num_experts; ++e) expert_meta(prefix + ".experts." + std::to_string(e), cfg.intermediate);
    if (cfg.has_shared_expert()) expert_meta(prefix + ".shared_experts", cfg.shared_intermediate);
    for (const auto& m : meta) weight_map[m.name] = shard;

    // Router and bias as make_synthetic_moe draws them (no expert materialised).
    SyntheticOptions so;
    so.seed = seed;
    so.materialize.assign(cfg.num_experts, false);
    MoeConfig router_only = cfg;
    router_only.shared_intermediate = 0;
    const MoeWeights router = make_synthetic_moe(router_only, so);
    ExpertWeights current;
    int current_index = -2;
    auto write = [&](size_t i, std::ostream& out) {
      auto put = [&](const void* p, size_t n) { out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n)); };
      if (i == 0) {
        for (float v : router.router_weight) {
          const uint16_t b = Bf16::from_float(v).bits;
          put(&b, 2);
        }
        return;
      }
      if (i < router_count) {
        put(router.correction_bias.data(), router.correction_bias.size() * 4);
        return;
      }
      const size_t j = i - router_count, expert = j / 12, item = j % 12;
      const int index = static_cast<int>(expert);  // == num_experts: the shared expert
      if (index != current_index) {
        current = index < cfg.num_experts
                      ? make_synthetic_expert(cfg.hidden, cfg.intermediate, seed, static_cast<uint64_t>(index), opt.init)
                      : make_synthetic_expert(cfg.hidden, cfg.shared_intermediate, seed,
                                              static_cast<uint64_t>(cfg.num_experts), opt.init);
        current_index = index;
      }
      const Nvfp4Matrix& m = item < 4 ? current.gate : item < 8 ? current.up : current.down;
      const float input_scale = item < 4 ? current.gate_input_scale : item < 8 ? current.up_input_scale
                                                                                : current.down_input_scale;
      switch (item % 4) {
        case 0: put(m.data.data(), m.data.size()); break;
        case 1: put(m.block_scales.data(), m.block_scales.size()); break;
        case 2: put(&m.global_scale, 4); break;
        default: put(&input_scale, 4); break;
      }
    };
    write_safetensors_streamed((fs::path(dir) / shard).string(), meta, write,
                               {{"format", "pt"}, {"producer", "fp4moe synth"}});
  }
  write_text_file((fs::path(dir) / "model.safetensors.index.json").string(),
                  json{{"metadata", {{"producer", "fp4moe synth"}}}, {"weight_map", weight_map}}.dump(1) + "\n");
}

}  // namespace fp4moe
