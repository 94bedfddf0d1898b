// fp4moe info: version, build options, CUDA runtime and driver, the GPUs found.
#include <cstdio>

#include "cli/commands.h"
#include "fp4moe/build_id.h"
#include "fp4moe/hw.h"
#include "fp4moe/version.h"

namespace fp4moe::cli {

namespace {
std::string cuda_version(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace

void register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Version, build options, CUDA runtime and driver, GPUs");
  cmd->callback([] {
    std::printf("fp4moe %s (%s build)\n", FP4MOE_VERSION, FP4MOE_BUILD_TYPE);
    std::printf("  build id          : %s (the sources' fingerprint: the tuning cache's key)\n", build_id());
    std::printf("  C++ compiler      : %s\n", FP4MOE_CXX_COMPILER);
#ifdef FP4MOE_WITH_CUDA
    std::printf("  CUDA              : enabled, nvcc %s\n", FP4MOE_CUDA_COMPILER);
    std::printf("  run targets       : %s\n", FP4MOE_CUDA_ARCHS);
    std::printf("  compile-only      : %s\n", FP4MOE_COMPILE_ONLY_ARCHS);
#else
    std::printf("  CUDA              : disabled (CPU reference only)\n");
#endif
    const CudaEnvironment env = query_cuda_environment();
    std::printf("  CUDA runtime      : %s\n", cuda_version(env.runtime_version).c_str());
    std::printf("  CUDA driver       : %s\n", cuda_version(env.driver_version).c_str());
    if (env.devices.empty()) {
      std::printf("GPUs: no GPU (%s)\n", env.error.c_str());
      return;
    }
    std::printf("GPUs:\n");
    for (const GpuSpec& g : env.devices) {
      std::printf("  [%d] %s  sm_%d  %d SMs  smem/block %lld B (opt-in)  smem/SM %lld B  L2 %.1f MB"
                  "  memory %.0f GB/s (clocks x bus)\n",
                  g.device_index, g.name.c_str(), g.sm, g.sm_count,
                  static_cast<long long>(g.smem_per_block_optin),
                  static_cast<long long>(g.smem_per_sm), g.l2_bytes / 1048576.0,
                  g.mem_bandwidth_gbs);
      const BuildSupport support = build_support_for(g);
      if (!support.runs)
        std::printf("      kernels: none: %s\n", support.why.c_str());
      else if (support.code_sm != support.machine_code_sm)  // JIT: PTX of an earlier architecture
        std::printf("      kernels: sm_%d machine code the driver compiled from this build's compute_%d PTX "
                    "(the layer plans for sm_%d)\n", support.machine_code_sm, support.code_sm,
                    gpu_for_build(g, support).sm);
      else if (support.machine_code_sm == g.sm)
        std::printf("      kernels: this build's sm_%d machine code runs here\n", support.machine_code_sm);
      else  // an earlier minor version's (sm_80's on an sm_86): compiled for its limits
        std::printf("      kernels: this build's sm_%d machine code runs here (-DFP4MOE_CUDA_ARCHS=%s would build "
                    "this GPU's own)\n", support.machine_code_sm, run_target_for(g.sm).c_str());
    }
  });
}

}  // namespace fp4moe::cli
