#!/usr/bin/env python3
"""How few instructions can turn prepacked E2M1 words into bf16x2 A-fragment registers?

The dequantization (src/kernels/common/dequant_nvfp4.cuh) ANDs a 32-bit view of the weights
with the mask M = 0x81C081C0: bits P = {6, 7, 8, 15, 22, 23, 24, 31} hold one value's
(m, e0, e1, s) in each bf16 half. A prepack layout decides which bits of the packed words land
in which register. This script bounds the instructions that any such layout needs, in this
model of the SASS:

- a view of the packed bits costs one instruction (a shift or rotation of one word, a funnel
  shift across two, a PRMT byte permute), except a packed word itself (free);
- a register made of one view costs one LOP3 (the mask); a register whose bits come from k
  views ("pieces") costs k LOP3 ((x & A) | t takes one LOP3 per further piece).

Cost = pieces + views that are not a packed word; pieces >= registers and pieces >= views. A
view may feed several registers on disjoint slots, but a register of one piece takes all eight
of its view's slots, so only registers of two or more pieces can share a view; below the costs
searched here that either merges two pieces into one or makes every view feed all eight slots,
i.e. a tiling.

One word (8 values, 4 registers): four views tiling the word would cost 4 + 3 = 7; none exist,
so a layout needs >= 5 views and 5 pieces: 9 (the kernels' layout before the pair: 5 LOP3 and 2
SHF on the ALU pipe, 2 IMAD.SHL on the FMA pipe). Every layout of 9 has at least two views that
are not a left shift IMAD.SHL can do, so none puts fewer than 7 on the ALU pipe.
Two words (16 values, 8 registers): eight views tiling the pair (14 to 16) do not exist either;
16 needs nine views with both words among them, seven whole and two halves of one register.
The three cases below enumerate all such layouts (512). At best three of a layout's views are
left shifts of one word that no used slot wraps (IMAD.SHL) and four are not: 13 ALU-pipe
instructions and 3 IMAD.SHL per pair, against two words of the single-word layout's 14 and 4.
The kernels use such a layout (the one printed; dequant_nvfp4.cuh); tools/dequant_overlap.cu
times it against the word layout and against a pair whose views are all ALU-pipe ones.

Runs in seconds; standard library only. Exit status 0 when every claim above holds.
"""
import itertools
import sys
from collections import Counter

P = [6, 7, 8, 15, 22, 23, 24, 31]


