#!/usr/bin/env python3
"""Tests of the benchmark's JSON output and of scripts/plot_bench.py.

usage: bench_json_test.py FP4MOE_BINARY SOURCE_DIR
       bench_json_test.py --validate FILE...   (GPU runs just written: scripts/gpu_check.sh)
  - the recorded H200 run (tests/data/bench_h200_glm5.json) follows schema fp4moe-bench/1 and
    its accounting agrees with the roofline formula (the sustained BF16 ceiling, each row's
    share of it and the plain read of its bytes included);
  - `fp4moe bench` without a GPU writes a file of the same schema;
  - the plot script draws both files;
  - scripts/compare_families.py passes a dispatched run equal to its families, flags one that
    another tile alone beats by more than 5%, takes each plan's fastest repeat and pools forced
    repeats of the dispatched tactic pair with the dispatched runs.
"""
import json
import os
import subprocess
import sys
import tempfile

VALIDATE_ONLY = len(sys.argv) >= 2 and sys.argv[1] == "--validate"
if not VALIDATE_ONLY:
    BIN, SRC = sys.argv[1], sys.argv[2]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def validate_clock(k, name):
    """An SM clock sample (NVML) as the GPU bench writes it, where NVML was there."""
    for key in ("sm_mhz_mean", "sm_mhz_min", "sm_mhz_max", "power_w_max", "reasons", "samples"):
        check(key in k, f"{name}: {key} missing")
    if all(key in k for key in ("sm_mhz_mean", "sm_mhz_min", "sm_mhz_max", "samples")):
        check(k["samples"] >= 1, f"{name}: samples")
        check(0 < k["sm_mhz_min"] <= k["sm_mhz_mean"] <= k["sm_mhz_max"] < 10000, f"{name}: clock order")


