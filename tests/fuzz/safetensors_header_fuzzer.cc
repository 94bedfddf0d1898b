// libFuzzer target: the safetensors header parser on arbitrary bytes. Every input must either
// parse or throw fp4moe::Error - never crash, hang or read out of bounds (ASan/UBSan).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fp4moe/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fp4moe::SafetensorsFile f =
        fp4moe::SafetensorsFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz");
    for (const auto& n : f.names()) {
      const auto& t = f.tensor(n);
      volatile uint8_t sink = 0;
      for (uint8_t b : t.bytes) sink = sink ^ b;  // every view must lie inside the image
    }
  } catch (const fp4moe::Error&) {
  }
  return 0;
}
