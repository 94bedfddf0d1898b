// fp4moe/heuristic.h - the documented rule that picks the decode family's tactics for a batch
// when no tuning cache entry exists (docs/HEURISTIC.md).
#pragma once

#include <cstdint>

#include "fp4moe/hw.h"
#include "fp4moe/layer.h"
#include "fp4moe/moe.h"

namespace fp4moe {

// Token tile: the smallest of 8, 16, 32, 64 covering the expected busiest expert
// (mean + 2 sqrt(mean) + 1 with mean = T * k / E), 64 at most.
int heuristic_token_tile(const MoeConfig& cfg, int64_t tokens);
// The decode family's tactic for one GEMM: token tile as above, 128 weight rows, stages and
// warps as compiled; where the resource model says that does not fit on `gpu`, the fitting
// compiled tactic with the largest token tile not above it (then most rows, then most warps).
// (The family schedules stream-K over all resident CTAs, so no split-K factor is chosen.)
Tactic heuristic_tactic(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu, Epilogue ep);
LayerPlan heuristic_plan(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu);

}  // namespace fp4moe
