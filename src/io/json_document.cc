#include "io/json_document.h"

#include <string>
#include <unordered_set>
#include <vector>

#include "fp4moe/error.h"

namespace fp4moe {
namespace {

using json = nlohmann::json;

// The checks as a SAX pass over the text, before the document is built. (nlohmann's parser
// callback saw each key too, but on the end of every object its DOM parser walks the parent
// object whole, so a header of N tensor entries took N^2: 80,000 entries, two minutes.) Each
// method throws the first fault; a false return would make sax_parse stop without saying why.
class StrictKeysAndDepth final : public nlohmann::json_sax<json> {
 public:
  explicit StrictKeysAndDepth(const std::string& label) : label_(label) {}

  bool start_object(std::size_t) override {
    enter();
    open_objects_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    FP4MOE_CHECK(open_objects_.back().insert(k).second, label_, ": key '", k, "' given twice in one object");
    return true;
  }
  bool end_object() override {
    open_objects_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    enter();
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    FP4MOE_FAIL(label_, ": not valid JSON (", e.what(), ")");
  }

 private:
  void enter() {
    // (depth_ counts the containers open around this one: the top level is 0, as the callback's was)
    FP4MOE_CHECK(depth_ < kMaxJsonDepth, label_, ": nested deeper than ", kMaxJsonDepth, " levels");
    ++depth_;
  }

  const std::string& label_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> open_objects_;  // innermost last
};

}  // namespace

nlohmann::json parse_json_document(std::string_view text, const std::string& label) {
  // nlohmann's lexer reads a NUL as the end of the input: whatever followed it (up to the
  // header's 100 MB) would be accepted unread.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    FP4MOE_FAIL(label, ": not valid JSON (a NUL byte at offset ", nul, ")");
  StrictKeysAndDepth checks(label);
  json::sax_parse(text.begin(), text.end(), &checks);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    FP4MOE_FAIL(label, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace fp4moe
