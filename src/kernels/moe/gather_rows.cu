#include "kernels/moe/gather_rows.h"

#include <algorithm>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/fragment_order.h"
#include "kernels/common/launch.h"
#include "kernels/gemm/grouped_units.cuh"

namespace fp4moe::kernels {
namespace {

// One 16-byte output unit per thread and step, grid-stride. Output unit u = 2b + h of a chunk
// holds the bf16 pairs a = 0..3 of (b, h), i.e. input pairs 8a + 2b + h (fragment_order.h): four
// 4-byte loads 32 bytes apart. A warp covers 4 chunks: each of its loads reads 4 whole 32-byte
// sectors, its store 512 contiguous bytes. Elements past k load as zeros.
__global__ void __launch_bounds__(256) gather_rows_kernel(const uint16_t* x, int64_t x_stride, const int* row_token,
                                                          int64_t rows, int64_t k, int64_t units_per_row,
                                                          uint16_t* out) {
  w4a16::griddep_wait();  // the routing's row_token
  w4a16::griddep_launch_dependents();
  const int64_t total = rows * units_per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / units_per_row, unit = i - r * units_per_row;
    const int64_t chunk0 = (unit >> 3) * kFragmentChunk;
    const int u = static_cast<int>(unit & 7);
    const uint32_t* src = reinterpret_cast<const uint32_t*>(x + row_token[r] * x_stride + chunk0);
    uint32_t v[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int pair = 8 * a + u;  // 8a + 2b + h
      v[a] = chunk0 + 2 * pair < k ? __ldg(src + pair) : 0u;
    }
    reinterpret_cast<uint4*>(out)[i] = make_uint4(v[0], v[1], v[2], v[3]);
  }
}

}  // namespace

void launch_gather_rows(const uint16_t* x, int64_t x_stride, const int* row_token, int64_t rows, int64_t k,
                        uint16_t* out, bool pdl, cudaStream_t stream) {
  FP4MOE_CHECK(k % 16 == 0 && x_stride % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0,
               "gather_rows: K must be a multiple of 16 and rows 16-byte aligned (K ", k, ", stride ",
               x_stride, ")");
  if (rows == 0) return;
  int device = 0, sms = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t units_per_row = fragment_order_pitch(k) / 8;
  const int64_t work = rows * units_per_row;
  const int grid = static_cast<int>(std::min<int64_t>((work + 255) / 256, int64_t{sms} * 8));
  launch_kernel(&gather_rows_kernel, dim3(grid), dim3(256), 0, pdl, stream, x, x_stride, row_token, rows, k,
                units_per_row, out);
}

}  // namespace fp4moe::kernels
