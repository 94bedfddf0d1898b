// fp4moe inspect: the tensors of a safetensors file or checkpoint directory, validated.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/printable.h"
#include "cli/validators.h"
#include "fp4moe/error.h"
#include "io/checkpoint.h"
#include "io/modelopt.h"
#include "io/safetensors.h"
#include "io/text_file.h"

namespace fp4moe::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
};

// FNV-1a 64 of a tensor's bytes: lets another tool check it read the same data.
uint64_t fnv1a(std::span<const uint8_t> b) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t c : b) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

void run_inspect(const InspectArgs& a) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  auto add = [&](const StTensorView& v) {
    if (a.json) {
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(v.bytes)));
      out.push_back({{"name", v.name}, {"dtype", to_string(v.dtype)}, {"shape", v.shape}, {"bytes", v.bytes.size()},
                     {"fnv1a64", hex}});
    } else {
      std::string shape;
      for (size_t i = 0; i < v.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(v.shape[i]);
      std::printf("%-64s %-8s [%s] %zu B\n", printable(v.name).c_str(), to_string(v.dtype), shape.c_str(), v.bytes.size());
    }
  };
  if (path_kind(a.path) == PathKind::kDirectory) {
    const Checkpoint c = Checkpoint::open(a.path);
    std::optional<ModelInfo> info;
    try {
      info = read_model_info(c);
      if (!a.json)
        std::printf("%s: %s, %s, %d layers (MoE from %d): H %lld, I %lld, E %d, top-%d\n", a.path.c_str(),
                    printable(info->model_type).c_str(), printable(info->quant_algo).c_str(), info->num_layers,
                    info->first_moe_layer, static_cast<long long>(info->moe.hidden),
                    static_cast<long long>(info->moe.intermediate), info->moe.num_experts,
                    info->moe.routing.top_k);
    } catch (const Error& e) {
      if (!a.json)
        std::printf("%s: not a ModelOpt NVFP4 MoE checkpoint (%s)\n", a.path.c_str(), printable(e.what()).c_str());
    }
    for (const std::string& n : c.tensor_names()) add(c.tensor(n));
    // A ModelOpt checkpoint passes only where every MoE layer has each tensor the loader reads
    // there, with its dtype and shape, and finite router, bias and global scales (no weight read;
    // the first missing or wrong one is the error, exit 1). Block scales' values are checked as
    // a layer loads.
    if (info) {
      for (int layer = info->first_moe_layer; layer < info->num_layers; ++layer) check_moe_layer(c, *info, layer);
      if (!a.json && info->first_moe_layer < info->num_layers)
        std::printf("MoE layers %d-%d: every tensor the loader reads is there, with its dtype and shape (block "
                    "scales' values are checked at load)\n",
                    info->first_moe_layer, info->num_layers - 1);
    }
  } else {
    const SafetensorsFile f = SafetensorsFile::open(a.path);
    for (const std::string& n : f.names()) add(f.tensor(n));
  }
  if (a.json) std::printf("%s\n", out.dump(1).c_str());
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "List (and validate) the tensors of a safetensors file or checkpoint");
  cmd->add_option("path", a->path, "FILE.safetensors or a checkpoint directory")->required()->check(NonEmptyPath);
  cmd->add_flag("--json", a->json, "JSON with a FNV-1a 64 checksum of every tensor's bytes");
  cmd->callback([a] { run_inspect(*a); });
}

}  // namespace fp4moe::cli
