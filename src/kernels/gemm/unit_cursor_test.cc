// The decode family's unit cursor against the closed form it replaced (a binary search for the
// expert, then a division for the row block and token tile), on the CPU: every start unit of
// a range, walked to the end, over expert counts with empty experts, a single busy expert and
// partial last token tiles.
#include "kernels/gemm/unit_cursor.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace fp4moe::kernels::w4a16 {
namespace {

struct Layout {
  std::vector<int> offsets;  // [experts + 1]: permuted rows of each expert
  std::vector<int> prefix;   // [experts + 1]: units of each expert
};

Layout layout_for(const std::vector<int>& tokens, int tokens_per_tile, int row_blocks) {
  Layout l;
  l.offsets.push_back(0);
  l.prefix.push_back(0);
  for (int n : tokens) {
    l.offsets.push_back(l.offsets.back() + n);
    l.prefix.push_back(l.prefix.back() + (n + tokens_per_tile - 1) / tokens_per_tile * row_blocks);
  }
  return l;
}

// The closed form: expert by linear search, row block outer, token tile inner.
Unit closed_form(const Layout& l, int u, int tokens_per_tile) {
  int e = 0;
  while (l.prefix[e + 1] <= u) ++e;
  const int n = l.offsets[e + 1] - l.offsets[e];
  const int tiles = (n + tokens_per_tile - 1) / tokens_per_tile;
  const int local = u - l.prefix[e], tt = local % tiles;
  return Unit{e, local / tiles, l.offsets[e] + tt * tokens_per_tile, std::min(tokens_per_tile, n - tt * tokens_per_tile)};
}

template <int kTile>
void check_every_walk(const std::vector<int>& tokens, int row_blocks) {
  const Layout l = layout_for(tokens, kTile, row_blocks);
  W4a16GemmParams p;
  p.num_experts = static_cast<int>(tokens.size());
  p.expert_offsets = l.offsets.data();
  const int units = l.prefix.back();
  for (int start = 0; start < units; ++start) {
    UnitCursor<kTile> c;
    c.seek(p, l.prefix.data(), start);
    for (int u = start; u < units; ++u) {
      const Unit got = c.unit(), want = closed_form(l, u, kTile);
      ASSERT_EQ(c.u, u);
      ASSERT_EQ(got.e, want.e) << "unit " << u << " from " << start;
      ASSERT_EQ(got.rb, want.rb) << "unit " << u << " from " << start;
      ASSERT_EQ(got.tok0, want.tok0) << "unit " << u << " from " << start;
      ASSERT_EQ(got.ntok, want.ntok) << "unit " << u << " from " << start;
      ASSERT_GT(got.ntok, 0);
      c.next(p, l.prefix.data());
    }
    EXPECT_EQ(c.u, units);  // past the last unit it only counts (no expert past the table)
    EXPECT_LT(c.e, p.num_experts);
  }
}

TEST(UnitCursor, WalksLikeTheClosedForm) {
  // Empty experts first, between and last; partial tiles; one token; exact multiples.
  check_every_walk<8>({0, 3, 0, 0, 8, 17, 1, 0}, 3);
  check_every_walk<16>({0, 3, 0, 0, 8, 17, 1, 0}, 2);
  check_every_walk<8>({0, 0, 40, 0}, 4);  // all tokens on one expert
  check_every_walk<64>({65, 0, 64, 1}, 1);
}

TEST(UnitCursor, WalksRandomLayouts) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int> tokens(1 + rng() % 40);
    for (int& n : tokens) n = rng() % 3 == 0 ? 0 : static_cast<int>(rng() % 20);
    tokens[rng() % tokens.size()] += 1;  // at least one unit
    check_every_walk<8>(tokens, 1 + static_cast<int>(rng() % 5));
    check_every_walk<16>(tokens, 1 + static_cast<int>(rng() % 5));
  }
}

}  // namespace
}  // namespace fp4moe::kernels::w4a16