def validate(d, name, gpu_run):
    check(d.get("schema") == "fp4moe-bench/1", f"{name}: schema")
    for k in ("version", "gpu", "config", "ceilings", "options", "rows"):
        check(k in d, f"{name}: missing {k}")
    c = d["ceilings"]
    check(c["read_gbs"] > 0 and c["bf16_tflops"] > 0, f"{name}: ceilings")
    if "bf16_clock" in c:
        validate_clock(c["bf16_clock"], f"{name}: ceilings.bf16_clock")
    check(c["source"] in ("measured", "datasheet"), f"{name}: ceiling source")
    sustained = c.get("bf16_sustained_tflops", 0)
    if sustained:
        # The power-capped rate of the same GEMM: below the burst (within noise), not far below.
        check(0.5 * c["bf16_tflops"] < sustained < 1.05 * c["bf16_tflops"], f"{name}: sustained ceiling {sustained}")
        check(c.get("bf16_sustain_seconds", 0) > 0, f"{name}: bf16_sustain_seconds")
        if "bf16_sustained_clock" in c:
            validate_clock(c["bf16_sustained_clock"], f"{name}: ceilings.bf16_sustained_clock")
    check(len(d["rows"]) > 0, f"{name}: no rows")
    prev = 0
    for r in d["rows"]:
        t = r["tokens"]
        check(t > prev, f"{name}: tokens not increasing")
        prev = t
        cost = r["cost"]
        for k in ("active_experts", "weight_bytes", "activation_bytes", "bytes", "flops", "intensity",
                  "floor_us", "memory_us", "compute_us", "bound"):
            check(k in cost, f"{name} T={t}: cost.{k} missing")
        check(abs(cost["bytes"] - cost["weight_bytes"] - cost["activation_bytes"]) < 1, f"{name} T={t}: bytes")
        floor = max(cost["bytes"] / (c["read_gbs"] * 1e9), cost["flops"] / (c["bf16_tflops"] * 1e12)) * 1e6
        check(abs(floor - cost["floor_us"]) <= 1e-6 * floor + 1e-3, f"{name} T={t}: floor {cost['floor_us']} vs {floor}")
        check(cost["bound"] == ("memory" if cost["memory_us"] >= cost["compute_us"] else "compute"), f"{name}: bound")
        cfg = d["config"]
        flops = 2 * t * cfg["top_k"] * 3 * cfg["hidden"] * cfg["intermediate"] + \
            2 * t * 3 * cfg["hidden"] * cfg["shared_intermediate"]
        check(abs(cost["flops"] - flops) <= 1e-9 * flops, f"{name} T={t}: flops")
        # Bytes from their own formulas: per expert 3 H I values at 1/2 + 1/16 byte and three fp32
        # global scales, for the active routed experts and the shared one; hidden in and out
        # (bf16) and the router logits (fp32).
        h, i, e, si = cfg["hidden"], cfg["intermediate"], cfg["experts"], cfg["shared_intermediate"]
        per_expert = lambda inter: 3 * h * inter * (0.5 + 1 / 16) + 12  # noqa: E731
        weights = cost["active_experts"] * per_expert(i) + (per_expert(si) if si else 0)
        check(abs(cost["weight_bytes"] - weights) <= 1e-9 * weights, f"{name} T={t}: weight_bytes")
        check(abs(cost["activation_bytes"] - t * (4 * h + 4 * e)) < 1e-6, f"{name} T={t}: activation_bytes")
        check(1 <= cost["active_experts"] <= min(e, t * cfg["top_k"]), f"{name} T={t}: active_experts")
        if gpu_run:
            o = r["ours"]
            check(o["path"] == "gpu" and o["median_us"] > 0, f"{name} T={t}: ours")
            check(abs(o["x_floor"] * cost["floor_us"] - o["median_us"]) <= 1e-6 * o["median_us"], f"{name}: x_floor")
            check(abs(o["pct_floor"] * o["x_floor"] - 100) <= 1e-6, f"{name} T={t}: pct_floor")
            check(abs(o["gbs"] * o["median_us"] * 1e3 - cost["bytes"]) <= 1e-6 * cost["bytes"], f"{name} T={t}: gbs")
            check(abs(o["tflops"] * o["median_us"] * 1e6 - cost["flops"]) <= 1e-6 * cost["flops"], f"{name} T={t}: tflops")
            check(set(o["stages_us"]) == {"routing", "fc1", "fc2"}, f"{name}: stages")
            if "bytes" in r.get("baseline", {}):  # files of the accounting that has the baseline's bytes
                # A phase inside another launch is 0 (the small-batch family routes in FC1; the
                # fused family is one launch), and our clocks count the timed replays alone.
                fam = o["fc1_tactic"].split(":")[0]
                if fam in ("w4a16_gemv", "w4a16_fused"):
                    check(o["stages_us"]["routing"] == 0, f"{name} T={t}: {fam} routing stage")
                if fam == "w4a16_fused":
                    check(o["stages_us"]["fc2"] == 0, f"{name} T={t}: fused fc2 stage")
                if "sm_clock_measured" in o and d["options"].get("graph", True):
                    check(o["sm_clock_measured"]["fc1_launches"] == d["options"]["iters"],
                          f"{name} T={t}: clock launches {o['sm_clock_measured']['fc1_launches']} "
                          f"against {d['options']['iters']} timed replays")
            if sustained:
                pct = 100 * o["tflops"] / sustained
                check(abs(o.get("pct_sustained_bf16", -1) - pct) <= 1e-6 * pct, f"{name} T={t}: pct_sustained_bf16")
            if "clock" in o:
                validate_clock(o["clock"], f"{name} T={t}: ours.clock")
            if "sm_clock_measured" in o:  # measured in our GEMMs (clock64 over %globaltimer)
                m = o["sm_clock_measured"]
                check(m["fc1_launches"] >= 1 and m["fc2_launches"] >= 1, f"{name} T={t}: sm_clock_measured launches")
                check(100 < m["fc1_mhz"] < 10000 and 100 < m["fc2_mhz"] < 10000, f"{name} T={t}: sm_clock_measured")
            if "plain_read" in r:  # a plain read of the same bytes, timed as ours (memory-bound rows)
                pr = r["plain_read"]
                check(cost["bound"] == "memory", f"{name} T={t}: plain read on a compute-bound row")
                if "skipped" not in pr:
                    # No kernel reads the bytes faster than the ceiling allows (within noise).
                    check(pr["median_us"] >= 0.95 * cost["memory_us"], f"{name} T={t}: plain read beats the floor")
                    check(abs(pr["x_floor"] * cost["floor_us"] - pr["median_us"]) <= 1e-6 * pr["median_us"],
                          f"{name} T={t}: plain_read.x_floor")
                    check(abs(pr["ours_x"] * pr["median_us"] - o["median_us"]) <= 1e-6 * o["median_us"],
                          f"{name} T={t}: plain_read.ours_x")
                    check(abs(pr["gbs"] * pr["median_us"] * 1e3 - cost["bytes"]) <= 1e-6 * cost["bytes"],
                          f"{name} T={t}: plain_read.gbs")
            b = r["baseline"]
            if "clock" in b:
                validate_clock(b["clock"], f"{name} T={t}: baseline.clock")
            check(abs(b["speedup"] - b["median_us"] / o["median_us"]) < 1e-6 * b["speedup"], f"{name}: speedup")
            check(abs(b["tflops"] * b["median_us"] * 1e6 - cost["flops"]) <= 1e-6 * cost["flops"], f"{name} T={t}: baseline tflops")
            check(abs(b["x_floor"] * cost["floor_us"] - b["median_us"]) <= 1e-6 * b["median_us"], f"{name}: baseline x_floor")
            if "bytes" in b:  # its own bytes: BF16 weights of the same experts, hidden in and out
                bf16 = (cost["active_experts"] * 3 * h * i + 3 * h * si) * 2 + t * 4 * h
                check(abs(b["bytes"] - bf16) <= 1e-9 * bf16, f"{name} T={t}: baseline bytes")
                check(abs(b["gbs"] * b["median_us"] * 1e3 - bf16) <= 1e-6 * bf16, f"{name} T={t}: baseline gbs")
            check(b["rel_error"] < 2e-2, f"{name} T={t}: rel error {b['rel_error']}")


