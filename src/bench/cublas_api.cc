// cuBLAS loaded at run time (see cublas_api.h).
#include "bench/cublas_api.h"

#include <cstdlib>
#include <string>

#include "common/runtime_library.h"
#include "fp4moe/error.h"

// The exported name behind a cublas_v2.h macro (cublasCreate is cublasCreate_v2).
#define FP4MOE_CUBLAS_SYMBOL_(name) #name
#define FP4MOE_CUBLAS_SYMBOL(name) FP4MOE_CUBLAS_SYMBOL_(name)

namespace fp4moe {

const CublasApi& CublasApi::get() {
  static const CublasApi api = [] {
    const char* env = std::getenv("FP4MOE_CUBLAS_LIBRARY");
    const std::string file = env && *env ? env : "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    RuntimeLibrary lib("cuBLAS", file);
    CublasApi a;
    lib.bind(a.create, FP4MOE_CUBLAS_SYMBOL(cublasCreate));
    lib.bind(a.destroy, FP4MOE_CUBLAS_SYMBOL(cublasDestroy));
    lib.bind(a.set_stream, FP4MOE_CUBLAS_SYMBOL(cublasSetStream));
    lib.bind(a.gemm_ex, FP4MOE_CUBLAS_SYMBOL(cublasGemmEx));
    lib.bind_optional(a.gemm_grouped_batched_ex, FP4MOE_CUBLAS_SYMBOL(cublasGemmGroupedBatchedEx));
    FP4MOE_CHECK(lib.ok(), "bench: ", lib.failure(),
                 " (the ceilings and the baseline need cuBLAS; set FP4MOE_CUBLAS_LIBRARY to its file)");
    return a;
  }();
  return api;
}

}  // namespace fp4moe
