// fp4moe/resource_model.h - what a tactic asks of a GPU, in bytes, and whether it fits.
//
// Two profiles:
//   (a) our own families (w4a16_mma, w4a16_wgmma, w4a16_gemv, w4a16_fused): the exact dynamic shared memory the
//       kernel requests
//       (a GPU test checks the model against the compiled kernels);
//   (b) CUTLASS's block-scaled grouped GEMM as the TensorRT-LLM / FlashInfer fused-MoE path
//       instantiates it on sm_120 and sm_100 (families cutlass_sm120 / cutlass_sm100): the
//       builders' stage rule ("auto carve-out") and the real SharedStorage layout, derived
//       from CUTLASS's source (src/plan/cutlass_profile.cc cites the files) and cross-checked
//       against sizeof() of the real types (tests/cutlass_crosscheck).
// Each report carries the arithmetic line by line, so `fp4moe tactics` can say *why*.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp4moe/hw.h"
#include "fp4moe/tactic.h"

namespace fp4moe {

// Operand element type of the GEMM (A and B alike for the CUTLASS profile; the weights for
// w4a16_mma, whose tokens are always bf16).
enum class DataType { kNvfp4, kMxfp4, kBf16 };
const char* to_string(DataType d);
DataType parse_data_type(const std::string& s);  // "nvfp4", "mxfp4", "bf16"; throws otherwise

struct SmemItem {
  std::string what;   // "A tile: 128 x 128 x 1/2 B"
  int64_t bytes = 0;  // per stage for stage items, else absolute
};

struct ResourceReport {
  Tactic tactic;
  DataType dtype = DataType::kNvfp4;
  std::string gpu;
  int sm = 0;
  bool supported = true;      // false: the family cannot run this dtype / architecture
  int64_t stage_bytes = 0;    // shared memory of one pipeline stage (as the kernel lays it out)
  int64_t builder_stage_bytes = 0;  // what the stage rule charges per stage (CUTLASS: +128 B)
  int stages = 0;
  bool stages_auto = false;   // chosen by the carve-out rule
  int64_t mainloop_bytes = 0; // all stages with their alignment
  int64_t epilogue_bytes = 0; // the epilogue's shared storage
  int64_t kernel_bytes = 0;   // kernel-level: scheduler state, barriers, tensor maps, padding
  int64_t total_bytes = 0;    // what the kernel requests per block
  int64_t limit_bytes = 0;    // the GPU's per-block opt-in limit
  bool fits = false;
  std::string reason;         // the verdict in words, with the numbers
  std::vector<SmemItem> stage_items;   // one stage, term by term
  std::vector<SmemItem> other_items;   // everything else, term by term
  int threads = 0;
  int ctas_per_sm = 0;        // by shared memory and threads (registers unknown before launch)
};

struct ModelOptions {
  int experts = 257;  // groups of the grouped GEMM (the scheduler state of w4a16_mma)
  // w4a16_gemv stages its whole batch: the batch's tokens (at most the tile's 8), the GEMM's K
  // (FC1: hidden, FC2: intermediate) and the slots per token (top-k, +1 with a shared expert).
  // Defaults: glm5 FC1 at the largest batch. (w4a16_fused routes the batch in shared memory:
  // its request depends on the groups and the slots, not on the batch or K.)
  int tokens = 8;
  int k = 6144;
  int slots = 9;
  // CUTLASS version of profile (b): >= 45 uses the v4.5 sm_120 builder (capacity minus the
  // grouped-GEMM reservations), < 45 the full capacity. Both give the same stage counts for the
  // fused-MoE tiles.
  int cutlass_version = 45;
  // Whether one of the groups is the shared expert: the routed experts, which the small-batch
  // and fused families route in-kernel (256 at most), are the others.
  bool shared_expert = true;
};

ResourceReport model_resources(const Tactic& t, const GpuSpec& gpu, DataType dtype,
                               const ModelOptions& opt = {});

// The tactics `fp4moe tactics` lists for a family: w4a16_mma, w4a16_wgmma, w4a16_gemv, w4a16_fused
// - the compiled instantiation list;
// cutlass_sm120 - the TRT-LLM / FlashInfer sm_120 tile list (128x{32,64,128}x{128,256},
// 128x256x128, 256x128x128) x swap-AB; cutlass_sm100 - its sm_100 FP4 list (128x{64,128,256}x256,
// and the sm_120 tiles for comparison). Stages "auto" for the CUTLASS families.
std::vector<Tactic> listed_tactics(Family f, Epilogue e);

// What the CUDA runtime says of a compiled kernel of ours on the current GPU: registers, static
// and dynamic shared memory, CTAs per SM. Empty without a GPU, in a build without CUDA, for a
// tactic that is not compiled in, or where none of the build's machine code runs on the GPU.
struct CompiledKernelInfo {
  int registers = 0;
  int64_t static_smem = 0;
  int64_t dynamic_smem = 0;  // what the launch requests for `experts` groups
  int ctas_per_sm = 0;
  int max_threads = 0;
};
// On `device` (-1: the current one); the current device is the same afterwards.
std::optional<CompiledKernelInfo> query_compiled_kernel(const Tactic& t, const ModelOptions& opt = {},
                                                        int device = -1);

// The tactics of our families (w4a16_mma, w4a16_wgmma, w4a16_gemv, w4a16_fused) compiled into this
// build (mirrors src/kernels/inst; a GPU test checks the two lists agree).
std::vector<Tactic> compiled_w4a16_tactics();

}  // namespace fp4moe
