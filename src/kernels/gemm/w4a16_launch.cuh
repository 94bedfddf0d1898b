// Builds a registry entry for one w4a16 tactic (included by the src/kernels/inst files only).
#pragma once

#include <utility>

#include "kernels/common/launch.h"
#include "kernels/gemm/mma_shapes.h"
#include "kernels/gemm/sm80_w4a16_grouped_gemm.cuh"
#include "kernels/gemm/w4a16_registry.h"

namespace fp4moe::kernels {

template <Tactic kT>
W4a16Kernel make_w4a16_kernel() {
  static_assert(decode_tactic(encode_tactic(kT)) == kT, "tactic does not survive its encoding");
  W4a16Kernel k;
  k.tactic = kT;
  k.function = reinterpret_cast<const void*>(&w4a16_grouped_gemm_kernel<encode_tactic(kT)>);
  k.dynamic_smem_bytes = [](const W4a16SmemShape& s) { return W4a16Traits<kT>::dynamic_smem_bytes(s.experts); };
  k.tile_floats = W4a16Traits<kT>::kTileFloats;
  k.launch = [](const W4a16GemmParams& p, int grid, int smem, bool pdl, cudaStream_t stream) {
    launch_kernel(&w4a16_grouped_gemm_kernel<encode_tactic(kT)>, dim3(grid), dim3(kT.warps * 32), smem, pdl,
                  stream, p);
  };
  return k;
}

// A kernel of epilogue kEp for every shape of kShapes (mma_shapes.h), in its order.
template <Epilogue kEp, const auto& kShapes, std::size_t... kI>
std::vector<W4a16Kernel> make_w4a16_kernels(std::index_sequence<kI...>) {
  return {make_w4a16_kernel<shape_tactic(kShapes[kI], kEp)>()...};
}
template <Epilogue kEp, const auto& kShapes>
std::vector<W4a16Kernel> make_w4a16_kernels() {
  return make_w4a16_kernels<kEp, kShapes>(std::make_index_sequence<kShapes.size()>{});
}

}  // namespace fp4moe::kernels
