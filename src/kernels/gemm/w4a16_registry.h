// The table of compiled grouped-GEMM kernels of our families (w4a16_mma, w4a16_wgmma,
// w4a16_gemv, w4a16_fused): each tactic maps to its launch function. Dispatch, the tuner and the
// resource-model test all go through this table (no macro dispatch).
#pragma once

#include <cuda_runtime.h>

#include <span>
#include <vector>

#include "fp4moe/tactic.h"
#include "kernels/gemm/w4a16_params.h"

namespace fp4moe::kernels {

struct W4a16FusedParams;  // kernels/gemm/fused_params.h

struct W4a16Kernel {
  Tactic tactic;
  const void* function;                          // the __global__ function
  int (*dynamic_smem_bytes)(const W4a16SmemShape& shape);
  // w4a16_gemv: the most CTAs a launch can use (its blocks); nullptr for the stream-K families,
  // which take every resident CTA slot
  int (*max_blocks)(const W4a16SmemShape& shape, int rowtiles) = nullptr;
  int tile_floats;  // fp32 values of one partial tile (kRows x kTokens)
  // pdl: launch as a programmatic dependent of the previous kernel on the stream (sm_90+).
  void (*launch)(const W4a16GemmParams& p, int grid, int dynamic_smem, bool pdl,
                 cudaStream_t stream);
  // w4a16_fused: the whole layer in one launch (no programmatic dependency: it is the layer's only
  // kernel); nullptr for the GEMM families, whose `launch` is nullptr here.
  void (*launch_fused)(const W4a16FusedParams& p, int grid, int dynamic_smem, cudaStream_t stream) = nullptr;
};

// Every instantiated kernel (src/kernels/inst/*.cu).
std::span<const W4a16Kernel> w4a16_kernels();
// The kernel of tactic t, or nullptr.
const W4a16Kernel* find_w4a16_kernel(const Tactic& t);

// Makes kernel k launchable with `bytes` of dynamic shared memory on the current device: raises
// its cudaFuncAttributeMaxDynamicSharedMemorySize where it is lower, never lowers it (another
// layer, or a query, may need more). The attribute is the process's, not a caller's: it is read
// and raised under one process-wide lock, or two callers raising it at once could leave the
// smaller of their values and a kernel set up for the larger fail at launch. Returns the
// runtime's error (the last error cleared) where the GPU cannot give that much.
cudaError_t raise_dynamic_smem_limit(const W4a16Kernel& k, int bytes);

// Instantiation lists, one per file in src/kernels/inst.
std::vector<W4a16Kernel> w4a16_swiglu_kernels();
std::vector<W4a16Kernel> w4a16_finalize_kernels();
std::vector<W4a16Kernel> w4a16_none_kernels();
std::vector<W4a16Kernel> w4a16_wgmma_swiglu_kernels();    // sm_90a only
std::vector<W4a16Kernel> w4a16_wgmma_finalize_kernels();  // sm_90a only
std::vector<W4a16Kernel> w4a16_gemv_swiglu_kernels();
std::vector<W4a16Kernel> w4a16_gemv_finalize_kernels();
std::vector<W4a16Kernel> w4a16_fused_kernels();  // both epilogues' entries; runs on sm_90+

}  // namespace fp4moe::kernels
