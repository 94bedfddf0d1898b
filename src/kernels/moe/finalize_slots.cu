#include "kernels/moe/finalize_slots.h"

#include <algorithm>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/launch.h"
#include "kernels/gemm/grouped_units.cuh"

namespace fp4moe::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) finalize_slots_kernel(const W4a16GemmParams p) {
  w4a16::griddep_wait();  // FC2's rows_out
  w4a16::griddep_launch_dependents();
  w4a16::finalize_sum_slots<kThreads>(p, threadIdx.x);
}

}  // namespace

void launch_finalize_slots(const uint16_t* rows_out, const float* row_weight, const int* pair_row, int slots,
                           int64_t tokens, int64_t rows, uint16_t* out, bool pdl, cudaStream_t stream) {
  FP4MOE_CHECK(rows % 8 == 0 && slots >= 1 && reinterpret_cast<uintptr_t>(rows_out) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0,
               "finalize_slots: rows (", rows, ") must be a multiple of 8 and the buffers 16-byte aligned");
  if (tokens == 0) return;
  int device = 0, sms = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  W4a16GemmParams p;  // the fields finalize_sum_slots reads
  p.rows_out = const_cast<uint16_t*>(rows_out);
  p.row_weight = row_weight;
  p.pair_row = pair_row;
  p.slots = slots;
  p.rows = static_cast<int>(rows);
  p.x_rows = tokens * slots;
  p.out = out;
  const int64_t work = tokens * (rows / w4a16::kFinalizeRowsPerThread);  // threads with a share
  const int grid = static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, int64_t{sms} * 8));
  launch_kernel(&finalize_slots_kernel, dim3(grid), dim3(kThreads), 0, pdl, stream, p);
}

}  // namespace fp4moe::kernels
