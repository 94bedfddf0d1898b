#include "kernels/moe/gather_rows.h"

#include <algorithm>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/fragment_order.h"
#include "kernels/common/launch.h"
#include "kernels/gemm/grouped_units.cuh"

namespace fp4moe::kernels {
namespace {

// A warp per (token, segment of 32 x kUnroll 16-byte output units) - a grid-stride over those:
// the token's row is read once and stored to each of its slots' permuted rows. Row by row of the
// permutation (the order this replaced) read every token `slots` times at random moments; with
// more tokens than L2 holds (glm5, T = 16384: 201 MB of hidden) that was 1.6 GB of DRAM reads for
// 1.6 GB of writes, now 0.2 GB. Lane l writes the segment's units l, l + 32, ...: unit u = 2b + h
// of a chunk holds the bf16 pairs a = 0..3 of (b, h), i.e. input pairs 8a + 2b + h
// (fragment_order.h): four 4-byte loads 32 bytes apart. A warp's 32 units are 4 chunks: each of
// its loads reads 4 whole 32-byte sectors, each store 512 contiguous bytes. Elements past k load
// as zeros. The segment's kUnroll units per lane are all loaded before any is stored.
constexpr int kUnroll = 4;
constexpr int kSegmentUnits = 32 * kUnroll;

__global__ void __launch_bounds__(256) gather_rows_kernel(const uint16_t* x, int64_t x_stride, const int* pair_row,
                                                          int64_t tokens, int slots, int64_t k, int64_t units_per_row,
                                                          uint16_t* out) {
  w4a16::griddep_wait();  // the routing's pair_row
  w4a16::griddep_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  const int64_t segments = (units_per_row + kSegmentUnits - 1) / kSegmentUnits;
  for (int64_t item = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); item < tokens * segments;
       item += warps) {
    const int64_t t = item / segments, base = (item - t * segments) * kSegmentUnits + lane;
    const uint32_t* src_row = reinterpret_cast<const uint32_t*>(x + t * x_stride);
    // The token's permuted rows: slot s in lane s % 32 of rows_lo (s < 32) or rows_hi (s < 64).
    const int* pair = pair_row + t * slots;
    const int rows_lo = lane < slots ? __ldg(pair + lane) : 0;
    const int rows_hi = lane + 32 < slots ? __ldg(pair + lane + 32) : 0;
    uint32_t v[kUnroll][4];
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int64_t unit = base + 32 * q;
      const int64_t chunk0 = (unit >> 3) * kFragmentChunk;
      const int u = static_cast<int>(unit & 7);
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const int pair_index = 8 * a + u;  // 8a + 2b + h
        v[q][a] = unit < units_per_row && chunk0 + 2 * pair_index < k ? __ldg(src_row + chunk0 / 2 + pair_index) : 0u;
      }
    }
    for (int s = 0; s < slots; ++s) {
      const int64_t r = __shfl_sync(0xffffffffu, s < 32 ? rows_lo : rows_hi, s & 31);
      uint4* dst_row = reinterpret_cast<uint4*>(out) + r * units_per_row;
#pragma unroll
      for (int q = 0; q < kUnroll; ++q)
        if (base + 32 * q < units_per_row) dst_row[base + 32 * q] = make_uint4(v[q][0], v[q][1], v[q][2], v[q][3]);
    }
  }
}

}  // namespace

void launch_gather_rows(const uint16_t* x, int64_t x_stride, const int* pair_row, int64_t tokens, int slots,
                        int64_t k, uint16_t* out, bool pdl, cudaStream_t stream) {
  FP4MOE_CHECK(k % 16 == 0 && x_stride % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0,
               "gather_rows: K must be a multiple of 16 and rows 16-byte aligned (K ", k, ", stride ",
               x_stride, ")");
  FP4MOE_CHECK(slots >= 1 && slots <= 64, "gather_rows: ", slots, " slots per token, at most 64 are supported");
  if (tokens == 0) return;
  int device = 0, sms = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t units_per_row = fragment_order_pitch(k) / 8;
  const int64_t items = tokens * ((units_per_row + kSegmentUnits - 1) / kSegmentUnits);
  const int grid = static_cast<int>(std::min<int64_t>((items + 7) / 8, int64_t{sms} * 8));  // 8 items (warps) a CTA
  launch_kernel(&gather_rows_kernel, dim3(grid), dim3(256), 0, pdl, stream, x, x_stride, pair_row, tokens, slots, k,
                units_per_row, out);
}

}  // namespace fp4moe::kernels
