// Load-time weight preparation on the GPU: prepacking checkpoint-layout NVFP4 into kernel
// order (prepack_layout.h), and dequantizing to BF16 (the cuBLAS baseline's weights).
#include <cuda_bf16.h>

#include "kernels/common/cuda_check.h"
#include "kernels/moe/prepack_layout.h"
#include "kernels/moe/weight_prep.h"

namespace fp4moe::kernels {
namespace {

// One word pair a thread: its 16 values land in both words (dequant_nvfp4.cuh).
__global__ void prepack_pairs(Nvfp4View m0, Nvfp4View m1, int64_t src_rows, int64_t k,
                              bool interleave, PrepackShape shape, uint2* out) {
  const int64_t pairs = shape.weight_bytes() / 8;
  const Nvfp4View src[2] = {m0, m1};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // i = ((kgroup * rowtiles + rowtile) * 4 + c) * 64 + lane * 2 + h
    const int h = i & 1, lane = (i >> 1) & 31, c = (i >> 6) & 3;
    const int64_t blk = i >> 8;
    const int64_t rowtile = blk % shape.rowtiles(), kgroup = blk / shape.rowtiles();
    const uint64_t pair = prepack_pair(src, src_rows, k, interleave, rowtile, kgroup, c, lane, h);
    out[i] = make_uint2(static_cast<uint32_t>(pair), static_cast<uint32_t>(pair >> 32));
  }
}

__global__ void prepack_scales(Nvfp4View m0, Nvfp4View m1, int64_t src_rows, int64_t k,
                               bool interleave, PrepackShape shape, uint8_t* out) {
  const int64_t bytes = shape.scale_bytes();
  const Nvfp4View src[2] = {m0, m1};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int b = i & 7, lane = (i >> 3) & 31;
    const int64_t blk = i >> 8;
    const int64_t rowtile = blk % shape.rowtiles(), kgroup = blk / shape.rowtiles();
    out[i] = prepack_scale(src, src_rows, k, interleave, rowtile, kgroup, lane, b);
  }
}

__global__ void dequant_to_bf16(Nvfp4View m, int64_t rows, int64_t k, float global_scale,
                                __nv_bfloat16* out) {
  const int64_t n = rows * k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, c = i % k;
    const uint32_t code = view_code(m, k, r, c);
    const float mags[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    float v = mags[code & 7];
    if (code & 8) v = -v;
    const uint8_t sb = m.scales[r * (k / 16) + c / 16];
    // E4M3 -> float exactly (see dequant_nvfp4.cuh for the bit trick).
    const float s = __uint_as_float((sb & 0x7Fu) << 20) * 0x1p120f * ((sb & 0x80) ? -1.f : 1.f);
    // e2m1 * e4m3 is exact in bf16; the global scale rounds once, like a BF16 checkpoint.
    out[i] = __float2bfloat16_rn(v * s * global_scale);
  }
}

int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536)); }

}  // namespace

void launch_prepack(const Nvfp4View& m0, const Nvfp4View& m1, int64_t src_rows, int64_t k,
                    bool interleave, uint8_t* weights_out, uint8_t* scales_out, cudaStream_t stream) {
  PrepackShape shape{interleave ? 2 * src_rows : src_rows, k};
  FP4MOE_CHECK(k % 16 == 0, "prepack: K = ", k, " is not a multiple of 16");
  prepack_pairs<<<grid_for(shape.weight_bytes() / 8), 256, 0, stream>>>(
      m0, m1, src_rows, k, interleave, shape, reinterpret_cast<uint2*>(weights_out));
  FP4MOE_CUDA_CHECK_LAUNCH();
  prepack_scales<<<grid_for(shape.scale_bytes()), 256, 0, stream>>>(m0, m1, src_rows, k, interleave,
                                                                     shape, scales_out);
  FP4MOE_CUDA_CHECK_LAUNCH();
}

void launch_dequant_bf16(const Nvfp4View& m, int64_t rows, int64_t k, float global_scale,
                         uint16_t* out, cudaStream_t stream) {
  dequant_to_bf16<<<grid_for(rows * k), 256, 0, stream>>>(m, rows, k, global_scale,
                                                         reinterpret_cast<__nv_bfloat16*>(out));
  FP4MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace fp4moe::kernels