def views(nbits):
    """Every distinct view of an nbits-wide packed group (one word or a pair): slot p of the
    register reads packed bit view[p]. Returns (mask, bits, name)."""
    out = {}

    def add(bits, name):
        if len(set(bits)) == len(bits):
            out.setdefault(tuple(bits), name)

    for o in range(nbits):  # rotations of the group (funnel shifts for a pair); o = 0, 32: a word
        add([(p + o) % nbits for p in P], f"rot{o}")
    for w in range(nbits // 32):  # rotations of one word of the pair, left by k
        for k in range(1, 32):
            add([32 * w + (p - k) % 32 for p in P], f"w{w}rotl{k}")
    for sel in itertools.product(range(nbits // 8), repeat=4):
        add([8 * sel[p // 8] + p % 8 for p in P], "prmt" + "".join(map(str, sel)))
    return [(sum(1 << b for b in bits), bits, name) for bits, name in out.items()]


def shift_of(view, slots):
    """d when the used slots of a view read one word shifted (bit P[s] + d of it: d < 0 a left
    shift, IMAD.SHL; d > 0 a right shift, SHF.R; 0 the word itself), else None (a rotation that
    wraps, a funnel shift across the words, a byte permute: the ALU pipe)."""
    bits = [view[1][s] for s in slots]
    if len({b // 32 for b in bits}) != 1:
        return None
    ds = {b % 32 - P[s] for b, s in zip(bits, slots)}
    return ds.pop() if len(ds) == 1 else None


def on_fma_pipe(view, slots):
    d = shift_of(view, slots)
    return d is not None and d < 0


def slots_of(x, bit):
    return [s for s in range(8) if (x >> s & 1) == bit]


def alu_views(layout):
    """The views of a layout (whole views, (view, slots) pieces) that are neither a packed word
    nor a left shift IMAD.SHL can do."""
    whole, pieces = layout
    return sum(shift_of(v, range(8)) != 0 and not on_fma_pipe(v, range(8)) for v in whole) + sum(
        shift_of(v, s) != 0 and not on_fma_pipe(v, s) for v, s in pieces)


def exact_covers(nbits, cands, start, k, leftover):
    """Sets of k whole views from cands, disjoint from `start` and each other, that leave exactly
    `leftover` bits of the group uncovered. Yields (uncovered mask, views)."""
    full = (1 << nbits) - 1
    bybit = [[v for v in cands if v[0] >> b & 1] for b in range(nbits)]
    chosen = []

    def rec(cov, rest, nrest):
        if cov | rest == full:
            if len(chosen) == k and nrest == leftover:
                yield rest, list(chosen)
            return
        inv = ~(cov | rest) & full
        b = (inv & -inv).bit_length() - 1
        if len(chosen) < k:
            for v in bybit[b]:
                if not v[0] & (cov | rest):
                    chosen.append(v)
                    yield from rec(cov | v[0], rest, nrest)
                    chosen.pop()
        if nrest < leftover:
            yield from rec(cov, rest | 1 << b, nrest + 1)

    yield from rec(start, 0, 0)


def two_piece(rest, va, vb):
    """Every slot split x (slots from vb; the others from va) for which va and vb together make
    exactly the bits `rest`."""
    for x in range(1, 255):
        img = 0
        for s in range(8):
            bit = (vb if x >> s & 1 else va)[1][s]
            if not rest >> bit & 1 or img >> bit & 1:
                break
            img |= 1 << bit
        else:
            if img == rest:
                yield x


def main():
    ok = True
    v32 = views(32)
    tilings = list(exact_covers(32, v32, 0, 4, 0))
    print(f"one word: {len(v32)} views, {len(tilings)} tilings by 4 views -> >= 9 instructions per 8 values")
    ok &= not tilings
    # Layouts of 9: five views, the word itself among them, three whole and two halves of one register.
    w = next(v for v in v32 if v[2] == "rot0")
    rest32 = [v for v in v32 if v is not w]
    nine = []
    for rest, whole in exact_covers(32, rest32, w[0], 2, 8):  # the word whole
        for va in rest32:
            for vb in rest32:
                if va is not vb and va not in whole and vb not in whole and va[0] & rest and vb[0] & rest:
                    nine += [([w] + whole, [(va, slots_of(x, 0)), (vb, slots_of(x, 1))]) for x in two_piece(rest, va, vb)]
    for rest, whole in exact_covers(32, rest32, 0, 3, 8):  # the word a half
        for vb in rest32:
            if vb not in whole:
                nine += [(whole, [(w, slots_of(x, 0)), (vb, slots_of(x, 1))]) for x in two_piece(rest, w, vb)]
    fewest = min(alu_views(l) for l in nine)
    print(f"one word: {len(nine)} layouts of 9, at least {fewest} ALU-pipe views in each")
    ok &= fewest == 2

    v64 = views(64)
    tilings = list(exact_covers(64, v64, 0, 8, 0))
    print(f"two words: {len(v64)} views, {len(tilings)} tilings by 8 views -> >= 16 per 16 values")
    ok &= not tilings
    w0 = next(v for v in v64 if v[2] == "rot0")
    w1 = next(v for v in v64 if v[2] == "rot32")
    others = [v for v in v64 if v[2] not in ("rot0", "rot32")]
    layouts = []  # (whole views, (view, slots) pieces)

    def slots(x, bit):
        return [s for s in range(8) if (x >> s & 1) == bit]

    # Both words halves of one register, seven whole views around it.
    for x in range(1, 255):
        half = sum(1 << (w1[1][s] if x >> s & 1 else w0[1][s]) for s in range(8))
        for _, whole in exact_covers(64, others, half, 7, 0):
            layouts.append((whole, [(w0, slots(x, 0)), (w1, slots(x, 1))]))
    # One word whole, the other a half (with one more view) of the register the 8 bits left make.
    for whole_word, half_word in ((w0, w1), (w1, w0)):
        for rest, whole in exact_covers(64, others, whole_word[0], 6, 8):
            for vb in others:
                if vb not in whole:
                    for x in two_piece(rest, half_word, vb):
                        layouts.append(([whole_word] + whole, [(half_word, slots(x, 0)), (vb, slots(x, 1))]))
    # Both words whole, five more whole views, two more views making the last register.
    for rest, whole in exact_covers(64, others, w0[0] | w1[0], 5, 8):
        cands = [v for v in others if v not in whole and v[0] & rest]
        for va in cands:
            for vb in cands:
                if va is not vb:
                    for x in two_piece(rest, va, vb):
                        layouts.append(([w0, w1] + whole, [(va, slots(x, 0)), (vb, slots(x, 1))]))
    alu = [alu_views(l) for l in layouts]
    print(f"two words: {len(layouts)} layouts of 16 instructions; ALU-pipe views: {sorted(Counter(alu).items())}")
    ok &= len(layouts) > 0 and min(alu) == 4
    if layouts:
        whole, pieces = layouts[alu.index(min(alu))]
        desc = " ".join(v[2] for v in whole)
        print(f"  fewest ALU-pipe views: {desc} + ({pieces[0][0][2]} on slots {pieces[0][1]} | {pieces[1][0][2]} on slots {pieces[1][1]})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
