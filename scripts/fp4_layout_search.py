#!/usr/bin/env python3
"""How few bit operations can turn prepacked E2M1 words into bf16x2 A-fragment registers?

The dequantization (src/kernels/common/dequant_nvfp4.cuh) ANDs a 32-bit view of the weights
with the mask M = 0x81C081C0: bits P = {6, 7, 8, 15, 22, 23, 24, 31} hold one value's
(m, e0, e1, s) in each bf16 half. A prepack layout decides which bits of the packed words land
in which register. This script bounds the instructions that any such layout needs, in this
model of the SASS:

- a view of the packed bits costs one instruction (SHF / SHF.*.W funnel shift or rotation, or
  PRMT byte permute), except a packed word itself (free);
- a register made of one view costs one LOP3 (the mask); a register whose bits come from k
  views ("pieces") costs k LOP3 ((x & A) | t takes one LOP3 per further piece).

Cost = pieces + views that are not a packed word; pieces >= registers and pieces >= views. A
view may feed several registers on disjoint slots, but a register of one piece takes all eight
of its view's slots, so only registers of two or more pieces can share a view; in the cases
below 17 instructions that either merges two pieces into one or makes every view feed all eight
slots, i.e. a tiling.

One word (8 values, 4 registers): four views tiling the word would cost 4 + 3 = 7; none exist,
so a layout needs >= 5 views and 5 pieces: 9, which the kernels' layout reaches.
Two words (16 values, 8 registers, views of the 64-bit pair): eight tiling views (14 or 15) do
not exist either; 16 needs nine views with both words among them, seven whole and two halves of
one register, which the three cases below rule out; and a layout of 17 exists (printed). So two
words laid out together save at most half an instruction per 8 values (9 -> 8.5).

Runs in seconds; standard library only. Exit status 0 when every bound holds.
"""
import itertools
import sys

P = [6, 7, 8, 15, 22, 23, 24, 31]


def views(nbits):
    """Every distinct view of an nbits-wide packed group: slot p of the register reads packed bit
    view[p]. Rotations (funnel shifts) and byte permutes; the packed words themselves are free."""
    out = {}

    def add(bits, cost, name):
        if len(set(bits)) == len(bits):
            key = tuple(bits)
            if key not in out or out[key][0] > cost:
                out[key] = (cost, name)

    for o in range(nbits):
        add([(p + o) % nbits for p in P], 0 if o % 32 == 0 else 1, f"rot{o}")
    for sel in itertools.product(range(nbits // 8), repeat=4):
        add([8 * sel[p // 8] + p % 8 for p in P], 1, "prmt" + "".join(map(str, sel)))
    return [(sum(1 << b for b in bits), bits, cost, name) for bits, (cost, name) in out.items()]


def exact_covers(nbits, cands, start, k, leftover):
    """Sets of k whole views from cands, disjoint from `start` and each other, that leave exactly
    `leftover` bits of the group uncovered. Yields (uncovered mask, names)."""
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
                    chosen.append(v[3])
                    yield from rec(cov | v[0], rest, nrest)
                    chosen.pop()
        if nrest < leftover:
            yield from rec(cov, rest | 1 << b, nrest + 1)

    yield from rec(start, 0, 0)


def two_piece(rest, va, vb):
    """The slot split X (slots from vb) for which va and vb together make exactly the bits
    `rest`, or None."""
    for x in range(1, 255):
        img = 0
        for s in range(8):
            bit = (vb if x >> s & 1 else va)[1][s]
            if not rest >> bit & 1 or img >> bit & 1:
                break
            img |= 1 << bit
        else:
            if img == rest:
                return x
    return None


def main():
    ok = True
    # One word.
    v32 = views(32)
    tilings = list(exact_covers(32, v32, 0, 4, 0))
    print(f"one word: {len(v32)} views, {len(tilings)} tilings by 4 views -> >= 9 instructions per 8 values")
    ok &= not tilings

    # Two words.
    v64 = views(64)
    tilings = list(exact_covers(64, v64, 0, 8, 0))
    print(f"two words: {len(v64)} views, {len(tilings)} tilings by 8 views -> >= 16 per 16 values")
    ok &= not tilings
    w0 = next(v for v in v64 if v[3] == "rot0")
    w1 = next(v for v in v64 if v[3] == "rot32")
    others = [v for v in v64 if v[3] not in ("rot0", "rot32")]
    found16 = 0
    # Both words halves of one register, seven whole views around it.
    for x in range(1, 255):
        half = sum(1 << (w1[1][s] if x >> s & 1 else w0[1][s]) for s in range(8))
        found16 += sum(1 for _ in exact_covers(64, others, half, 7, 0))
    # One word whole, the other a half (with one more view) of the register the 8 bits left make.
    for whole, half_word in ((w0, w1), (w1, w0)):
        for rest, names in exact_covers(64, others, whole[0], 6, 8):
            found16 += any(two_piece(rest, half_word, vb) for vb in others if vb[3] not in names)
    # Both words whole, five more whole views, two more views making the last register.
    for rest, names in exact_covers(64, others, w0[0] | w1[0], 5, 8):
        cands = [v for v in others if v[3] not in names and v[0] & rest]
        found16 += any(two_piece(rest, va, vb) for va in cands for vb in cands if va is not vb)
    print(f"two words: {found16} layouts of 16 instructions -> >= 17 per 16 values")
    ok &= found16 == 0

    # A layout of 17: seven whole views (7 SHF/PRMT + 7 LOP3), the last register from word 1
    # and one byte permute (1 PRMT + 2 LOP3).
    whole = ["rot42", "rot36", "rot46", "prmt5173", "rot4", "rot10", "rot14"]
    byname = {v[3]: v for v in v64}
    cov = 0
    for name in whole:
        assert not cov & byname[name][0]
        cov |= byname[name][0]
    rest = ~cov & (1 << 64) - 1
    x = two_piece(rest, w1, byname["prmt1032"])
    print(f"two words: {' '.join(whole)} + (rot32 | prmt1032 on slots {x:08b}): 17 instructions")
    ok &= x is not None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
