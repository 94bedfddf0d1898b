#!/usr/bin/env python3
"""Reads the timeline a scratch build of the fused family writes (FP4MOE_FUSED_TRACE=1 at compile
time, FP4MOE_FUSED_TRACE_FILE at run time: the layer's last call, written when the layer goes) and
prints where the launch's time went: each CTA's start, routing and end, its items' entry, first
data and end, the weight bytes streamed per microsecond (each item's bytes spread evenly from its
first data to its end), and the hand-offs between CTAs: when each group's FC1 was complete
(fc1_done) against when its items' stores were out, how long the FC1 sums and arrivals took, and
how long the producers waited for an item's inputs.

  scripts/fused_trace.py TRACE.bin [--rows 128] [--bin-us 2]

Layout (src/kernels/gemm/fused_params.h): per CTA 4 * (2 + 3 * 64) uint64 words - a header of two
records [start, routed, end, consumer items] [epilogue items, producer items, 0, 0], then 64
records each for the consumers [code, entry, first data, end], the epilogue warp [code, stores
seen, arrival returned (bit 63: the last), done released] and the producer lane [code, decoded,
inputs acquired, ring slot free]; code = kind | a << 8 | rb << 16 | kc << 24 | nkg << 32 (nkg:
the item's K groups), stamps in %globaltimer nanoseconds. Kinds: 0 FC1, 1 FC2, 2 finalize.
"""
import argparse
import statistics
from collections import defaultdict

import numpy as np

ITEMS = 64  # records per table (kFusedTraceItems)
KINDS = {0: "FC1", 1: "FC2", 2: "finalize"}
LAST = 1 << 63


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--rows", type=int, default=128, help="the tactic's rows per item")
    ap.add_argument("--bin-us", type=float, default=2.0)
    a = ap.parse_args()
    raw = np.fromfile(a.trace, dtype=np.uint64).reshape(-1, 2 + 3 * ITEMS, 4)
    ctas = [c for c in raw if c[0, 0] != 0]
    t0 = min(int(c[0, 0]) for c in ctas)
    us = lambda ns: (int(ns) - t0) / 1000.0
    tile_bytes = a.rows // 16 * 2304  # a row block's weights and scales at one K group
    items = []
    for i, c in enumerate(ctas):
        for r in consumer_records(c):
            code = int(r[0])
            items.append(dict(cta=i, kind=code & 0xFF, a=(code >> 8) & 0xFF, rb=(code >> 16) & 0xFF,
                              kc=(code >> 24) & 0xFF, entry=us(r[1]), data=us(r[2]), end=us(r[3])))
            # The item's weight and scale bytes: its K groups as the kernel set them.
            items[-1]["bytes"] = tile_bytes * (code >> 32) if items[-1]["kind"] <= 1 else 0
    starts = [us(c[0, 0]) for c in ctas]
    routed = [us(c[0, 1]) - us(c[0, 0]) for c in ctas]
    # A CTA ends after its last item (the header's stamp can read a little early: the timer read
    # is not ordered after the CTA barrier before it).
    ends = [max([us(c[0, 2])] + [us(r[3]) for r in consumer_records(c)]) for c in ctas]
    span = max(ends)
    print(f"{len(ctas)} CTAs, {len(items)} items; launch span {span:.1f} us (first CTA start to last CTA end)")
    print(f"CTA starts {min(starts):.1f}-{max(starts):.1f} us; routing took {statistics.median(routed):.1f} us "
          f"(median, max {max(routed):.1f}); CTA ends {min(ends):.1f}-{max(ends):.1f} (median {statistics.median(ends):.1f})")
    for k, name in KINDS.items():
        its = [x for x in items if x["kind"] == k]
        if not its:
            continue
        dur = [x["end"] - x["data"] for x in its]
        wait = [x["data"] - x["entry"] for x in its]
        print(f"{name:8s}: {len(its):5d} items, first entry {min(x['entry'] for x in its):6.1f} us, last end "
              f"{max(x['end'] for x in its):6.1f} us; data->end median {statistics.median(dur):.2f} us, "
              f"entry->data median {statistics.median(wait):.2f} us (max {max(wait):.2f})")
    # Idle consumers: per CTA, the gaps between an item's end and the next item's first data.
    gaps = []
    for i in range(len(ctas)):
        mine = sorted((x for x in items if x["cta"] == i), key=lambda x: x["entry"])
        first = mine[0]["data"] if mine else None
        if first is not None:
            gaps.append(("to first data", first - starts[i]))
        for p, q in zip(mine, mine[1:]):
            gaps.append(("between items", q["data"] - p["end"]))
        if mine:
            gaps.append(("after last item", ends[i] - mine[-1]["end"]))
    for what in ("to first data", "between items", "after last item"):
        g = [v for w, v in gaps if w == what]
        if g:
            print(f"consumer gap {what:16s}: median {statistics.median(g):.2f} us, mean {sum(g) / len(g):.2f}, "
                  f"max {max(g):.2f} (n {len(g)})")
    # Weight bytes per time bin.
    nb = int(span / a.bin_us) + 1
    rate = np.zeros(nb)
    busy = np.zeros(nb)
    for x in items:
        if x["kind"] > 1 or x["end"] <= x["data"]:
            continue
        lo, hi = x["data"], x["end"]
        for b in range(int(lo / a.bin_us), min(nb, int(hi / a.bin_us) + 1)):
            s, e = max(lo, b * a.bin_us), min(hi, (b + 1) * a.bin_us)
            if e > s:
                rate[b] += x["bytes"] * (e - s) / (hi - lo)
                busy[b] += (e - s) / a.bin_us
    print(f"\n  time us   GB/s   items computing (of {len(ctas)} CTAs)")
    for b in range(nb):
        print(f"  {b * a.bin_us:7.1f} {rate[b] / (a.bin_us * 1e3):6.0f}   {busy[b]:6.1f}")
    total = sum(x["bytes"] for x in items if x["kind"] <= 1)
    print(f"\n{total / 1e6:.1f} MB of weight items over {span:.1f} us: {total / span / 1e3:.0f} GB/s")
    # Per phase: each kind's bytes over the span from its first item's data to its last item's end.
    for k, name in ((0, "FC1"), (1, "FC2")):
        its = [x for x in items if x["kind"] == k]
        if its:
            lo, hi = min(x["data"] for x in its), max(x["end"] for x in its)
            mb = sum(x["bytes"] for x in its)
            print(f"{name}: {mb / 1e6:.1f} MB from {lo:.1f} to {hi:.1f} us: {mb / (hi - lo) / 1e3:.0f} GB/s")
    handoffs(ctas, items, us)


