#include "kernels/moe/gather_rows.h"

#include <algorithm>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/fragment_order.h"
#include "kernels/common/launch.h"
#include "kernels/gemm/grouped_units.cuh"

namespace fp4moe::kernels {
namespace {

// A warp per row (grid-stride over rows): the row's token index is one load for the warp, and
// lane l writes the row's 16-byte output units l, l + 32, ... - no division per unit (the grid-
// stride over all units this replaced divided by the units per row for every 16 bytes: glm5,
// T = 16384, routing + this 1.6 GB gather 1047 -> 966 us on the H200). Output unit u = 2b + h
// of a chunk holds the bf16 pairs a = 0..3 of (b, h), i.e. input pairs 8a + 2b + h
// (fragment_order.h): four 4-byte loads 32 bytes apart. A warp's 32 units are 4 chunks: each of
// its loads reads 4 whole 32-byte sectors, its store 512 contiguous bytes. Elements past k load
// as zeros. kUnroll units per lane are loaded before any is stored, to keep more loads in flight.
constexpr int kUnroll = 4;

__global__ void __launch_bounds__(256) gather_rows_kernel(const uint16_t* x, int64_t x_stride, const int* row_token,
                                                          int64_t rows, int64_t k, int64_t units_per_row,
                                                          uint16_t* out) {
  w4a16::griddep_wait();  // the routing's row_token
  w4a16::griddep_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); r < rows; r += warps) {
    const uint32_t* src_row = reinterpret_cast<const uint32_t*>(x + row_token[r] * x_stride);
    uint4* dst_row = reinterpret_cast<uint4*>(out) + r * units_per_row;
    for (int64_t base = lane; base < units_per_row; base += 32 * kUnroll) {
      uint32_t v[kUnroll][4];
#pragma unroll
      for (int q = 0; q < kUnroll; ++q) {
        const int64_t unit = base + 32 * q;
        const int64_t chunk0 = (unit >> 3) * kFragmentChunk;
        const int u = static_cast<int>(unit & 7);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          const int pair = 8 * a + u;  // 8a + 2b + h
          v[q][a] = unit < units_per_row && chunk0 + 2 * pair < k ? __ldg(src_row + chunk0 / 2 + pair) : 0u;
        }
      }
#pragma unroll
      for (int q = 0; q < kUnroll; ++q)
        if (base + 32 * q < units_per_row) dst_row[base + 32 * q] = make_uint4(v[q][0], v[q][1], v[q][2], v[q][3]);
    }
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
  const int grid = static_cast<int>(std::min<int64_t>((rows + 7) / 8, int64_t{sms} * 8));  // 8 rows (warps) a CTA
  launch_kernel(&gather_rows_kernel, dim3(grid), dim3(256), 0, pdl, stream, x, x_stride, row_token, rows, k,
                units_per_row, out);
}

}  // namespace fp4moe::kernels
