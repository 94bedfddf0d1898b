// Instantiations of the w4a16_wgmma family (sm_90a) with the finalize epilogue.
#include "kernels/gemm/wgmma_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_wgmma_finalize_kernels() { return make_w4a16_wgmma_kernels<Epilogue::kFinalize>(); }

}  // namespace fp4moe::kernels
