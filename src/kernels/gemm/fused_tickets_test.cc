// The fused family's tickets on the CPU (fused_tickets.h): every ticket of a launch decoded for
// each compiled shape over glm5's, glm5-tp8's and odd layer sizes, with and without a shared
// expert, for every count of active groups up to 9.
#include "kernels/gemm/fused_tickets.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/gemm/fused_shapes.h"

namespace fp4moe::kernels {
namespace {

struct LayerSize {
  const char* name;
  int hidden, intermediate;
};

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// What one launch's tickets say, and what each invariant of the kernel needs of them.
void check_tickets(const FusedShape& shape, const LayerSize& size, int A, bool shared) {
  const std::string where = std::string(size.name) + " rows " + std::to_string(shape.rows) + " k " +
                            std::to_string(shape.k) + " A " + std::to_string(A) + (shared ? " shared" : "");
  // FC1: 2 I rows (gate and up interleaved) over K = H; FC2: H rows over K = I.
  const int rowtiles1 = ceil_div(2 * size.intermediate, 16), kgroups1 = ceil_div(size.hidden, 256);
  const int rowtiles2 = ceil_div(size.hidden, 16), kgroups2 = ceil_div(size.intermediate, 256);
  const FusedGrid G = fused_grid(shape.rows, shape.k / 256, rowtiles1, kgroups1, rowtiles2, kgroups2);
  const int first_narrow = fused_fc2_first_narrow(A);

  // Per (GEMM, group, row block): how often each K group is covered, the K chunks its items
  // store, the chunk count its items carry.
  struct Tile {
    std::vector<int> covered;
    std::set<int> chunks;
    int nkc = -1;
  };
  std::map<std::tuple<int, int, int>, Tile> tiles;
  std::vector<int> finalize;
  int last_kind = fused::kItemFc1, n1s = 0;
  for (int t = 0;; ++t) {
    fused::Item it = fused::decode_ticket(t, A, shared, G);
    ASSERT_GE(it.kind, last_kind) << where << " ticket " << t << ": FC1, FC2, finalize, end in order";
    last_kind = it.kind;
    if (it.kind == fused::kItemEnd) break;
    if (it.kind == fused::kItemFinalize) {
      finalize.push_back(it.rb);
      continue;
    }
    const bool fc1 = it.kind == fused::kItemFc1;
    const int kgroups = fc1 ? kgroups1 : kgroups2;
    ASSERT_TRUE(it.a >= 0 && it.a < A) << where << " ticket " << t;
    ASSERT_TRUE(it.rb >= 0 && it.rb < (fc1 ? G.rb1 : G.rb2)) << where << " ticket " << t;
    fused::set_item_kgroups(it, A, shared, G, kgroups);
    ASSERT_TRUE(it.nkg >= 1 && it.kg0 >= 0 && it.kg0 + it.nkg <= kgroups) << where << " ticket " << t;
    // No item holds more K groups than the tactic's tile_k.
    EXPECT_LE(it.nkg, G.kg1) << where << " ticket " << t;
    if (fc1 && shared && it.a == 0) {
      // The shared expert's FC1 items come first, and mean the same before the routing is known.
      EXPECT_EQ(t, n1s++) << where;
      const fused::Item before = fused::decode_ticket(t, -1, shared, G);
      EXPECT_TRUE(before.kind == it.kind && before.a == 0 && before.rb == it.rb && before.kc == it.kc &&
                  before.nkc == it.nkc)
          << where << " ticket " << t << " decoded before the routing";
    }
    // The partial tile's K chunk fits the workspace: FC1's [a][rb][fused_fc1_part_chunks], FC2's [a][kc2].
    EXPECT_LT(it.kc, fc1 ? fused_fc1_part_chunks(G) : G.kc2) << where << " ticket " << t;
    Tile& tile = tiles[std::make_tuple(it.kind, it.a, it.rb)];
    tile.covered.resize(kgroups);
    for (int kg = it.kg0; kg < it.kg0 + it.nkg; ++kg) ++tile.covered[kg];
    EXPECT_TRUE(tile.chunks.insert(it.kc).second) << where << " ticket " << t << ": a K chunk stored twice";
    if (tile.nkc >= 0) {
      EXPECT_EQ(tile.nkc, it.nkc) << where << " ticket " << t;
    }
    tile.nkc = it.nkc;
  }

  for (int kind : {fused::kItemFc1, fused::kItemFc2}) {
    const bool fc1 = kind == fused::kItemFc1;
    for (int a = 0; a < A; ++a)
      for (int rb = 0; rb < (fc1 ? G.rb1 : G.rb2); ++rb) {
        const std::string at = where + (fc1 ? " FC1" : " FC2") + " a " + std::to_string(a) + " rb " + std::to_string(rb);
        const auto found = tiles.find(std::make_tuple(kind, a, rb));
        ASSERT_TRUE(found != tiles.end()) << at << ": no item";
        const Tile& tile = found->second;
        for (int kg = 0; kg < static_cast<int>(tile.covered.size()); ++kg)
          EXPECT_EQ(tile.covered[kg], 1) << at << " K group " << kg;
        // An (a, rb)'s items number its nkc: FC1's last arrival is the nkc-th.
        EXPECT_EQ(static_cast<int>(tile.chunks.size()), tile.nkc) << at;
        if (!fc1) {
          // The finalize reads exactly the half chunks the group's items stored.
          std::set<int> read;
          for (int kc = 0; kc < G.kc2; kc += fused::fc2_chunk_step(a, first_narrow)) read.insert(kc);
          EXPECT_EQ(read, tile.chunks) << at;
          // Wide groups take whole chunks, the last kFusedFc2NarrowGroups half ones.
          EXPECT_EQ(tile.nkc, a < first_narrow ? G.kc2w : G.kc2) << at;
        }
      }
  }
  // What fc2_done of a row block counts to before its finalize items run.
  for (int rb = 0; rb < G.rb2; ++rb) {
    int items = 0;
    for (int a = 0; a < A; ++a) items += static_cast<int>(tiles[std::make_tuple(fused::kItemFc2, a, rb)].chunks.size());
    EXPECT_EQ(items, fused_fc2_items_per_rb(G, A)) << where << " FC2 rb " << rb;
  }
  // One finalize item per kFusedFinalizeRows output rows, in order, over every row.
  ASSERT_EQ(static_cast<int>(finalize.size()), G.fin) << where;
  for (int i = 0; i < G.fin; ++i) EXPECT_EQ(finalize[i], i) << where;
  EXPECT_GE(G.fin * kFusedFinalizeRows, size.hidden) << where;
}

TEST(FusedTickets, CoverEveryKGroupOnceAndTheFinalizeReadsWhatFc2Stores) {
  // glm5, glm5-tp8 (I / 8), and sizes whose K ends inside a K group or an item, with FC2's K of
  // 5 K groups (an odd count of half chunks at k1024), and one K group.
  const LayerSize sizes[] = {{"glm5", 6144, 2048}, {"glm5-tp8", 6144, 256}, {"chunks", 1552, 528},
                             {"odd", 528, 1104},   {"one K group", 256, 256}, {"wide", 1040, 1024}};
  for (const FusedShape& shape : kFusedShapes)
    for (const LayerSize& size : sizes)
      for (bool shared : {true, false})
        for (int A = 1; A <= 9; ++A) check_tickets(shape, size, A, shared);
}

TEST(FusedTickets, Glm5AtOneTokenHasTheItemCountsTheDocsGive) {
  // glm5 T = 1 on m128n8k1024: the shared expert and 8 routed experts; 384 shared FC1 half items,
  // 8 x 192 routed FC1 items, FC2 8 x 48 x 2 whole items and 48 x 4 half ones, 384 finalize items.
  const FusedGrid G = fused_grid(128, 4, 256, 24, 384, 8);
  int counts[4] = {0, 0, 0, 0};
  for (int t = 0;; ++t) {
    const fused::Item it = fused::decode_ticket(t, 9, true, G);
    ++counts[it.kind];
    if (it.kind == fused::kItemEnd) break;
  }
  EXPECT_EQ(counts[fused::kItemFc1], 384 + 8 * 192);
  EXPECT_EQ(counts[fused::kItemFc2], 8 * 48 * 2 + 48 * 4);
  EXPECT_EQ(counts[fused::kItemFinalize], 384);
  EXPECT_EQ(fused_fc2_items_per_rb(G, 9), 8 * 2 + 4);
}

}  // namespace
}  // namespace fp4moe::kernels
