// Instantiations of the w4a16_gemv family with the finalize epilogue (FC2, the slot sum inside).
#include "kernels/gemm/gemv_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_gemv_finalize_kernels() {
  constexpr Epilogue kEp = Epilogue::kFinalize;
  return {
      make_w4a16_gemv_kernel<w4a16_gemv_tactic(16, 3, 4, kEp)>(),
      make_w4a16_gemv_kernel<w4a16_gemv_tactic(16, 2, 8, kEp)>(),
      make_w4a16_gemv_kernel<w4a16_gemv_tactic(16, 2, 4, kEp)>(),
      make_w4a16_gemv_kernel<w4a16_gemv_tactic(16, 2, 6, kEp)>(),
  };
}

}  // namespace fp4moe::kernels