if VALIDATE_ONLY:
    # The same accounting checks on files a GPU bench of this build just wrote: the recorded files
    # below never change, so only this catches a regression in the bench's arithmetic.
    for path in sys.argv[2:]:
        with open(path) as f:
            validate(json.load(f), path, True)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"bench json: {len(sys.argv) - 2} files valid")
    sys.exit(0)

with open(os.path.join(SRC, "tests/data/bench_h200_glm5.json")) as f:
    rec = json.load(f)
validate(rec, "recorded H200 glm5", True)
check(len(rec["rows"]) == 15, "recorded run: full default sweep 1..16384")
# The recorded H100 runs: of the accounting with the baseline's own bytes (its checks above).
for preset in ("glm5", "glm5_tp8"):
    with open(os.path.join(SRC, f"docs/measurements/h100_{preset}_bench.json")) as f:
        h100 = json.load(f)
    validate(h100, f"recorded H100 {preset}", True)
    check(all("bytes" in r["baseline"] for r in h100["rows"]), f"recorded H100 {preset}: baseline bytes")

with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "cpu.json")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # force the no-GPU path even on a GPU machine
    p = subprocess.run([BIN, "bench", "--preset", "glm5-tp8", "--tokens", "1,4,64", "--cpu-max-tokens", "1",
                        "--json", out], capture_output=True, text=True, env=env, timeout=600)
    check(p.returncode == 0, f"bench without GPU failed: {p.stderr}")
    if p.returncode == 0:
        with open(out) as f:
            cpu = json.load(f)
        validate(cpu, "cpu run", False)
        check(cpu["rows"][0]["ours"]["path"] == "cpu_reference", "cpu run: T=1 timed by the reference")
        check("ours" not in cpu["rows"][1], "cpu run: T=4 not timed")
    for src, png in ((os.path.join(SRC, "tests/data/bench_h200_glm5.json"), "rec.png"), (out, "cpu.png")):
        q = subprocess.run([sys.executable, os.path.join(SRC, "scripts/plot_bench.py"), src,
                            os.path.join(tmp, png)], capture_output=True, text=True, timeout=300)
        check(q.returncode == 0, f"plot {src}: {q.stderr}")
        check(os.path.exists(os.path.join(tmp, png)) and os.path.getsize(os.path.join(tmp, png)) > 20000,
              f"plot {src}: no image")
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write('{"schema": "other"}')
    q = subprocess.run([sys.executable, os.path.join(SRC, "scripts/plot_bench.py"), bad, os.path.join(tmp, "x.png")],
                       capture_output=True, text=True)
    check(q.returncode != 0 and "not an fp4moe bench file" in q.stderr, "plot: bad file not rejected")

    # compare_families.py on the recorded run: as its own family run (plan "fixed") no ratio
    # exceeds 1; a forced run of another tile of the family 10% faster at T = 4096 is a cliff,
    # unless a repeat of the dispatched run is as fast (each plan's fastest repeat counts); a
    # forced run of the very tactic pair dispatched there is a repeat of the dispatched layer,
    # pooled with it, never a cliff against itself.
    cmp_script = os.path.join(SRC, "scripts/compare_families.py")
    rec_path = os.path.join(SRC, "tests/data/bench_h200_glm5.json")

    def variant(name, plan=None, faster_at=None, other_tile=False):
        d = json.loads(json.dumps(rec))
        for r in d["rows"]:
            if plan:
                r["ours"]["plan"] = plan
            if r["tokens"] == faster_at:
                r["ours"]["median_us"] /= 1.10
                if other_tile:
                    for k in ("fc1_tactic", "fc2_tactic"):
                        f = r["ours"][k].split(":")
                        f[1] = "m8n8k8"  # a tile name no real plan holds
                        r["ours"][k] = ":".join(f)
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump(d, f)
        return path

    forced = variant("forced.json", plan="fixed")
    q = subprocess.run([sys.executable, cmp_script, rec_path, forced], capture_output=True, text=True)
    check(q.returncode == 0 and "CLIFF" not in q.stdout and "| 4096 |" in q.stdout,
          f"compare_families: identical runs flagged: {q.stdout}")
    fast_forced = variant("fast_forced.json", plan="fixed", faster_at=4096, other_tile=True)
    q = subprocess.run([sys.executable, cmp_script, rec_path, fast_forced], capture_output=True, text=True)
    check(q.returncode == 1 and "| 4096 |" in q.stdout and "1.100 CLIFF" in q.stdout,
          f"compare_families: a 10% faster tile not flagged: {q.stdout}")
    fast_dispatched = variant("fast_dispatched.json", faster_at=4096)
    q = subprocess.run([sys.executable, cmp_script, rec_path, fast_dispatched, fast_forced], capture_output=True,
                       text=True)
    check(q.returncode == 0 and "CLIFF" not in q.stdout,
          f"compare_families: the dispatched run's faster repeat not taken: {q.stdout}")
    fast_same = variant("fast_same.json", plan="fixed", faster_at=4096)
    q = subprocess.run([sys.executable, cmp_script, rec_path, fast_same], capture_output=True, text=True)
    row = [l for l in q.stdout.splitlines() if l.startswith("| 4096 |")]
    check(q.returncode == 0 and row and "pooled" in row[0] and "CLIFF" not in q.stdout,
          f"compare_families: a faster repeat of the dispatched pair not pooled: {q.stdout}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("bench json tests passed")
