// The decode family's walk over its units (host and device: src/kernels/gemm/unit_cursor_test.cc
// checks it on the CPU against the closed form). A unit is one output tile (expert, row block,
// token tile); the units of all experts are numbered by the per-expert prefix that
// grouped_units.cuh's unit_prefix builds: expert e holds units [prefix[e], prefix[e + 1]).
#pragma once

#include "kernels/gemm/w4a16_params.h"

#if defined(__CUDACC__)
#define FP4MOE_UNITS_HD __host__ __device__ __forceinline__
#else
#define FP4MOE_UNITS_HD inline
#endif

namespace fp4moe::kernels::w4a16 {

// The expert whose unit range holds u: the e with prefix[e] <= u < prefix[e+1].
FP4MOE_UNITS_HD int find_expert(const int* prefix, int experts, int u) {
  int lo = 0, hi = experts;  // prefix[lo] <= u < prefix[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= u) lo = mid; else hi = mid;
  }
  return lo;
}

struct Unit {
  int e, rb, tok0, ntok;
};

// The decode family's units in order (an expert's row blocks, each over its token tiles: token
// tile innermost), walked one at a time. The stream-K loop visits every unit of its range in
// turn, twice (the loader, then the epilogue), so it keeps a cursor: a binary search, two
// global loads and two integer divisions per unit cost FC2 (8 K groups a unit) ~300
// instructions per unit and warp, ~8% of its instructions (glm5, T = 64, ncu on the H200).
// Only seek() searches; next() reads the expert offsets when it enters a new expert.
template <int kTokensPerTile>
struct UnitCursor {
  int u = 0;      // the unit
  int e = 0;      // its expert
  int end = 0;    // prefix[e + 1]: the expert's first unit past its own
  int tiles = 1;  // the expert's token tiles
  int tt = 0;     // token tile
  int rb = 0;     // row block
  int row0 = 0;   // the expert's first permuted row
  int n_e = 0;    // the expert's tokens

  FP4MOE_UNITS_HD void enter_expert(const W4a16GemmParams& p, const int* prefix) {
    row0 = p.expert_offsets[e];
    n_e = p.expert_offsets[e + 1] - row0;
    tiles = (n_e + kTokensPerTile - 1) / kTokensPerTile;
    end = prefix[e + 1];
  }
  // Position on unit `unit` (< prefix[experts]).
  FP4MOE_UNITS_HD void seek(const W4a16GemmParams& p, const int* prefix, int unit) {
    u = unit;
    e = find_expert(prefix, p.num_experts, unit);
    enter_expert(p, prefix);
    const int local = unit - prefix[e];
    rb = local / tiles;
    tt = local - rb * tiles;
  }
  // The next unit; past the last one (prefix[experts]) the cursor only counts.
  FP4MOE_UNITS_HD void next(const W4a16GemmParams& p, const int* prefix) {
    ++u;
    if (u < end) {
      if (++tt == tiles) {
        tt = 0;
        ++rb;
      }
    } else if (u < prefix[p.num_experts]) {
      do ++e; while (prefix[e + 1] <= u);  // experts without tokens have no units
      enter_expert(p, prefix);
      tt = rb = 0;
    }
  }
  FP4MOE_UNITS_HD Unit unit() const {
    const int left = n_e - tt * kTokensPerTile;  // the expert's tokens from this tile on
    return Unit{e, rb, row0 + tt * kTokensPerTile, left < kTokensPerTile ? left : kTokensPerTile};
  }
};

}  // namespace fp4moe::kernels::w4a16