def consumer_records(c):
    return c[2:2 + min(ITEMS, int(c[0, 3]))]


def handoffs(ctas, items, us):
    """Per group: its FC1 items' last stores against fc1_done complete (the last release of its
    row blocks' sums); the FC1 sums (last arrival to release) and arrivals; the producers' waits
    for an item's inputs (an FC2 item: its group's fc1_done; a finalize item: its row block's
    fc2_done)."""
    stores = defaultdict(float)
    for x in items:
        if x["kind"] == 0:
            stores[x["a"]] = max(stores[x["a"]], x["end"])
    released, arrival, fc1_sum, lag = defaultdict(float), [], [], []
    waits = defaultdict(list)
    for c in ctas:
        epi = c[2 + ITEMS:2 + ITEMS + min(ITEMS, int(c[1, 0]))]
        # The epilogue warp takes the CTA's items in the consumers' order: its lag behind them.
        for r, e in zip(consumer_records(c), epi):
            if int(r[0]) & 0xFF <= 1:
                lag.append(us(e[1]) - us(r[3]))
        for r in epi:
            code = int(r[0])
            if code & 0xFF != 0:
                continue
            a, seen = (code >> 8) & 0xFF, us(r[1])
            arrived = us(int(r[2]) & ~LAST) if int(r[2]) else None
            if arrived is not None:
                arrival.append(arrived - seen)
            if int(r[3]):
                released[a] = max(released[a], us(r[3]))
                if arrived is not None:
                    fc1_sum.append(us(r[3]) - arrived)
        for r in c[2 + 2 * ITEMS:2 + 2 * ITEMS + min(ITEMS, int(c[1, 1]))]:
            code = int(r[0])
            kind, a = code & 0xFF, (code >> 8) & 0xFF
            if kind in (1, 2):
                waits[(kind, a if kind == 1 else None)].append(us(r[2]) - us(r[1]))
    if not stores:
        return
    print("\nhand-offs: each group's FC1 stores out, its fc1_done complete, the producers' waits for it")
    for a in sorted(stores):
        w = waits.get((1, a), [])
        ws = f"FC2 items waited median {statistics.median(w):.2f} us, max {max(w):.2f} (n {len(w)})" if w else ""
        done = f"{released[a]:6.1f} (+{released[a] - stores[a]:4.1f})" if a in released else "     -        "
        print(f"  group {a:3d}: stores out {stores[a]:6.1f} us, fc1_done {done}; {ws}")
    if lag:
        print(f"epilogue warp's lag (an item's stores out to the warp taking them up): median "
              f"{statistics.median(lag):.2f} us, max {max(lag):.2f} (n {len(lag)})")
    if arrival:
        print(f"FC1 chunk arrivals (stores seen to the atomic's return): median {statistics.median(arrival):.2f} us, "
              f"max {max(arrival):.2f} (n {len(arrival)})")
    if fc1_sum:
        print(f"FC1 sums (last arrival to fc1_done released): median {statistics.median(fc1_sum):.2f} us, "
              f"max {max(fc1_sum):.2f} (n {len(fc1_sum)})")
    w = waits.get((2, None), [])
    if w:
        print(f"finalize items waited for fc2_done: median {statistics.median(w):.2f} us, max {max(w):.2f} (n {len(w)})")


if __name__ == "__main__":
    main()
