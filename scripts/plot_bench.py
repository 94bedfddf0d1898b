#!/usr/bin/env python3
"""Plot an `fp4moe bench --json` result: a roofline chart and a time-versus-tokens chart.

usage: scripts/plot_bench.py BENCH.json OUT.png

Left: achieved TFLOPS against arithmetic intensity (FLOP per byte moved), with the measured
read-bandwidth slope and BF16 tensor ceiling; our layer and the cuBLAS BF16 baseline per token
count. Right: time per layer against tokens, with the roofline floor.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        d = json.load(f)
    if d.get("schema") != "fp4moe-bench/1":
        sys.exit(f"{path}: not an fp4moe bench file (schema {d.get('schema')!r})")
    return d


def timed_on_gpu(r, key):
    """Whether row r has a GPU time for `key` (ours: its path is "gpu"; the baseline runs only there)."""
    return key in r and "median_us" in r[key] and r[key].get("path", "gpu") == "gpu"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d = load(sys.argv[1])
    rows = d["rows"]
    bw = d["ceilings"]["read_gbs"] * 1e9
    tf = d["ceilings"]["bf16_tflops"] * 1e12
    tokens = [r["tokens"] for r in rows]
    ai = [r["cost"]["intensity"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))

    # Roofline.
    lo, hi = min(ai) / 2, max(ai) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax1.plot(xs, [min(tf, bw * x) / 1e12 for x in xs], "k-", lw=1.5,
             label=f"roofline: {bw / 1e9:.0f} GB/s, {tf / 1e12:.0f} TFLOPS ({d['ceilings']['source']})")
    # Each path at its own intensity: the baseline reads BF16 weights (its "bytes", where the file
    # has them; older files: ours). A CPU reference's time is no point on a GPU's roofline.
    def intensity(r, key):
        return r["cost"]["flops"] / r[key]["bytes"] if r[key].get("bytes") else r["cost"]["intensity"]

    for key, style, name in (("ours", "o-", "fp4moe"), ("baseline", "s--", "cuBLAS BF16")):
        pts = [(intensity(r, key), r["cost"]["flops"] / (r[key]["median_us"] * 1e-6) / 1e12)
               for r in rows if timed_on_gpu(r, key)]
        if pts:
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name)
    for r in rows:
        if timed_on_gpu(r, "ours"):
            ax1.annotate(str(r["tokens"]), (r["cost"]["intensity"],
                                            r["cost"]["flops"] / (r["ours"]["median_us"] * 1e-6) / 1e12),
                         fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax1.set_ylabel("TFLOPS")
    ax1.set_title(f"{d['config']['name']} on {d['gpu']['name']}: roofline (labels: tokens)")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=8)

    # Time versus tokens.
    ax2.plot(tokens, [r["cost"]["floor_us"] for r in rows], "k-", label="floor: max(bytes/BW, FLOPs/peak)")
    for key, style, name in (("ours", "o-", "fp4moe"), ("baseline", "s--", "cuBLAS BF16")):
        pts = [(r["tokens"], r[key]["median_us"]) for r in rows if key in r and "median_us" in r[key]]
        if key == "ours" and pts and not any(timed_on_gpu(r, key) for r in rows):
            name = "fp4moe CPU reference"
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("tokens per layer call")
    ax2.set_ylabel("time per layer (us)")
    ax2.set_title("time per layer")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
