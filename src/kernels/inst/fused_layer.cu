// Instantiations of the w4a16_fused family (the whole layer of a small batch in one launch, sm_90+).
#include "kernels/gemm/fused_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_fused_kernels() { return make_w4a16_fused_kernels(); }

}  // namespace fp4moe::kernels
