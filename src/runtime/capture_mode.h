// What the layer asks of CUDA graph capture before it enqueues: whether the caller's stream is
// capturing, and a scope in which this thread's calls do not fail for a capture elsewhere.
#pragma once

#include <cuda_runtime.h>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"

namespace fp4moe {

// Within its scope the calling thread's stream capture mode is relaxed: a call the runtime
// counts as potentially unsafe during a capture (cudaMalloc, cudaFree, pointer and stream
// queries) runs as outside one. In global mode - PyTorch's default - a capture on any thread
// of the process makes such a call fail on every other thread and invalidates that capture, so
// a layer's eager call (its workspace growing, say) on a thread of its own would break a graph
// another thread is recording. The layer's eager calls enqueue only on their own stream, which
// is not capturing: nothing they do can become part of another capture.
// It never throws, so that a destructor may use it too (DeviceBuffer's free): an exchange that
// failed - the runtime rejects only a bad argument - leaves the mode as it was, and the calls in
// the scope then fail, if at all, with their own error.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept : exchanged_(cudaThreadExchangeStreamCaptureMode(&previous_) == cudaSuccess) {
    if (!exchanged_) (void)cudaGetLastError();
  }
  ~RelaxedCaptureMode() {
    if (exchanged_) (void)cudaThreadExchangeStreamCaptureMode(&previous_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
  bool exchanged_;
};

// `stream`'s capture status (cudaStreamIsCapturing, which is capture-safe). The legacy default
// stream (handle 0) while a blocking stream of its GPU captures is refused by name: work on it
// would have to wait for the capturing stream, which CUDA forbids (the capture stays valid).
inline cudaStreamCaptureStatus capture_status(const char* call, cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(stream, &status);
  if (e == cudaErrorStreamCaptureImplicit) {
    (void)cudaGetLastError();
    FP4MOE_FAIL(call, ": the legacy default stream cannot be used while a blocking stream of its GPU captures a CUDA ",
                "graph (its work would wait for the capture); pass a stream of your own or a non-blocking one");
  }
  FP4MOE_CUDA_CHECK(e);
  return status;
}

}  // namespace fp4moe
