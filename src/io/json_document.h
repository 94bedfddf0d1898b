// parse_json_document: every JSON file fp4moe reads (safetensors headers, the checkpoint's index,
// config.json and hf_quant_config.json, the tuning cache), parsed strictly.
//
// nlohmann::json takes two things these files must not carry:
// - A key given twice in one object: it keeps the last, so a tensor named twice in a safetensors
//   header, or a config field set twice, reads as one of them without a word (the .npy reader and
//   the safetensors writer refuse a repeated key, as this does).
// - Nesting without bound: it parses and destroys deep documents without recursion, but copying
//   one recurses once per level, and a config of 200,000 nested arrays (400 KB) overflowed the
//   stack where its "quantization" object was copied. None of these files nests past a few
//   levels; kMaxJsonDepth leaves room for any of them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fp4moe {

inline constexpr int kMaxJsonDepth = 64;

// The document, or fp4moe::Error "<label>: not valid JSON (...)", "<label>: key 'k' given twice in
// one object" or "<label>: nested deeper than 64 levels".
nlohmann::json parse_json_document(std::string_view text, const std::string& label);

}  // namespace fp4moe
