// build_targets.cc - which run target's machine code runs on which GPU: CUDA's compatibility
// rules, and the runtime's own answer for this build.
#include <cctype>
#include <string>

#include "fp4moe/error.h"
#include "fp4moe/hw.h"
#include "fp4moe/version.h"
#include "hw/kernel_image.h"

#ifdef FP4MOE_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/common/cuda_check.h"
#include "kernels/gemm/w4a16_registry.h"
#include "runtime/device_buffer.h"  // ScopedDevice
#endif

namespace fp4moe {

std::string run_target_for(int sm) {
  FP4MOE_CHECK(sm >= 10, "run_target_for: compute capability ", sm, " is not major x 10 + minor");
  return std::to_string(sm) + (sm >= 90 ? "a" : "");
}

bool run_target_runs_on(const std::string& target, int sm) {
  // Two or three digits (major, then one digit of minor), at most one of 'a' / 'f', and
  // "-virtual" for PTX.
  static const std::string kVirtual = "-virtual";
  const bool ptx = target.size() > kVirtual.size() && target.ends_with(kVirtual);
  const std::string arch = ptx ? target.substr(0, target.size() - kVirtual.size()) : target;
  size_t digits = 0;
  while (digits < arch.size() && std::isdigit(static_cast<unsigned char>(arch[digits]))) ++digits;
  const std::string suffix = arch.substr(digits);
  if (digits < 2 || digits > 3 || (suffix != "" && suffix != "a" && suffix != "f")) return false;
  const int built = std::stoi(arch.substr(0, digits));
  if (suffix == "a") return sm == built;  // arch-specific: that compute capability alone
  // Family-specific code, and plain machine code: the same major version, the same or a later
  // minor. Plain PTX: any later GPU.
  if (ptx && suffix.empty()) return sm >= built;
  return sm / 10 == built / 10 && sm % 10 >= built % 10;
}

namespace detail {

BuildSupport kernel_image_support(const void* kernel, const GpuSpec& gpu, const std::string& targets) {
  BuildSupport s;
#ifndef FP4MOE_WITH_CUDA
  (void)kernel;
  (void)gpu;
  (void)targets;
  s.why = "built without CUDA";
#else
  FP4MOE_CHECK(gpu.live && gpu.device_index >= 0, "kernel_image_support: ", gpu.name, " is a table entry, not a live GPU");
  const ScopedDevice on_device(gpu.device_index);
  cudaFuncAttributes attr{};
  const cudaError_t st = cudaFuncGetAttributes(&attr, kernel);
  (void)cudaGetLastError();  // not sticky; the next check must not see it again
  if (st == cudaSuccess) {
    s.runs = true;
    s.machine_code_sm = attr.binaryVersion;
    s.code_sm = attr.ptxVersion;
  } else if (is_missing_kernel_image(st)) {
    s.why = "this build's machine code (run targets " + targets + ") does not run on " + gpu.name + " (" +
            gpu.arch_name() + "): rebuild with -DFP4MOE_CUDA_ARCHS=" + run_target_for(gpu.sm);
  } else {
    FP4MOE_FAIL("CUDA error asking for a kernel's image on ", gpu.name, ": ", cudaGetErrorString(st));
  }
#endif
  return s;
}

}  // namespace detail

BuildSupport build_support_for(const GpuSpec& gpu) {
#ifndef FP4MOE_WITH_CUDA
  return detail::kernel_image_support(nullptr, gpu, "");
#else
  // Every CUDA source of the library is compiled for the same run targets: one kernel answers
  // for all of them.
  return detail::kernel_image_support(kernels::w4a16_kernels().front().function, gpu, FP4MOE_CUDA_ARCHS);
#endif
}

GpuSpec gpu_for_build(const GpuSpec& gpu, const BuildSupport& support) {
  GpuSpec g = gpu;
  if (support.runs && support.code_sm >= 80 && support.code_sm / 10 < gpu.sm / 10) g.sm = support.code_sm;
  return g;
}

GpuSpec gpu_for_build(const GpuSpec& gpu) { return gpu.live ? gpu_for_build(gpu, build_support_for(gpu)) : gpu; }

}  // namespace fp4moe
