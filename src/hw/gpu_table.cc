// The known-GPU table (datasheet figures, dense tensor peaks).
#include <algorithm>
#include <cctype>
#include <charconv>

#include "fp4moe/error.h"
#include "fp4moe/hw.h"

namespace fp4moe {
namespace {

GpuSpec entry(std::string name, std::string key, int sm, int sms, int64_t smem_block,
              int64_t smem_sm, int64_t l2, double bw_gbs, double bf16, double fp8, double fp4,
              int max_threads_per_sm) {
  GpuSpec g;
  g.name = std::move(name);
  g.key = std::move(key);
  g.sm = sm;
  g.sm_count = sms;
  g.smem_per_block_optin = smem_block;
  g.smem_per_sm = smem_sm;
  g.l2_bytes = l2;
  g.mem_bandwidth_gbs = bw_gbs;
  g.bf16_tflops = bf16;
  g.fp8_tflops = fp8;
  g.fp4_tflops = fp4;
  g.max_threads_per_sm = max_threads_per_sm;
  return g;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const std::vector<GpuSpec>& known_gpus() {
  constexpr int64_t MB = 1024 * 1024;
  // A100: 163 KB per block, 164 KB per SM. Hopper and B200: 227 KB per block, 228 KB per SM.
  // sm_120/121: 99 KB per block, 100 KB per SM, 1536 threads per SM. L2 sizes are the vendors'
  // figures (the H200's as measured here).
  static const std::vector<GpuSpec> table = {
      entry("NVIDIA A100 SXM 80GB", "a100", 80, 108, 166912, 167936, 40 * MB, 2039, 312, 0, 0, 2048),
      entry("NVIDIA H100 SXM", "h100", 90, 132, 232448, 233472, 50 * MB, 3350, 989, 1979, 0, 2048),
      entry("NVIDIA H200 SXM", "h200", 90, 132, 232448, 233472, 60 * MB, 4800, 989, 1979, 0, 2048),
      entry("NVIDIA B200", "b200", 100, 148, 232448, 233472, 126 * MB, 8000, 2250, 4500, 9000,
            2048),
      entry("NVIDIA RTX PRO 6000 Blackwell", "rtx-pro-6000", 120, 188, 101376, 102400, 128 * MB,
            1790, 504, 1010, 2020, 1536),
      entry("NVIDIA GeForce RTX 5090", "rtx-5090", 120, 170, 101376, 102400, 96 * MB, 1790, 0, 0,
            1676, 1536),
      entry("NVIDIA DGX Spark GB10", "gb10", 121, 48, 101376, 102400, 24 * MB, 270, 0, 0, 500,
            1536),
  };
  return table;
}

std::optional<GpuSpec> find_known_gpu(const std::string& name) {
  const std::string n = lower(name);
  for (const GpuSpec& g : known_gpus()) {
    if (lower(g.key) == n || lower(g.name) == n) return g;
  }
  // Friendly aliases: "rtx5090", "rtxpro6000", "h200sxm".
  std::string squeezed;
  for (char c : n)
    if (std::isalnum(static_cast<unsigned char>(c))) squeezed += c;
  for (const GpuSpec& g : known_gpus()) {
    std::string k;
    for (char c : lower(g.key))
      if (std::isalnum(static_cast<unsigned char>(c))) k += c;
    if (k == squeezed) return g;
  }
  return std::nullopt;
}

GpuSpec resolve_gpu(const std::string& name) {
  if (name.rfind("current", 0) == 0) {
    int index = 0;
    if (name.size() > 7) {
      FP4MOE_CHECK(name[7] == ':' && name.size() > 8, "--gpu '", name,
                   "': expected 'current' or 'current:N'");
      // The whole rest, in decimal: stoi took "1abc" as 1 and " 1" too.
      const char* first = name.data() + 8;
      const char* last = name.data() + name.size();
      const auto [ptr, ec] = std::from_chars(first, last, index);
      FP4MOE_CHECK(ec != std::errc::result_out_of_range, "--gpu '", name, "': device index out of range");
      FP4MOE_CHECK(ec == std::errc() && ptr == last, "--gpu '", name, "': device index is not a number");
      FP4MOE_CHECK(index >= 0, "--gpu '", name, "': a device index is 0 or more");
    }
    const CudaEnvironment env = query_cuda_environment();
    FP4MOE_CHECK(!env.devices.empty(), "--gpu current: no GPU is usable here (", env.error, ")");
    FP4MOE_CHECK(index >= 0 && index < static_cast<int>(env.devices.size()), "--gpu ", name,
                 ": device index out of range (", env.devices.size(), " GPUs found)");
    return env.devices[index];
  }
  if (auto g = find_known_gpu(name)) return *g;
  std::string keys;
  for (const GpuSpec& g : known_gpus()) keys += (keys.empty() ? "" : ", ") + g.key;
  FP4MOE_FAIL("unknown GPU '", name, "' (known: ", keys, ", current)");
}

}  // namespace fp4moe
