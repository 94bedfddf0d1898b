#include "kernels/moe/gather_rows.h"

#include <algorithm>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/launch.h"
#include "kernels/gemm/grouped_units.cuh"

namespace fp4moe::kernels {
namespace {

// One 16-byte unit per thread and step, grid-stride: a warp moves 512 contiguous bytes of one
// row (or the tail of one and the head of the next).
__global__ void __launch_bounds__(256) gather_rows_kernel(const uint16_t* x, int64_t x_stride,
                                                          const int* row_token, int64_t rows, int64_t units_per_row,
                                                          uint16_t* out) {
  w4a16::griddep_wait();  // the routing's row_token
  w4a16::griddep_launch_dependents();
  const int64_t total = rows * units_per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / units_per_row, c = i - r * units_per_row;
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + row_token[r] * x_stride) + c);
    reinterpret_cast<uint4*>(out + r * units_per_row * 8)[c] = v;
  }
}

}  // namespace

void launch_gather_rows(const uint16_t* x, int64_t x_stride, const int* row_token, int64_t rows, int64_t k,
                        uint16_t* out, bool pdl, cudaStream_t stream) {
  FP4MOE_CHECK(k % 8 == 0 && x_stride % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0,
               "gather_rows: rows must be 16-byte aligned (K ", k, ", stride ", x_stride, ")");
  if (rows == 0) return;
  int device = 0, sms = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t units = rows * (k / 8);
  const int grid = static_cast<int>(std::min<int64_t>((units + 255) / 256, int64_t{sms} * 8));
  launch_kernel(&gather_rows_kernel, dim3(grid), dim3(256), 0, pdl, stream, x, x_stride, row_token, rows, k / 8,
                out);
}

}  // namespace fp4moe::kernels
