// FP4MOE_CUBLAS_CHECK: a cuBLAS call whose status is not success becomes an fp4moe::Error
// naming the call (the ceilings and the baseline both call cuBLAS).
#pragma once

#include <cublas_v2.h>

#include "fp4moe/error.h"

#define FP4MOE_CUBLAS_CHECK(call)                                                      \
  do {                                                                                 \
    const cublasStatus_t st_ = (call);                                                 \
    FP4MOE_CHECK(st_ == CUBLAS_STATUS_SUCCESS, "cuBLAS error in ", #call, ": status ", \
                 static_cast<int>(st_));                                               \
  } while (0)
