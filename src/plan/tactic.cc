// Tactic text form: format and parse (see include/fp4moe/tactic.h).
#include "fp4moe/tactic.h"

#include <charconv>
#include <sstream>
#include <vector>

#include "fp4moe/error.h"

namespace fp4moe {
namespace {

struct FamilyName { Family f; const char* name; };
constexpr FamilyName kFamilies[] = {{Family::kW4a16Mma, "w4a16_mma"},
                                    {Family::kW4a16Wgmma, "w4a16_wgmma"},
                                    {Family::kCutlassSm120, "cutlass_sm120"},
                                    {Family::kCutlassSm100, "cutlass_sm100"},
                                    {Family::kW4a16Gemv, "w4a16_gemv"},
                                    {Family::kW4a16Fused, "w4a16_fused"}};
struct EpilogueName { Epilogue e; const char* name; };
constexpr EpilogueName kEpilogues[] = {
    {Epilogue::kNone, "none"}, {Epilogue::kSwiglu, "swiglu"}, {Epilogue::kFinalize, "finalize"}};

// Parses an int that must fill `s` exactly.
int parse_int(const std::string& s, const std::string& text, const char* field) {
  int v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  FP4MOE_CHECK(ec == std::errc() && ptr == s.data() + s.size() && !s.empty(), "tactic '", text,
               "': ", field, " '", s, "' is not a number");
  return v;
}

}  // namespace

const char* to_string(Family f) {
  for (const auto& n : kFamilies)
    if (n.f == f) return n.name;
  return "?";
}

const char* to_string(Epilogue e) {
  for (const auto& n : kEpilogues)
    if (n.e == e) return n.name;
  return "?";
}

std::string format_tactic(const Tactic& t) {
  std::ostringstream os;
  os << to_string(t.family) << ":m" << t.tile_rows << "n" << t.tile_tokens << "k" << t.tile_k
     << ":s";
  if (t.stages == 0) os << "auto"; else os << t.stages;
  os << ":w" << t.warps << ":sk" << t.split_k << ":" << to_string(t.epilogue);
  if (t.swap_ab) os << ":swapab";
  return os.str();
}

std::string tactic_range_error(const Tactic& t) {
  if (static_cast<int>(t.family) < 0 || static_cast<int>(t.family) > static_cast<int>(Family::kW4a16Fused))
    return "unknown family";
  // (an epilogue past the three would also spill into split-K's bits where it is packed)
  if (static_cast<int>(t.epilogue) < 0 || static_cast<int>(t.epilogue) > static_cast<int>(Epilogue::kFinalize))
    return "unknown epilogue";
  if (!(t.tile_rows > 0 && t.tile_tokens > 0 && t.tile_k > 0 && t.stages >= 0 && t.warps >= 0 && t.split_k > 0))
    return "sizes must be positive";
  // The ranges encode_tactic packs (so that decode_tactic(encode_tactic(t)) == t), K in whole
  // 16-element blocks, and a warp count for our own families (w0 means "the family's own" only
  // in the CUTLASS profiles).
  if (!(t.tile_rows < 4096 && t.tile_tokens < 1024 && t.tile_k < 16384 && t.stages < 64 && t.warps < 64 &&
        t.split_k < 256))
    return "a field exceeds its range (rows < 4096, tokens < 1024, K < 16384, stages and warps < 64, split-K < 256)";
  if (t.tile_k % 16 != 0) return "K " + std::to_string(t.tile_k) + " is not a multiple of the block size 16";
  const bool cutlass = t.family == Family::kCutlassSm120 || t.family == Family::kCutlassSm100;
  if (!cutlass && t.warps == 0)
    return std::string(to_string(t.family)) + " needs a warp count (w0 is only for the CUTLASS profiles)";
  return {};
}

Tactic parse_tactic(const std::string& text) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : text) {
    if (c == ':') { parts.push_back(cur); cur.clear(); } else { cur += c; }
  }
  parts.push_back(cur);
  FP4MOE_CHECK(parts.size() == 6 || parts.size() == 7, "tactic '", text,
               "': expected family:mRnTkK:sS:wW:skN:epilogue[:swapab]");
  Tactic t;
  bool found = false;
  for (const auto& n : kFamilies)
    if (parts[0] == n.name) { t.family = n.f; found = true; }
  FP4MOE_CHECK(found, "tactic '", text, "': unknown family '", parts[0], "'");
  const std::string& tile = parts[1];
  const size_t n = tile.find('n'), k = tile.find('k');
  FP4MOE_CHECK(tile.size() > 1 && tile[0] == 'm' && n != std::string::npos &&
                   k != std::string::npos && n < k,
               "tactic '", text, "': tile '", tile, "' is not mRnTkK");
  t.tile_rows = parse_int(tile.substr(1, n - 1), text, "tile rows");
  t.tile_tokens = parse_int(tile.substr(n + 1, k - n - 1), text, "tile tokens");
  t.tile_k = parse_int(tile.substr(k + 1), text, "tile K");
  FP4MOE_CHECK(parts[2].size() > 1 && parts[2][0] == 's', "tactic '", text, "': stages '",
               parts[2], "' is not sN or sauto");
  t.stages = parts[2] == "sauto" ? 0 : parse_int(parts[2].substr(1), text, "stages");
  FP4MOE_CHECK(parts[3].size() > 1 && parts[3][0] == 'w', "tactic '", text, "': warps '",
               parts[3], "' is not wN");
  t.warps = parse_int(parts[3].substr(1), text, "warps");
  FP4MOE_CHECK(parts[4].size() > 2 && parts[4].rfind("sk", 0) == 0, "tactic '", text,
               "': split-K '", parts[4], "' is not skN");
  t.split_k = parse_int(parts[4].substr(2), text, "split-K");
  found = false;
  for (const auto& e : kEpilogues)
    if (parts[5] == e.name) { t.epilogue = e.e; found = true; }
  FP4MOE_CHECK(found, "tactic '", text, "': unknown epilogue '", parts[5],
               "' (none, swiglu, finalize)");
  if (parts.size() == 7) {
    FP4MOE_CHECK(parts[6] == "swapab", "tactic '", text, "': unknown suffix '", parts[6], "'");
    t.swap_ab = true;
  }
  const std::string range_error = tactic_range_error(t);
  FP4MOE_CHECK(range_error.empty(), "tactic '", text, "': ", range_error);
  return t;
}

}  // namespace fp4moe
