// query_compiled_kernel: the CUDA runtime's view of our compiled kernels.
#include <cuda_runtime.h>

#include "fp4moe/hw.h"
#include "fp4moe/resource_model.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gemm/w4a16_registry.h"
#include "plan/model_options.h"
#include "runtime/device_buffer.h"

namespace fp4moe {

std::optional<CompiledKernelInfo> query_compiled_kernel(const Tactic& t, const ModelOptions& opt, int device) {
  if (t.family != Family::kW4a16Mma && t.family != Family::kW4a16Wgmma && t.family != Family::kW4a16Gemv &&
      t.family != Family::kW4a16Fused)
    return std::nullopt;
  check_model_options(opt, "query_compiled_kernel");  // the shapes the kernels' layouts are sized for
  const kernels::W4a16Kernel* k = kernels::find_w4a16_kernel(t);
  if (!k || query_cuda_environment().devices.empty()) return std::nullopt;
  // Every figure below (the image, the opt-in limit, occupancy, the function's shared-memory
  // attribute) is the device's: the one asked for, not whichever the process has current.
  const ScopedDevice on(device);
  cudaFuncAttributes attr{};
  const cudaError_t st = cudaFuncGetAttributes(&attr, k->function);
  if (is_missing_kernel_image(st)) {
    (void)cudaGetLastError();
    return std::nullopt;  // no machine code of this build runs on the GPU (build_support_for says why)
  }
  FP4MOE_CUDA_CHECK(st);
  CompiledKernelInfo info;
  info.registers = attr.numRegs;
  info.static_smem = static_cast<int64_t>(attr.sharedSizeBytes);
  info.dynamic_smem = k->dynamic_smem_bytes(kernels::W4a16SmemShape{opt.experts, opt.tokens, opt.k, opt.slots});
  info.max_threads = attr.maxThreadsPerBlock;
  int current = 0, optin = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&current));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, current));
  if (info.dynamic_smem > optin) return info;  // cannot launch here: 0 CTAs per SM
  // Raised where lower, under the lock the layers take (never lowered: a layer running this
  // kernel may need more than this query's shape).
  FP4MOE_CUDA_CHECK(kernels::raise_dynamic_smem_limit(*k, static_cast<int>(info.dynamic_smem)));
  FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&info.ctas_per_sm, k->function,
                                                                  t.warps * 32, info.dynamic_smem));
  return info;
}

}  // namespace fp4moe
