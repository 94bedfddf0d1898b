// mma_shapes.h - the compiled shapes of the w4a16_mma (decode) family, in one table (no CUDA
// headers): the instantiation files (src/kernels/inst/w4a16_*.cu, through w4a16_launch.cuh) and
// the resource model's list of compiled tactics (src/plan/resource_model.cc) both read it.
#pragma once

#include <array>

#include "fp4moe/tactic.h"

namespace fp4moe::kernels {

struct MmaShape {
  int rows;    // weight rows per CTA tile (row tiles of 16)
  int tokens;  // token tile: n8 MMA tiles, 8..64
  int stages;  // K groups of 256 in the shared-memory pipeline
  int warps;
};

// FC1 (swiglu) and FC2 (finalize): every shape the heuristic can return (docs/HEURISTIC.md) and
// the tuner's other candidates. The last is the widest token tile that fits the 99 KB a block of
// sm_120 (two stages; one CTA an SM there), the fallback's choice there for prefill sizes: four
// warps (added when every 8-warp tile had 128 registers a thread, at which eight warps of it
// spilled on sm_120a), 32 tokens (the 64-token
// tile of two stages, 64 x 64, was slower in every size timed: docs/HEURISTIC.md).
inline constexpr std::array<MmaShape, 16> kMmaShapes{{
    {64, 8, 4, 4},
    {64, 16, 4, 4},
    {128, 8, 4, 4},
    {64, 8, 3, 4},
    {128, 8, 4, 8},
    {128, 8, 3, 4},
    {128, 8, 3, 8},
    {128, 16, 4, 4},
    {128, 16, 2, 4},
    {128, 8, 2, 4},
    {128, 16, 4, 8},
    {128, 32, 3, 4},
    {128, 64, 3, 8},
    {256, 8, 2, 8},
    {256, 16, 2, 8},
    {128, 32, 2, 4},
}};

// The plain epilogue (raw fp32 rows; the GEMM tests and the CUTLASS comparisons).
inline constexpr std::array<MmaShape, 2> kMmaShapesNone{{{64, 16, 4, 4}, {128, 32, 3, 4}}};

// The tactic of a shape: K groups of 256, split-K 1 (the family schedules stream-K over all
// resident CTAs).
constexpr Tactic shape_tactic(const MmaShape& m, Epilogue ep) {
  return Tactic{Family::kW4a16Mma, m.rows, m.tokens, 256, m.stages, m.warps, 1, ep, false};
}

}  // namespace fp4moe::kernels
