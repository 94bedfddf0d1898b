#include "io/json_document.h"

#include <set>
#include <vector>

#include "fp4moe/error.h"

namespace fp4moe {

nlohmann::json parse_json_document(std::string_view text, const std::string& label) {
  using json = nlohmann::json;
  // The keys seen so far in each object still open, innermost last. The parser's callback sees
  // every key as it is read (before its value), so a repeat is caught where it stands.
  std::vector<std::set<std::string>> open_objects;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        FP4MOE_CHECK(depth < kMaxJsonDepth, label, ": nested deeper than ", kMaxJsonDepth, " levels");
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::key:
        FP4MOE_CHECK(open_objects.back().insert(parsed.get<std::string>()).second, label, ": key '",
                     parsed.get<std::string>(), "' given twice in one object");
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    FP4MOE_FAIL(label, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace fp4moe
