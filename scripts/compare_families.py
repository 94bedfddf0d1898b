#!/usr/bin/env python3
"""The prefill issue's "no cliff" check: the dispatched layer against each family's best tactic.

Usage: compare_families.py RUN.json [RUN.json ...]
Each file is an `fp4moe bench --json` run (schema fp4moe-bench/1): dispatched (the layer's own
plan) or forced (plan "fixed": one tactic pair, `--fc1 X:swiglu --fc2 X:finalize`). Give every
run the same number of repeats, interleaved: the layer's time in a CUDA graph differs by up to
~10% between processes with the same kernels (bimodal at glm5 T = 1024 and 2048), so each
(T, plan) takes its fastest repeat. A forced run of exactly the tactic pair the layer dispatched
at that T is a repeat of the dispatched layer itself - the same kernels, launched the same way -
and is pooled with its repeats (marked "pooled"): otherwise the check would compare a
configuration with itself and call the spread of its own samples a cliff. For every token count
the table gives the fastest forced run of each family, the dispatched layer's ratio to the
faster of the two, and the same ratio of the stage sums in plain launches (routing + FC1 + FC2,
each the fastest repeat; steadier than the graph's time, shown as a cross-check); exit status 1
when the graph ratio exceeds 1.05 anywhere (slower than a family alone by over 5%).
"""
import json
import sys


def rows(path):
    with open(path) as f:
        d = json.load(f)
    # GPU rows only: a GPU-less bench times the CPU reference, which has no families to compare.
    return {r["tokens"]: r["ours"] for r in d["rows"] if r.get("ours", {}).get("path") == "gpu"}


def stage_sum(o):
    s = o.get("stages_us") or {}
    return sum(s.get(k, 0.0) for k in ("routing", "fc1", "fc2")) or None


def pair(o):
    return (o["fc1_tactic"], o["fc2_tactic"])


def faster(a, b):
    """The faster of two (graph us, stage-sum us) samples, field by field."""
    if a is None:
        return b
    sa = [x for x in (a[1], b[1]) if x is not None]
    return (min(a[0], b[0]), min(sa) if sa else None)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    runs = [rows(path) for path in argv[1:]]
    dispatched = {}  # tokens -> (graph us, stage-sum us), fastest repeats
    dispatched_pair = {}  # tokens -> the dispatched tactic pair
    for r in runs:
        for t, o in r.items():
            if o.get("plan") != "fixed":
                dispatched[t] = faster(dispatched.get(t), (o["median_us"], stage_sum(o)))
                dispatched_pair[t] = pair(o)
    best = {}  # (tokens, family) -> (graph us, stage-sum us), fastest repeats
    tile_of = {}  # (tokens, family) -> the tile of its fastest graph repeat
    pooled = set()
    for r in runs:
        for t, o in r.items():
            if o.get("plan") != "fixed":
                continue
            sample = (o["median_us"], stage_sum(o))
            if dispatched_pair.get(t) == pair(o):
                dispatched[t] = faster(dispatched[t], sample)
                pooled.add(t)
            key = (t, o["fc1_tactic"].split(":")[0])
            if key not in best or sample[0] < best[key][0]:
                tile_of[key] = ":".join(o["fc1_tactic"].split(":")[1:4])
            best[key] = faster(best.get(key), sample)
    families = sorted({f for _, f in best})
    print("| T | dispatched µs (fc1) | " + " | ".join(f"best {f} µs (tile)" for f in families) +
          " | dispatched / best | stage sums: dispatched / best |")
    print("|---|---|" + "---|" * len(families) + "---|---|")
    cliff = False
    for t in sorted(dispatched):
        cands = [best[(t, f)] for f in families if (t, f) in best]
        if not cands:
            continue
        ratio = dispatched[t][0] / min(c[0] for c in cands)
        sums = [c[1] for c in cands if c[1] is not None]
        stage_ratio = (f"{dispatched[t][1] / min(sums):.3f}" if dispatched[t][1] is not None and sums else "-")
        cliff |= ratio > 1.05
        cells = [f"{best[(t, f)][0]:.1f} ({tile_of[(t, f)]})" if (t, f) in best else "-" for f in families]
        fc1 = ":".join(dispatched_pair[t][0].split(":")[:2])
        note = " pooled" if t in pooled else ""
        print(f"| {t} | {dispatched[t][0]:.1f} ({fc1}){note} | " + " | ".join(cells) +
              f" | {ratio:.3f}{' CLIFF' if ratio > 1.05 else ''} | {stage_ratio} |")
    return 1 if cliff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
