// Builds a registry entry for one w4a16_wgmma tactic (included by the src/kernels/inst files
// only). The launch encodes the token tensor map of this call's B operand: boxes of a whole
// token tile of contiguous rows in fragment order (the layer gathers FC1's rows into permuted
// order first, and FC1 writes FC2's in fragment order), whole 64-element chunks per row; one
// map per width a unit may run at (W4a16WgmmaTraits::Widths), whose box is that many rows.
#pragma once

#include <utility>

#include "kernels/common/fragment_order.h"
#include "kernels/common/launch.h"
#include "kernels/common/tensor_map.h"
#include "kernels/gemm/sm90_w4a16_wgmma_grouped_gemm.cuh"
#include "kernels/gemm/w4a16_registry.h"
#include "kernels/gemm/wgmma_shapes.h"

namespace fp4moe::kernels {

template <Tactic kT>
W4a16Kernel make_w4a16_wgmma_kernel() {
  static_assert(decode_tactic(encode_tactic(kT)) == kT, "tactic does not survive its encoding");
  constexpr auto kKernel = &w4a16_wgmma_grouped_gemm_kernel<encode_tactic(kT)>;
  W4a16Kernel k;
  k.tactic = kT;
  k.function = reinterpret_cast<const void*>(kKernel);
  k.dynamic_smem_bytes = [](const W4a16SmemShape& s) { return W4a16WgmmaTraits<kT>::dynamic_smem_bytes(s.experts); };
  k.tile_floats = 0;  // no stream-K partials
  k.launch = [](const W4a16GemmParams& p, int grid, int smem, bool pdl, cudaStream_t stream) {
    FP4MOE_CHECK(p.gather == nullptr, "w4a16_wgmma reads contiguous token rows: gather them first");
    FP4MOE_CHECK(kT.epilogue != Epilogue::kFinalize || p.rows_out != nullptr,
                 "w4a16_wgmma finalize: no rows buffer (rows_out)");
    const int64_t pitch = fragment_order_pitch(p.k);
    FP4MOE_CHECK(p.x_stride >= pitch, "w4a16_wgmma: token rows of ", p.k, " K in fragment order need a pitch of ",
                 pitch, " elements, got ", p.x_stride);
    WgmmaMaps maps{};
    maps.weights = make_prepacked_chunks_tensor_map(p.weights, int64_t{p.num_experts} * p.kgroups * p.rowtiles,
                                                    kT.tile_rows / 16);
    using Widths = typename W4a16WgmmaTraits<kT>::Widths;
    for (int i = 0; i < Widths::kCount; ++i)
      maps.tokens[i] = make_bf16_rows_tensor_map(p.x, p.x_rows, pitch, p.x_stride, Widths::at(i));
    launch_kernel(kKernel, dim3(grid), dim3(kT.warps * 32), smem, pdl, stream, p, maps);
  };
  return k;
}

// A kernel of epilogue kEp for every shape of kWgmmaShapes (wgmma_shapes.h), in its order.
template <Epilogue kEp, std::size_t... kI>
std::vector<W4a16Kernel> make_w4a16_wgmma_kernels(std::index_sequence<kI...>) {
  return {make_w4a16_wgmma_kernel<shape_tactic(kWgmmaShapes[kI], kEp)>()...};
}
template <Epilogue kEp>
std::vector<W4a16Kernel> make_w4a16_wgmma_kernels() {
  return make_w4a16_wgmma_kernels<kEp>(std::make_index_sequence<kWgmmaShapes.size()>{});
}

}  // namespace fp4moe::kernels
