// libFuzzer target: the tuning cache's reader on arbitrary text. Its contract is stronger than
// the other parsers': a bad file is reported and ignored, never an error, so any exception that
// leaves from_text is a finding (libFuzzer reports it as a crash).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/tuning_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> warnings;
  const fp4moe::TuningCache c =
      fp4moe::TuningCache::from_text(std::string(reinterpret_cast<const char*>(data), size), "fuzz", &warnings);
  // Whatever was read is usable: every entry's tactics print, and lookups run.
  for (const auto& e : c.entries()) {
    (void)fp4moe::format_tactic(e.winner);
    (void)c.lookup(e.id, e.gemm, e.bucket);
  }
  return 0;
}
