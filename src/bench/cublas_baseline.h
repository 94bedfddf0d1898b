// The benchmark's baseline: the MoE layer as a C++ user writes it today with cuBLAS on BF16
// weights (the NVFP4 weights dequantized once): gather the routed rows, one grouped GEMM
// (cublasGemmGroupedBatchedEx) or one cublasGemmEx per active expert for FC1, SwiGLU, the same
// for FC2, and a weighted finalize. The routing (the same as ours) is prepared on the host
// beforehand and is not timed: the baseline is timed at its best.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "fp4moe/moe.h"

namespace fp4moe {

class CublasBaseline {
 public:
  enum class Method { kGrouped, kPerExpert };

  explicit CublasBaseline(const MoeWeights& w);
  ~CublasBaseline();
  CublasBaseline(const CublasBaseline&) = delete;
  CublasBaseline& operator=(const CublasBaseline&) = delete;

  // Builds the permutation and the GEMM groups for this routing (host work, synchronous).
  void prepare(const Routing& routing);
  // out [T, H] bf16 from hidden [T, H] bf16 (device pointers), enqueued on `stream`.
  void forward(const uint16_t* hidden, uint16_t* out, cudaStream_t stream, Method m);
  // Whether cublasGemmGroupedBatchedEx ran (it needs cuBLAS 12.5+).
  bool grouped_available() const;
  double bf16_weight_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

const char* to_string(CublasBaseline::Method m);

}  // namespace fp4moe
