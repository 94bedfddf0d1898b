#!/usr/bin/env python3
"""The prefill issue's "no cliff" check: the dispatched layer against each family's best tactic.

Usage: compare_families.py RUN.json [RUN.json ...]
Each file is an `fp4moe bench --json` run (schema fp4moe-bench/1): dispatched (the layer's own
plan) or forced (plan "fixed": one tactic pair, `--fc1 X:swiglu --fc2 X:finalize`). Give every
run the same number of repeats, interleaved: the layer's time in a CUDA graph differs by up to
~5% between processes with the same kernels, so each (T, plan) takes its fastest repeat. For
every token count the table gives the fastest forced run of each family and the dispatched
layer's ratio to the faster of the two; exit status 1 when that ratio exceeds 1.05 anywhere
(slower than a family alone by over 5%).
"""
import json
import sys


def rows(path):
    with open(path) as f:
        d = json.load(f)
    return {r["tokens"]: r["ours"] for r in d["rows"] if "ours" in r}


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    dispatched = {}  # tokens -> the fastest dispatched repeat
    best = {}  # (tokens, family) -> (us, tactic)
    for path in argv[1:]:
        for t, o in rows(path).items():
            if o.get("plan") != "fixed":
                if t not in dispatched or o["median_us"] < dispatched[t]["median_us"]:
                    dispatched[t] = o
                continue
            family = o["fc1_tactic"].split(":")[0]
            if (t, family) not in best or o["median_us"] < best[(t, family)][0]:
                best[(t, family)] = (o["median_us"], ":".join(o["fc1_tactic"].split(":")[1:4]))
    families = sorted({f for _, f in best})
    print("| T | dispatched µs (fc1) | " + " | ".join(f"best {f} µs (tile)" for f in families) + " | dispatched / best |")
    print("|---|---|" + "---|" * len(families) + "---|")
    cliff = False
    for t in sorted(dispatched):
        cands = [best[(t, f)] for f in families if (t, f) in best]
        if not cands:
            continue
        ratio = dispatched[t]["median_us"] / min(c[0] for c in cands)
        cliff |= ratio > 1.05
        cells = [f"{best[(t, f)][0]:.1f} ({best[(t, f)][1]})" if (t, f) in best else "-" for f in families]
        fc1 = ":".join(dispatched[t]["fc1_tactic"].split(":")[:2])
        print(f"| {t} | {dispatched[t]['median_us']:.1f} ({fc1}) | " + " | ".join(cells) + f" | {ratio:.3f}{' CLIFF' if ratio > 1.05 else ''} |")
    return 1 if cliff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
