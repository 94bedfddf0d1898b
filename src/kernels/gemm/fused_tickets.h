// fused_tickets.h - the fused family's work items (sm90_w4a16_fused_layer.cuh): what each ticket
// of the launch's counter stands for, the K groups of an item, and the finalize's step over an
// FC2 group's K chunks. Host and device: fused_tickets_test.cc walks every ticket on the CPU and
// checks that the items cover every K group of every (group, row block) once, that an item's
// counts are the ones its waits and arrivals use, and that the finalize reads exactly the FC2
// chunks the items store.
#pragma once

#include "kernels/gemm/fused_params.h"

#if defined(__CUDACC__)
#define FP4MOE_TICKETS_HD __host__ __device__ __forceinline__
#else
#define FP4MOE_TICKETS_HD inline
#endif

namespace fp4moe::kernels::fused {

enum : int { kItemFc1 = 0, kItemFc2 = 1, kItemFinalize = 2, kItemEnd = 3 };

// One entry of the item ring (kFusedItemBytes).
struct Item {
  int kind;  // kItem*
  int a;     // the group's index among the batch's active groups
  int e;     // the group
  int rb;    // row block (FC1, FC2); finalize: its first row / kFusedFinalizeRows
  int kc;    // K chunk (a wide FC2 item: its first half chunk)
  int kg0;   // its first K group
  int nkg;   // its K groups
  int nkc;   // K chunks of its (group, row block): the items that store its partial tiles
};
static_assert(sizeof(Item) == kFusedItemBytes, "item ring entries are kFusedItemBytes");

// Ticket t -> item. The tickets are, in order: the shared expert's FC1 items (group a = 0; half
// K chunks, no routing needed), the routed experts' FC1 items (a ascending; row block, then K
// chunk innermost, so that a tile's chunks are drawn together), FC2's (a, row block, K chunk:
// whole chunks, then the last kFusedFc2NarrowGroups groups' half ones), then the finalize
// items. A < 0: the routing is not known yet (only t < n1s may be decoded).
FP4MOE_TICKETS_HD Item decode_ticket(int t, int A, bool shared, const FusedGrid& G) {
  Item it{};
  const int n1s = shared ? G.rb1 * G.kc1s : 0;
  const int wide = fused_fc2_first_narrow(A);  // FC2: groups a < wide take whole K chunks
  const int n1 = n1s + (A - (shared ? 1 : 0)) * G.rb1 * G.kc1, n2w = wide * G.rb2 * G.kc2w;
  const int n2 = n2w + (A - wide) * G.rb2 * G.kc2;
  if (t < n1s) {
    it.kind = kItemFc1;
    it.a = 0;
    it.rb = t / G.kc1s;
    it.kc = t - it.rb * G.kc1s;
    it.nkc = G.kc1s;
  } else if (t < n1) {
    it.kind = kItemFc1;
    const int u = t - n1s, per = G.rb1 * G.kc1;
    it.a = (shared ? 1 : 0) + u / per;
    const int r = u - (u / per) * per;
    it.rb = r / G.kc1;
    it.kc = r - it.rb * G.kc1;
    it.nkc = G.kc1;
  } else if (t < n1 + n2w) {
    it.kind = kItemFc2;  // a wide item: kc is its first half chunk (even)
    const int u = t - n1, per = G.rb2 * G.kc2w;
    it.a = u / per;
    const int r = u - it.a * per;
    it.rb = r / G.kc2w;
    it.kc = 2 * (r - it.rb * G.kc2w);
    it.nkc = G.kc2w;
  } else if (t < n1 + n2) {
    it.kind = kItemFc2;
    const int u = t - n1 - n2w, per = G.rb2 * G.kc2;
    it.a = wide + u / per;
    const int r = u - (u / per) * per;
    it.rb = r / G.kc2;
    it.kc = r - it.rb * G.kc2;
    it.nkc = G.kc2;
  } else if (t < n1 + n2 + G.fin) {
    it.kind = kItemFinalize;
    it.rb = t - n1 - n2;
  } else {
    it.kind = kItemEnd;
  }
  return it;
}

// A GEMM item's K groups [kg0, kg0 + nkg) of its GEMM's `kgroups`: a K chunk index counts kg1
// K groups in a routed expert's FC1, kg1s in the shared expert's, kg2 (half chunks) in FC2,
// where a wide item spans two from its even one; the last chunk ends at K.
FP4MOE_TICKETS_HD void set_item_kgroups(Item& it, int A, bool shared, const FusedGrid& G, int kgroups) {
  const int step = it.kind == kItemFc2 ? G.kg2 : (shared && it.a == 0) ? G.kg1s : G.kg1;
  const int per = it.kind == kItemFc2 && it.a < fused_fc2_first_narrow(A) ? 2 * step : step;
  it.kg0 = it.kc * step;
  it.nkg = per < kgroups - it.kg0 ? per : kgroups - it.kg0;
}

// The finalize's step between the FC2 half chunks it sums of active group a: a wide group's items
// store their partial tiles at their even half chunks only.
FP4MOE_TICKETS_HD int fc2_chunk_step(int a, int first_narrow) { return a < first_narrow ? 2 : 1; }

}  // namespace fp4moe::kernels::fused
