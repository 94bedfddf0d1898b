// fp4moe/heuristic.h - the documented rule that picks the decode family's tactics for a batch
// when no tuning cache entry exists (docs/HEURISTIC.md).
#pragma once

#include <cstdint>

#include "fp4moe/hw.h"
#include "fp4moe/layer.h"
#include "fp4moe/moe.h"

namespace fp4moe {

// Expected number of routed experts (groups with >= 1 token) for T uniformly routed tokens.
double expected_active_experts(const MoeConfig& cfg, int64_t tokens);
// Token tile: the smallest of 8, 16, 32, 64 covering the expected busiest expert
// (mean + 2 sqrt(mean) + 1 with mean = T * k / E), 64 at most.
int heuristic_token_tile(const MoeConfig& cfg, int64_t tokens);
// The decode family's plan: token tile as above, 128 weight rows; stages and warps as compiled.
// (The family schedules stream-K over all resident CTAs, so no split-K factor is chosen.)
LayerPlan heuristic_plan(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu);

}  // namespace fp4moe
