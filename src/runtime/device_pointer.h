// check_device_pointer: refuses, by name, an address a kernel on `device` would fault on.
//
// The layer's kernels read and write through the caller's pointers. Host memory (a std::vector,
// pageable or not registered with CUDA) or another GPU's memory passes every check of size and
// alignment, and the first kernel to touch it raises cudaErrorIllegalAddress, which is sticky:
// the process's CUDA context is lost for every layer in it. The runtime knows what each address
// is, so the call is refused before anything is enqueued.
#pragma once

#include <cuda_runtime.h>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"

namespace fp4moe {

// Within its scope the calling thread's stream capture mode is relaxed: a call the runtime
// counts as potentially unsafe during a capture (in global or thread-local mode it would fail and
// invalidate the capture) runs as outside one. For queries that enqueue nothing.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { FP4MOE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&previous_)); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&previous_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

// `what` names the argument in the error ("forward: hidden ..."). Device memory of `device`
// passes, and managed memory (which any GPU of a Linux host may touch); host memory, registered
// or not, and other GPUs' memory do not.
inline void check_device_pointer(const char* what, const void* p, int device) {
  cudaPointerAttributes a{};
  {
    const RelaxedCaptureMode relaxed;
    FP4MOE_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
  }
  switch (a.type) {
    case cudaMemoryTypeManaged:
      return;
    case cudaMemoryTypeDevice:
      FP4MOE_CHECK(a.device == device, what, " is memory of GPU ", a.device, ", not of the layer's GPU ", device);
      return;
    case cudaMemoryTypeHost:
      FP4MOE_FAIL(what, " is host memory (cudaHostAlloc or registered), not device memory of GPU ", device);
    default:
      FP4MOE_FAIL(what, " is not CUDA memory (a host allocation: malloc, new, std::vector), not device memory of GPU ",
                   device);
  }
}

}  // namespace fp4moe
