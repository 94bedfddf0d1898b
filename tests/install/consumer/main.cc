// Uses the installed headers and library: a quantization, a routing, the heuristic plan and one
// refused input; in a CUDA build also the GPU layer's factory and the CUDA runtime's device query,
// so that the CUDA half (kernels, static cudart) links through the exported target too. Prints
// what it got so that the test can check it.
#include <fp4moe/error.h>
#include <fp4moe/format.h>
#include <fp4moe/heuristic.h>
#include <fp4moe/hw.h>
#include <fp4moe/moe.h>
#include <fp4moe/version.h>
#ifdef FP4MOE_WITH_CUDA
#include <fp4moe/layer.h>
#endif

#include <cstdio>
#include <vector>

int main() {
  const std::vector<float> w(2 * 32, 1.5f);
  const fp4moe::Nvfp4Matrix q = fp4moe::quantize_nvfp4(w, 2, 32);
  const fp4moe::MoeConfig cfg = fp4moe::MoeConfig::glm5();
  const fp4moe::LayerPlan plan = fp4moe::heuristic_plan(cfg, 16, *fp4moe::find_known_gpu("h200"));
  std::printf("fp4moe %s: nvfp4 %lld x %lld, value %.2f; glm5 T = 16 on h200: %s\n", FP4MOE_VERSION,
              static_cast<long long>(q.rows), static_cast<long long>(q.cols), q.value(1, 31),
              fp4moe::format_tactic(plan.fc1).c_str());
#ifdef FP4MOE_WITH_CUDA
  // No GPU is needed to link these or to ask (a machine without one reports none).
  const fp4moe::CudaEnvironment env = fp4moe::query_cuda_environment();
  auto* const create = &fp4moe::GpuMoeLayer::create;
  std::printf("cuda build: %zu GPUs, layer factory %s\n", env.devices.size(), create ? "linked" : "missing");
#endif
  try {
    fp4moe::quantize_nvfp4(w, 2, 33);
    return 1;
  } catch (const fp4moe::Error& e) {
    std::printf("refused: %s\n", e.what());
  }
  return 0;
}
