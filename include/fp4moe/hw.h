// fp4moe/hw.h - what a GPU offers: the known-GPU table (datasheet figures: src/hw/gpu_table.cc) and the live
// device query produce the same GpuSpec, so everything downstream (the resource model, the
// benchmark's floors, the tuner's cache keys) treats a table entry and a real GPU alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fp4moe {

struct GpuSpec {
  std::string name;           // "NVIDIA H200", "RTX PRO 6000 Blackwell", ...
  std::string key;            // short id used by --gpu: "h200", "rtx-pro-6000", "current:0"
  int sm = 0;                 // compute capability x 10 + y: 80, 90, 100, 120, 121
  int sm_count = 0;
  int64_t smem_per_block_optin = 0;  // largest dynamic + static shared memory one block may use
  int64_t smem_per_sm = 0;           // shared memory of one multiprocessor
  int64_t smem_reserved_per_block = 1024;  // the runtime's per-block reservation (sm_80+)
  int64_t l2_bytes = 0;
  int regs_per_sm = 65536;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  double mem_bandwidth_gbs = 0;  // datasheet (table) or derived from clocks and bus (live)
  double bf16_tflops = 0;        // dense tensor-core peaks; 0 where unknown
  double fp8_tflops = 0;
  double fp4_tflops = 0;
  bool live = false;             // true: from the CUDA runtime, false: from the table
  int device_index = -1;

  // "sm_90", "sm_120"...
  std::string arch_name() const { return "sm_" + std::to_string(sm); }
  // Architecture families the kernels are written for.
  bool has_mma_sync_bf16() const { return sm >= 80; }
  bool has_wgmma() const { return sm == 90; }           // sm_90a only
  bool has_tcgen05() const { return sm == 100 || sm == 103; }
  bool has_block_scaled_mma_sync() const { return sm == 120 || sm == 121; }
};

// The table of known GPUs (datasheet figures, dense tensor peaks: src/hw/gpu_table.cc).
const std::vector<GpuSpec>& known_gpus();
// Looks up a table entry by key or name, case-insensitive ("h200", "H200", "rtx-pro-6000").
std::optional<GpuSpec> find_known_gpu(const std::string& name);

struct CudaEnvironment {
  bool built_with_cuda = false;
  int runtime_version = 0;  // e.g. 13000
  int driver_version = 0;   // e.g. 13000 (the CUDA version the driver supports)
  std::string error;        // why no GPU is usable, if none is
  // True where the machine has no GPU to use at all (built without CUDA, no driver, no device);
  // false where one is there but the runtime cannot use it (a driver older than the runtime, a
  // device the runtime cannot query: `error` says which) - a fault to report, not an absence.
  bool no_gpu = false;
  std::vector<GpuSpec> devices;  // devices[i] is CUDA device i (the list stops at one it cannot query)
};
// Queries the CUDA runtime; never throws (a machine without GPU or driver gives no devices and
// the reason in `error`).
CudaEnvironment query_cuda_environment();

// --gpu NAME|current[:N]: a table entry, or the live device N (default 0). Throws when the name
// is unknown or no GPU is present.
GpuSpec resolve_gpu(const std::string& name);

// ---- which machine code of a build runs on which GPU -------------------------------------------
// The build holds machine code for its run targets (FP4MOE_CUDA_ARCHS, e.g. "80;90a") and, by
// default, no PTX, so a GPU that none of them runs on cannot run the kernels at all (a Blackwell
// GPU with the default build, for one). A target "XY-virtual" is PTX, compiled by the driver for
// the GPU at its first use (JIT).

// The run target made for compute capability `sm` (x 10 + y): "80", "86", "90a", "100a", "120a".
// From sm_90 on the arch-specific target: wgmma and the other sm_90a features need it.
std::string run_target_for(int sm);

// Whether run target `target`'s code runs on compute capability `sm`, by CUDA's rules: "86" on
// 8.6 and later 8.x, "90a" on 9.0 alone, "100f" on 10.0 and later 10.x; as PTX ("80-virtual")
// on every later GPU too, but an 'a' target's on its own version alone. False for a string that
// is no run target.
bool run_target_runs_on(const std::string& target, int sm);

// Whether this build's kernels run on a live GPU: the CUDA runtime's own answer (it loads one of
// the library's kernels for the device, or says it has no image for it).
struct BuildSupport {
  bool runs = false;
  int machine_code_sm = 0;  // where it runs: the machine code loaded (90 for sm_90a), else 0
  int code_sm = 0;          // where it runs: the architecture the device code was compiled for
                            // (its __CUDA_ARCH__ / 10): the PTX's where the driver JIT-compiled it
  std::string why;          // where it does not: the GPU, this build's targets, the one to add
};
BuildSupport build_support_for(const GpuSpec& gpu);

// The GPU as this build's kernels see it: where the driver JIT-compiles PTX of an earlier major
// version for it (80-virtual on an H100), its compute capability lowered to that version, whose
// features alone the device code has (no wgmma, bulk copies or programmatic launches before
// sm_90); otherwise (and where nothing runs) the GPU unchanged. The layer plans for this GPU.
GpuSpec gpu_for_build(const GpuSpec& gpu);
// The same from an answer of build_support_for(gpu) already at hand.
GpuSpec gpu_for_build(const GpuSpec& gpu, const BuildSupport& support);

}  // namespace fp4moe
