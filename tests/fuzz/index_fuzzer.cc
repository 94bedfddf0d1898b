// libFuzzer target: the model.safetensors.index.json parser on arbitrary text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fp4moe/error.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    fp4moe::parse_safetensors_index(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const fp4moe::Error&) {
  }
  return 0;
}
