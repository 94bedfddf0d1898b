#include "runtime/gpu_wake.h"

#include <chrono>

#include "kernels/common/cuda_check.h"
#include "runtime/l2_flush.h"

namespace fp4moe {

void wake_gpu(double seconds) {
  int dev = 0, l2 = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  L2Flusher reads(l2);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    for (int i = 0; i < 8; ++i) reads.flush(nullptr);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

}  // namespace fp4moe
