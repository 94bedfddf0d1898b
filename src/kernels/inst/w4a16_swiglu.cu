// Instantiations of the w4a16_mma family with the swiglu epilogue.
#include "kernels/gemm/w4a16_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_swiglu_kernels() { return make_w4a16_kernels<Epilogue::kSwiglu, kMmaShapes>(); }

}  // namespace fp4moe::kernels
