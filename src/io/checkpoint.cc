#include "io/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fp4moe/error.h"
#include "io/json_document.h"
#include "io/text_file.h"

namespace fp4moe {

std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& label) {
  nlohmann::json j = parse_json_document(text, label);
  FP4MOE_CHECK(j.is_object(), label, ": not a JSON object");
  FP4MOE_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), label,
               ": missing object 'weight_map'");
  std::map<std::string, std::string> m;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    FP4MOE_CHECK(it->is_string(), label, ": weight_map entry '", it.key(), "' is not a file name");
    const std::string f = it->get<std::string>();
    FP4MOE_CHECK(!f.empty() && f.find('/') == std::string::npos && f.find('\\') == std::string::npos &&
                     f != "." && f != "..",
                 label, ": weight_map entry '", it.key(), "' names '", f,
                 "', not a plain file name in the checkpoint directory");
    m.emplace(it.key(), f);
  }
  FP4MOE_CHECK(!m.empty(), label, ": weight_map is empty");
  return m;
}

Checkpoint Checkpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  const PathKind kind = path_kind(dir);
  FP4MOE_CHECK(kind == PathKind::kDirectory, dir, kind == PathKind::kMissing ? ": does not exist" : ": not a directory",
               " (a checkpoint is a directory)");
  Checkpoint c;
  c.dir_ = dir;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (const std::optional<std::string> text = read_text_file(index.string())) {
    c.shard_of_ = parse_safetensors_index(*text, index.string());
    for (const auto& [t, shard] : c.shard_of_) {
      const std::string where = index.string() + ": tensor '" + t + "' is in shard '" + shard + "'";
      PathKind kind = PathKind::kMissing;
      try {
        kind = path_kind((fs::path(dir) / shard).string());
      } catch (const Error& e) {
        FP4MOE_FAIL(where, ": ", e.what());
      }
      FP4MOE_CHECK(kind != PathKind::kMissing, where, ", which does not exist");
    }
  } else {
    const fs::path single = fs::path(dir) / "model.safetensors";
    FP4MOE_CHECK(path_kind(single.string()) != PathKind::kMissing, dir, ": no model.safetensors.index.json and no model.safetensors");
    auto file = std::make_unique<SafetensorsFile>(SafetensorsFile::open(single.string()));
    for (const std::string& n : file->names()) c.shard_of_.emplace(n, "model.safetensors");
    c.shards_.emplace("model.safetensors", std::move(file));
  }
  return c;
}

const StTensorView& Checkpoint::tensor(const std::string& name) const {
  auto it = shard_of_.find(name);
  FP4MOE_CHECK(it != shard_of_.end(), dir_, ": checkpoint has no tensor '", name, "'");
  const std::lock_guard<std::mutex> lock(*shards_mutex_);
  auto s = shards_.find(it->second);
  if (s == shards_.end()) {
    const std::string path = (std::filesystem::path(dir_) / it->second).string();
    s = shards_.emplace(it->second, std::make_unique<SafetensorsFile>(SafetensorsFile::open(path))).first;
  }
  FP4MOE_CHECK(s->second->contains(name), s->second->path(), ": the index places tensor '", name,
               "' in this shard, but it is not there");
  return s->second->tensor(name);
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> v;
  for (const auto& [t, s] : shard_of_) v.push_back(t);
  return v;
}

std::optional<std::string> Checkpoint::read_text(const std::string& name) const {
  return read_text_file((std::filesystem::path(dir_) / name).string());
}

}  // namespace fp4moe
