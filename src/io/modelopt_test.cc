// ModelOpt import: a synthetic GLM-5-layout checkpoint loads back to exactly the weights it was
// written from (every matrix and input scale, the shared expert's too), and the loaded layer
// computes exactly what the direct computation does (a checkpoint written by Python, against a
// NumPy layer: tests/checkpoint_layer_test.py);
// missing, mistyped or misshapen tensors and non-NVFP4 configs are clear errors.
#include "io/modelopt.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "fp4moe/error.h"
#include "support/oracle.h"

namespace fp4moe {
namespace {

namespace fs = std::filesystem;

MoeConfig small_glm5() {
  MoeConfig c = MoeConfig::glm5();
  c.name = "glm5-small";
  c.hidden = 256;
  c.intermediate = 128;
  c.shared_intermediate = 128;
  c.num_experts = 12;
  c.routing.top_k = 4;
  return c;
}

struct Written {
  std::string dir;
  MoeConfig cfg;
  SynthCheckpointOptions opt;
};

Written write_small(const std::string& name) {
  Written w;
  w.dir = (test::temp_dir() / name).string();
  fs::remove_all(w.dir);
  w.cfg = small_glm5();
  w.opt.layers = 2;
  w.opt.seed = 42;
  w.opt.init = WeightInit::kQuantizedGaussian;
  write_synthetic_checkpoint(w.dir, w.cfg, w.opt);
  return w;
}

void expect_same_matrix(const Nvfp4Matrix& a, const Nvfp4Matrix& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.block_scales, b.block_scales);
  EXPECT_EQ(a.global_scale, b.global_scale);
}

void expect_same_expert(const ExpertWeights& a, const ExpertWeights& b) {
  expect_same_matrix(a.gate, b.gate);
  expect_same_matrix(a.up, b.up);
  expect_same_matrix(a.down, b.down);
  EXPECT_EQ(a.gate_input_scale, b.gate_input_scale);
  EXPECT_EQ(a.up_input_scale, b.up_input_scale);
  EXPECT_EQ(a.down_input_scale, b.down_input_scale);
}

TEST(ModelOpt, SyntheticCheckpointLoadsBackExactly) {
  const Written w = write_small("ckpt_roundtrip");
  const Checkpoint c = Checkpoint::open(w.dir);
  const ModelInfo info = read_model_info(c);
  EXPECT_EQ(info.model_type, "glm_moe_dsa");
  EXPECT_EQ(info.quant_algo, "NVFP4");
  EXPECT_EQ(info.num_layers, 2);
  EXPECT_EQ(info.moe.hidden, 256);
  EXPECT_EQ(info.moe.num_experts, 12);
  EXPECT_EQ(info.moe.routing.mode, RoutingMode::kSigmoidNoAuxTc);
  EXPECT_FLOAT_EQ(info.moe.routing.routed_scaling_factor, 2.5f);
  EXPECT_EQ(info.moe.shared_intermediate, 128);
  for (int layer : {0, 1}) {
    const MoeWeights loaded = load_moe_layer(c, info, layer);
    const MoeWeights direct = synthetic_checkpoint_layer(w.cfg, w.opt, layer);
    for (int e = 0; e < 12; ++e) expect_same_expert(loaded.experts[e], direct.experts[e]);
    ASSERT_TRUE(loaded.shared.has_value());
    expect_same_expert(*loaded.shared, *direct.shared);
    EXPECT_EQ(loaded.router_weight, direct.router_weight);
    EXPECT_EQ(loaded.correction_bias, direct.correction_bias);
    // The whole layer computes the same, bit for bit.
    const std::vector<float> x = make_hidden_states(5, 256, 9);
    const std::vector<float> l1 = router_logits_reference(x, 5, loaded), l2 = router_logits_reference(x, 5, direct);
    ASSERT_EQ(l1, l2);
    const Routing r = route_reference(info.moe.routing, l1, 5, 12, loaded.correction_bias);
    EXPECT_EQ(moe_reference(loaded, x, 5, r), moe_reference(direct, x, 5, r));
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelOpt, ShardedLoadReadsEachRanksSliceExactly) {
  const Written w = write_small("ckpt_sharded");
  const Checkpoint c = Checkpoint::open(w.dir);
  const ModelInfo info = read_model_info(c);
  const MoeWeights whole = load_moe_layer(c, info, 1);
  for (const Shard s : {Shard{ShardMode::kTensor, 1, 2}, Shard{ShardMode::kExpert, 2, 3}}) {
    const MoeWeights loaded = load_moe_layer(c, info, 1, s);
    const MoeWeights sliced = shard_weights(whole, s);
    EXPECT_EQ(loaded.config.intermediate, sliced.config.intermediate);
    EXPECT_EQ(loaded.config.shared_intermediate, sliced.config.shared_intermediate);
    for (int e = 0; e < info.moe.num_experts; ++e) {
      ASSERT_EQ(loaded.experts[e].materialized(), sliced.experts[e].materialized()) << to_string(s.mode) << " " << e;
      if (!sliced.experts[e].materialized()) continue;
      expect_same_matrix(loaded.experts[e].gate, sliced.experts[e].gate);
      expect_same_matrix(loaded.experts[e].up, sliced.experts[e].up);
      expect_same_matrix(loaded.experts[e].down, sliced.experts[e].down);
    }
    ASSERT_TRUE(loaded.shared.has_value());
    expect_same_matrix(loaded.shared->down, sliced.shared->down);
    EXPECT_EQ(loaded.router_weight, whole.router_weight);
  }
  const std::string why = error_of([&] { load_moe_layer(c, info, 1, Shard{ShardMode::kExpert, 0, 5}); });
  EXPECT_NE(why.find("do not split evenly"), std::string::npos) << why;
}

TEST(ModelOpt, BadCheckpointsAreClearErrors) {
  const Written w = write_small("ckpt_errors");
  const Checkpoint c = Checkpoint::open(w.dir);
  const ModelInfo info = read_model_info(c);
  ModelInfo dense = info;
  dense.first_moe_layer = 1;
  EXPECT_NE(error_of([&] { load_moe_layer(c, dense, 0); }).find("layer 0 is dense"), std::string::npos);
  EXPECT_NE(error_of([&] { load_moe_layer(c, info, 2); }).find("out of range"), std::string::npos);
  ModelInfo excluded = info;
  excluded.exclude_modules = {"model.layers.1.mlp*"};
  EXPECT_NE(error_of([&] { load_moe_layer(c, excluded, 1); }).find("excluded from quantization"), std::string::npos);
  ModelInfo wider = info;
  wider.moe.hidden = 512;  // every shape is now wrong: the first checked tensor, the router, is named
  const std::string shape = error_of([&] { load_moe_layer(c, wider, 0); });
  EXPECT_NE(shape.find("model.layers.0.mlp.gate.weight' has shape [12, 256], expected [12, 512]"),
            std::string::npos) << shape;
  // More experts than the checkpoint holds: the router's shape says so before any expert slot
  // is made (a config claiming 2^31 experts must not allocate them first).
  ModelInfo more = info;
  more.moe.num_experts = 13;
  const std::string experts = error_of([&] { load_moe_layer(c, more, 0); });
  EXPECT_NE(experts.find("model.layers.0.mlp.gate.weight' has shape [12, 256], expected [13, 256]"),
            std::string::npos) << experts;
  // A non-NVFP4 quantization and a missing config are reported with the file's name.
  std::ofstream(fs::path(w.dir) / "hf_quant_config.json")
      << R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}})";
  EXPECT_NE(error_of([&] { read_model_info(Checkpoint::open(w.dir)); }).find("quant_algo 'FP8' is not supported"),
            std::string::npos);
  // 200,000 nested arrays in the quantization object (400 KB): copying the object recursed once
  // per level and overflowed the stack; refused as the parser reads it.
  std::ofstream(fs::path(w.dir) / "hf_quant_config.json")
      << R"({"quantization": {"quant_algo": "NVFP4", "x": )" << std::string(200000, '[') << std::string(200000, ']') << "}}";
  const std::string deep = error_of([&] { read_model_info(Checkpoint::open(w.dir)); });
  EXPECT_NE(deep.find("hf_quant_config.json: nested deeper than 64 levels"), std::string::npos) << deep;
  // config.json's integers are taken whole or refused (16.9 is not 16, 2^32 + 16 is not 16).
  const std::string config_text = [&] {
    std::ifstream f(fs::path(w.dir) / "config.json");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  for (const auto& [from, to, error] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"n_routed_experts\": 12", "\"n_routed_experts\": 12.9", "field 'n_routed_experts' is not an integer"},
           {"\"n_routed_experts\": 12", "\"n_routed_experts\": 4294967308", "'n_routed_experts' = 4294967308 is out of range"},
           {"\"hidden_size\": 256", "\"hidden_size\": 1180591620717411303424", "field 'hidden_size' is not an integer"},
           {"\"norm_topk_prob\": true", "\"norm_topk_prob\": 1", "field 'norm_topk_prob' is not true or false"},
           // a field given twice: nlohmann kept the last without a word
           {"\"hidden_size\": 256", "\"hidden_size\": 256, \"hidden_size\": 512", "key 'hidden_size' given twice in one object"},
           // softmax's top-k method is greedy; noaux_tc (or DeepSeek-V2's group_limited_greedy) with it is refused
           {"\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"",
            "topk_method 'noaux_tc' with softmax scoring is not supported (greedy is)"}}) {
    const size_t at = config_text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    std::string bad = config_text;
    bad.replace(at, from.size(), to);
    std::ofstream(fs::path(w.dir) / "config.json") << bad;
    const std::string got = error_of([&] { read_model_info(Checkpoint::open(w.dir)); });
    EXPECT_NE(got.find(error), std::string::npos) << got;
  }
  // No scoring_func (GLM-4.5/GLM-5 configs carry none: their code hard-codes sigmoid with
  // noaux_tc): the model type decides, never softmax by default for a model that is sigmoid's.
  std::ofstream(fs::path(w.dir) / "hf_quant_config.json")
      << R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}})";
  for (const auto& [model_type, keep_topk_method, mode] :
       std::vector<std::tuple<std::string, bool, RoutingMode>>{{"glm_moe_dsa", false, RoutingMode::kSigmoidNoAuxTc},
                                                               {"deepseek_v3", false, RoutingMode::kSigmoidNoAuxTc},
                                                               {"mixtral", true, RoutingMode::kSigmoidNoAuxTc},
                                                               {"mixtral", false, RoutingMode::kSoftmaxTopK}}) {
    nlohmann::json j = nlohmann::json::parse(config_text);
    j.erase("scoring_func");
    if (!keep_topk_method) j.erase("topk_method");
    j["model_type"] = model_type;
    std::ofstream(fs::path(w.dir) / "config.json") << j.dump();
    EXPECT_EQ(read_model_info(Checkpoint::open(w.dir)).moe.routing.mode, mode)
        << model_type << (keep_topk_method ? " with topk_method noaux_tc" : "");
  }
  std::ofstream(fs::path(w.dir) / "config.json").flush();  // empty, not missing
  EXPECT_NE(error_of([&] { read_model_info(Checkpoint::open(w.dir)); }).find("config.json: empty"), std::string::npos);
  fs::remove(fs::path(w.dir) / "config.json");
  fs::create_directory(fs::path(w.dir) / "config.json");
  EXPECT_NE(error_of([&] { read_model_info(Checkpoint::open(w.dir)); }).find("config.json: not a regular file"),
            std::string::npos);
  fs::remove(fs::path(w.dir) / "config.json");
  EXPECT_NE(error_of([&] { read_model_info(Checkpoint::open(w.dir)); }).find("config.json: missing"), std::string::npos);
  EXPECT_NE(error_of([&] { Checkpoint::open(w.dir + "/nope"); }).find("does not exist"), std::string::npos);
  fs::remove_all(w.dir);
}

