// Instantiations of the w4a16_mma family with the swiglu epilogue.
#include "kernels/gemm/w4a16_launch.cuh"

namespace fp4moe::kernels {

std::vector<W4a16Kernel> w4a16_swiglu_kernels() {
  constexpr Epilogue kEp = Epilogue::kSwiglu;
  return {
      make_w4a16_kernel<w4a16_tactic(64, 8, 4, 4, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(64, 16, 4, 4, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 8, 4, 4, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(64, 8, 3, 4, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 8, 4, 8, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 8, 3, 4, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 8, 3, 8, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 16, 4, 4, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 16, 2, 4, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 8, 2, 4, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 16, 4, 8, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 32, 3, 4, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(128, 64, 3, 8, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(256, 8, 2, 8, kEp)>(),
      make_w4a16_kernel<w4a16_tactic(256, 16, 2, 8, kEp)>(),
  };
}

}  // namespace fp4moe::kernels
