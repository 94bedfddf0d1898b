// gemv_shapes.h - the compiled shapes of the w4a16_gemv family, in one table (no CUDA headers):
// the instantiation files (src/kernels/inst/gemv_*.cu, through gemv_launch.cuh) and the resource
// model's list of compiled tactics (src/plan/resource_model.cc) both read it.
#pragma once

#include <array>

#include "fp4moe/tactic.h"

namespace fp4moe::kernels {

struct GemvShape {
  int rows;    // weight rows per block (row tiles of 16)
  int stages;  // K groups in flight per warp, in registers
  int warps;
};

// FC1 routes with 8 experts per lane: up to 256 routed experts (GLM-5, DeepSeek-V3). A warp
// holding 32 per lane (1024 experts) would need ~130 registers for the scores alone, raising
// the whole kernel's allocation; more experts take the stream-K family. The resource model
// refuses the family beyond them, the launch checks them again.
inline constexpr int kGemvPerLane = 8;
inline constexpr int kGemvMaxRoutedExperts = 32 * kGemvPerLane;

inline constexpr std::array<GemvShape, 4> kGemvShapes{{{16, 3, 4}, {16, 2, 8}, {16, 2, 4}, {16, 2, 6}}};

// The tactic of a shape: the batch (up to 8 tokens) is one n8 tile, an item a K group of 256.
constexpr Tactic shape_tactic(const GemvShape& g, Epilogue ep) {
  return Tactic{Family::kW4a16Gemv, g.rows, 8, 256, g.stages, g.warps, 1, ep, false};
}

}  // namespace fp4moe::kernels
