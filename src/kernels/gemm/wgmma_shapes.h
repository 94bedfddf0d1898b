// wgmma_shapes.h - the compiled shapes of the w4a16_wgmma (prefill) family, in one table (no CUDA
// headers): the instantiation files (src/kernels/inst/wgmma_*.cu, through wgmma_launch.cuh) and
// the resource model's list of compiled tactics (src/plan/resource_model.cc) both read it.
#pragma once

#include <array>

#include "fp4moe/tactic.h"

namespace fp4moe::kernels {

// 128 weight rows and 12 warps (a producer and two consumer warpgroups), 192 and 16 (three
// consumer warpgroups; 144 or 176 tokens) or 256 and 20 (four; 64 or 128 tokens), 64 K a stage
// (the 256 x 64 tile also 128 or 256, the 192 x 176 one 128: WgmmaShape::k). The stages fill
// about 183-224 KB (the deeper ring hides the copy latency of a loaded memory system; the rest of
// 227 KB is left to the scheduler's per-expert prefix, 4 KB for the most groups a layer may have:
// 8 stages of the 256 x 128 tile would not leave it, nor a fourth 128-K stage of the 192 x 176
// one), or, with 7 stages of 128 x 64, half of it: two CTAs per SM (W4a16WgmmaTraits::kCtasPerSm).
struct WgmmaShape {
  int rows;    // weight rows: 64 per consumer warpgroup
  int tokens;  // token tile: wgmma N, 64..256
  int stages;
  int k = 64;  // K a stage: one 128-byte swizzled row of bf16 per 64 (64, 128 or 256)
};

inline constexpr std::array<WgmmaShape, 11> kWgmmaShapes{{{128, 64, 14},
                                                          {128, 64, 7},
                                                          {256, 64, 10},
                                                          {256, 64, 6, 128},
                                                          {256, 64, 3, 256},
                                                          {256, 128, 7},
                                                          {128, 128, 9},
                                                          {192, 144, 7},
                                                          {192, 176, 7},
                                                          {192, 176, 3, 128},
                                                          {128, 256, 5}}};

// The tactic of a shape: a producer warpgroup and one consumer warpgroup per 64 rows, no
// split-K.
constexpr Tactic shape_tactic(const WgmmaShape& w, Epilogue ep) {
  return Tactic{Family::kW4a16Wgmma, w.rows, w.tokens, w.k, w.stages, 4 * (1 + w.rows / 64), 1, ep, false};
}

}  // namespace fp4moe::kernels