// A shard name the system refuses to look up (longer than a file name may be) is an Error naming
// the index and the tensor; std::filesystem's query threw its own exception, which named neither.
TEST(ModelOpt, AShardNameTheSystemRefusesIsAClearError) {
  const fs::path dir = test::temp_dir() / "ckpt_long_shard";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"model.embed_tokens.weight": ")" << std::string(300, 'x') << R"("}})";
  const std::string got = error_of([&] { Checkpoint::open(dir.string()); });
  EXPECT_NE(got.find("model.safetensors.index.json"), std::string::npos) << got;
  EXPECT_NE(got.find("cannot stat (File name too long)"), std::string::npos) << got;
  fs::remove_all(dir);
}

TEST(ModelOpt, GlobMatchesExcludeModulePatterns) {
  EXPECT_TRUE(glob_match("lm_head", "lm_head"));
  EXPECT_TRUE(glob_match("model.layers.*.mlp.gate", "model.layers.3.mlp.gate"));
  EXPECT_TRUE(glob_match("*experts*", "model.layers.3.mlp.experts.0.gate_proj"));
  EXPECT_FALSE(glob_match("model.layers.1.*", "model.layers.11.mlp"));
  EXPECT_TRUE(glob_match("model.layers.1?.*", "model.layers.11.mlp"));
}

}  // namespace
}  // namespace fp4moe
