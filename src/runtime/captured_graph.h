// CapturedGraph: work recorded once on a stream as a CUDA graph, replayed many times. The layer
// is timed this way everywhere (run, bench, tune) because that is how a serving engine runs it:
// no launch gaps on the host side, and the PDL edges between its kernels kept.
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/cuda_check.h"

namespace fp4moe {

class CapturedGraph {
 public:
  // Records `record(stream)` (which must only enqueue work) on `stream`. If recording throws,
  // the capture is ended and discarded, so the stream is usable again, and the error rethrown.
  template <typename Record>
  CapturedGraph(cudaStream_t stream, Record&& record) {
    FP4MOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      record(stream);
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);
      if (partial) cudaGraphDestroy(partial);
      cudaGetLastError();
      throw;
    }
    FP4MOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    const cudaError_t e = cudaGraphInstantiate(&exec_, graph_, 0);
    if (e != cudaSuccess) {
      cudaGraphDestroy(graph_);
      FP4MOE_CUDA_CHECK(e);
    }
  }
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch(cudaStream_t stream) const { FP4MOE_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace fp4moe
