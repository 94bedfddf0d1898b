// Instantiations of the w4a16_gemv family with the finalize epilogue (FC2, the slot sum inside).
#include "kernels/gemm/gemv_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_gemv_finalize_kernels() { return make_w4a16_gemv_kernels<Epilogue::kFinalize>(); }

}  // namespace fp4moe::kernels
