// Instantiations of the w4a16_wgmma family (sm_90a) with the finalize epilogue.
#include "kernels/gemm/wgmma_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_wgmma_finalize_kernels() {
  constexpr Epilogue kEp = Epilogue::kFinalize;
  return {
      make_w4a16_wgmma_kernel<w4a16_wgmma_tactic(64, 14, kEp)>(),
      make_w4a16_wgmma_kernel<w4a16_wgmma_tactic(64, 7, kEp)>(),
      make_w4a16_wgmma_kernel<w4a16_wgmma_tactic(128, 9, kEp)>(),
      make_w4a16_wgmma_kernel<w4a16_wgmma_tactic(256, 5, kEp)>(),
  };
}

}  // namespace fp4moe::kernels
