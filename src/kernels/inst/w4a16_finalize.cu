// Instantiations of the w4a16_mma family with the finalize epilogue.
#include "kernels/gemm/w4a16_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_finalize_kernels() { return make_w4a16_kernels<Epilogue::kFinalize, kMmaShapes>(); }

}  // namespace fp4moe::kernels
