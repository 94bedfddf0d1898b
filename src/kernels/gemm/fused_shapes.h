// fused_shapes.h - the compiled shapes of the w4a16_fused family, in one table (no CUDA headers):
// the instantiation file (src/kernels/inst/fused_layer.cu, through fused_launch.cuh) and the
// resource model's list of compiled tactics (src/plan/resource_model.cc) both read it.
#pragma once

#include <array>

#include "fp4moe/tactic.h"

namespace fp4moe::kernels {

struct FusedShape {
  int rows;    // weight rows per item (row tiles of 16)
  int k;       // K per item: whole K groups of 256, one pipeline stage each
  int stages;  // K groups in flight per CTA
  int warps;   // the producer warp, the epilogue warp and the consumer warps
};

inline constexpr std::array<FusedShape, 4> kFusedShapes{{{128, 1024, 3, 6}, {128, 3072, 3, 6}, {128, 6144, 3, 6}, {64, 1024, 4, 6}}};

// The tactic of a shape. One kernel runs both GEMMs: the registry lists it under FC1's epilogue
// and under FC2's, and a plan names it twice.
constexpr Tactic shape_tactic(const FusedShape& f, Epilogue ep) {
  return Tactic{Family::kW4a16Fused, f.rows, 8, f.k, f.stages, f.warps, 1, ep, false};
}

}  // namespace fp4moe::kernels
