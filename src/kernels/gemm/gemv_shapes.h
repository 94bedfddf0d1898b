// gemv_shapes.h - the compiled shapes of the w4a16_gemv family, in one table (no CUDA headers):
// the instantiation files (src/kernels/inst/gemv_*.cu, through gemv_launch.cuh) and the resource
// model's list of compiled tactics (src/plan/resource_model.cc) both read it.
#pragma once

#include <array>

namespace fp4moe::kernels {

struct GemvShape {
  int rows;    // weight rows per block (row tiles of 16)
  int stages;  // K groups in flight per warp, in registers
  int warps;
};

inline constexpr std::array<GemvShape, 4> kGemvShapes{{{16, 3, 4}, {16, 2, 8}, {16, 2, 4}, {16, 2, 6}}};

}  // namespace fp4moe::kernels
