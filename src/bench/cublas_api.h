// cuBLAS, loaded at run time (dlopen): only the benchmark's ceilings and its BF16 baseline call
// it, so the tool starts - and runs the layer, the tests and the CPU reference - on a machine
// without it (a host with the driver alone), and a command that does not bench does not map its
// few hundred MB. The library is FP4MOE_CUBLAS_LIBRARY when set, else libcublas.so.<the major
// version built against> on the loader's search path (a CUDA toolkit's lib64, or the one a
// PyTorch wheel ships: nvidia/cublas/lib).
#pragma once

#include <cublas_v2.h>

namespace fp4moe {

struct CublasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  // (the exported C function; the header's C++ overload taking a cudaDataType compute type is
  // an inline wrapper)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  // cuBLAS 12.5+; nullptr in an older library (the baseline then times one GEMM per expert).
  decltype(&cublasGemmGroupedBatchedEx) gemm_grouped_batched_ex = nullptr;

  // Loads the library once; throws fp4moe::Error naming what was tried when it cannot.
  static const CublasApi& get();
};

}  // namespace fp4moe
