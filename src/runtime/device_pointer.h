// check_device_pointers: refuses, by name, an argument that is not device memory of the GPU the
// work runs on.
//
// The layer's kernels read and write through the caller's pointers, and the layer's contract is
// device memory of its GPU. Host memory (a std::vector, pageable or pinned) or another GPU's
// memory passes every check of size and alignment; a kernel touching it raises
// cudaErrorIllegalAddress where the GPU cannot reach it, which is sticky: the process's CUDA
// context is lost for every layer in it (and where the GPU can reach it - mapped pinned memory,
// a peer GPU, HMM - it runs at the speed of that link, not of the GPU's memory). The runtime knows
// what each address is, so the call is refused before anything is enqueued.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>
#include <utility>

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

// Each (name, pointer): device memory of `device` passes, and managed memory (which any GPU of a
// Linux host may touch); host memory, registered or not, and other GPUs' memory throw an Error
// naming the argument ("forward: hidden is host memory ...").
inline void check_device_pointers(std::initializer_list<std::pair<const char*, const void*>> args, int device) {
  const RelaxedCaptureMode relaxed;  // one switch for all the queries (an eager call pays ~1 us)
  for (const auto& [what, p] : args) {
    cudaPointerAttributes a{};
    FP4MOE_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
    switch (a.type) {
      case cudaMemoryTypeManaged:
        break;
      case cudaMemoryTypeDevice:
        FP4MOE_CHECK(a.device == device, what, " is memory of GPU ", a.device, ", not of the layer's GPU ", device);
        break;
      case cudaMemoryTypeHost:
        FP4MOE_FAIL(what, " is host memory (cudaHostAlloc or registered), not device memory of GPU ", device);
      default:
        FP4MOE_FAIL(what, " is not CUDA memory (a host allocation: malloc, new, std::vector), not device memory of GPU ",
                    device);
    }
  }
}

}  // namespace fp4moe
