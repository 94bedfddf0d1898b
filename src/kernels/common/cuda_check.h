// FP4MOE_CUDA_CHECK(call): every CUDA runtime call is checked; a failure throws fp4moe::Error
// naming the call, the error and where it happened. FP4MOE_CUDA_CHECK_LAUNCH() checks the
// last error right after a kernel launch.
#pragma once

#include <cuda_runtime.h>

#include "fp4moe/error.h"

// Before it throws, the runtime's last error is read (and so reset where it is not sticky): a
// failed allocation or launch the caller recovers from must not be reported again by the next
// launch's check.
#define FP4MOE_CUDA_CHECK(call)                                                             \
  do {                                                                                      \
    const cudaError_t fp4moe_status_ = (call);                                              \
    if (fp4moe_status_ != cudaSuccess) {                                                    \
      (void)cudaGetLastError();                                                             \
      ::fp4moe::detail::throw_error(__FILE__, __LINE__, "CUDA error in ", #call, ": ",     \
                                    cudaGetErrorString(fp4moe_status_), " (", __FILE__, ":", \
                                    __LINE__, ")");                                         \
    }                                                                                       \
  } while (0)

#define FP4MOE_CUDA_CHECK_LAUNCH() FP4MOE_CUDA_CHECK(cudaGetLastError())

// Whether a runtime call failed because the build holds no code of the kernel that the GPU
// runs (no image for its architecture), not because of the call.
inline bool is_missing_kernel_image(cudaError_t status) {
  return status == cudaErrorNoKernelImageForDevice || status == cudaErrorInvalidDeviceFunction;
}
