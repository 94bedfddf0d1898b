// Instantiations of the w4a16_gemv family with the swiglu epilogue (FC1, routing inside).
#include "kernels/gemm/gemv_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_gemv_swiglu_kernels() { return make_w4a16_gemv_kernels<Epilogue::kSwiglu>(); }

}  // namespace fp4moe::kernels
