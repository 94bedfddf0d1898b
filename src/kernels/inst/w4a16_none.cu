// Instantiations of the w4a16_mma family with the none epilogue.
#include "kernels/gemm/w4a16_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_none_kernels() { return make_w4a16_kernels<Epilogue::kNone, kMmaShapesNone>(); }

}  // namespace fp4moe::kernels
