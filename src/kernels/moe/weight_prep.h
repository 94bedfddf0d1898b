// Load-time weight preparation on the GPU (weight_prep.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/prepack_layout.h"

namespace fp4moe::kernels {

// Prepacks one matrix (interleave = false: m0 [src_rows, k]) or FC1's gate/up pair
// (interleave = true: m0 = gate, m1 = up, each [src_rows, k]) into kernel order.
// weights_out / scales_out hold PrepackShape{rows, k}.weight_bytes() / scale_bytes().
void launch_prepack(const Nvfp4View& m0, const Nvfp4View& m1, int64_t src_rows, int64_t k,
                    bool interleave, uint8_t* weights_out, uint8_t* scales_out, cudaStream_t stream);

// out [rows][k] bf16 = e2m1 * e4m3 * global_scale (rounded to bf16 once).
void launch_dequant_bf16(const Nvfp4View& m, int64_t rows, int64_t k, float global_scale,
                         uint16_t* out, cudaStream_t stream);

}  // namespace fp4moe::kernels
