#include "kernels/common/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/driver_entry_point.h"

namespace fp4moe::kernels {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn =
      driver_entry_point<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", 12000);
  FP4MOE_CHECK(fn != nullptr, "tensor map: the driver has no cuTensorMapEncodeTiled (needs CUDA 12 or newer)");
  return fn;
}

}  // namespace

CUtensorMap make_bf16_rows_tensor_map(const uint16_t* base, int64_t rows, int64_t k, int64_t stride,
                                      int box_rows) {
  FP4MOE_CHECK(base != nullptr && reinterpret_cast<uintptr_t>(base) % 16 == 0,
               "tensor map: the token rows must start 16-byte aligned");
  FP4MOE_CHECK(rows >= 1 && k >= 1 && stride >= k && (stride * 2) % 16 == 0,
               "tensor map: bad token matrix (rows ", rows, ", K ", k, ", stride ", stride,
               " elements; the row pitch must be a multiple of 16 bytes)");
  FP4MOE_CHECK(box_rows >= 1 && box_rows <= 256, "tensor map: box of ", box_rows, " rows");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride * 2)};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(base), dims,
                                 strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FP4MOE_CHECK(r == CUDA_SUCCESS, "tensor map: cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r),
               ") for ", rows, " x ", k, " bf16, stride ", stride);
  return map;
}

CUtensorMap make_prepacked_chunks_tensor_map(const uint8_t* base, int64_t blocks, int box_blocks) {
  FP4MOE_CHECK(base != nullptr && reinterpret_cast<uintptr_t>(base) % 16 == 0,
               "tensor map: the prepacked weights must start 16-byte aligned");
  FP4MOE_CHECK(blocks >= 1 && blocks <= (int64_t{1} << 32), "tensor map: ", blocks, " weight blocks out of range");
  FP4MOE_CHECK(box_blocks >= 1 && box_blocks <= 256, "tensor map: box of ", box_blocks, " weight blocks");
  // 32-bit elements: [blocks][4 chunks][128 words].
  CUtensorMap map{};
  const cuuint64_t dims[3] = {128, 4, static_cast<cuuint64_t>(blocks)};
  const cuuint64_t strides[2] = {512, 2048};
  const cuuint32_t box[3] = {128, 1, static_cast<cuuint32_t>(box_blocks)};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 3, const_cast<uint8_t*>(base), dims, strides,
                                 box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FP4MOE_CHECK(r == CUDA_SUCCESS, "tensor map: cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r),
               ") for ", blocks, " prepacked weight blocks");
  return map;
}

}  // namespace fp4moe::kernels
