#!/usr/bin/env python3
"""CLI tests: run the fp4moe binary as a user would and check exit codes and output."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle"))
import fp_oracle  # noqa: E402  (NumPy + ml_dtypes, no fp4moe code)

FP4MOE = sys.argv[1]
failures = []
# Exit codes: 2 where the parser refuses the command line (an unknown command, an option's value
# out of its range, options that exclude each other), 1 for an error found after it.
USAGE, FAILURE = 2, 1


def run(*args, expect_rc=0, env=None):
    p = subprocess.run([FP4MOE, *args], capture_output=True, text=True, timeout=600,
                       env=None if env is None else dict(os.environ, **env))
    # The exact code: an error is exit 1, and a crash after the error line (a signal: negative)
    # or a stray code must not pass as it.
    if p.returncode != expect_rc:
        failures.append(f"fp4moe {' '.join(args)}: rc {p.returncode}\n{p.stdout}{p.stderr}")
    return p


def expect_one_line_error(p, needle):
    lines = p.stderr.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("fp4moe: error:") or needle not in lines[0]:
        failures.append(f"expected one error line containing {needle!r}, got {p.stderr!r}")


def expect_errors(cases):
    """Each (args, exit code, text): one error line containing the text, that exit code."""
    for args, rc, needle in cases:
        expect_one_line_error(run(*args, expect_rc=rc), needle)


def check(cond, msg):
    if not cond:
        failures.append(msg)


# info works with or without a GPU
p = run("info")
check("fp4moe" in p.stdout and "GPU" in p.stdout, f"info output: {p.stdout}")

# run: a small layer of preset shapes computed by the reference; same seed, same checksum
p1 = run("run", "--preset", "glm5-tp8", "--tokens", "2", "--seed", "3")
p2 = run("run", "--preset", "glm5-tp8", "--tokens", "2", "--seed", "3")
check("checksum" in p1.stdout, f"run output: {p1.stdout}")
cs = [line for line in p1.stdout.splitlines() if "checksum" in line]
check(cs and cs == [l for l in p2.stdout.splitlines() if "checksum" in l], "checksum differs")
# ...and the output it sums is finite and not zero (two runs of NaNs would agree too)
mean_abs = [float(line.split("mean |out|")[1].split()[0]) for line in cs if "mean |out|" in line]
check(len(mean_abs) == 1 and np.isfinite(mean_abs[0]) and mean_abs[0] > 0, f"run output's mean |out|: {cs}")

# bad input: one line on stderr, non-zero exit, no crash
expect_errors([
        (("run", "--tokens", "0"), USAGE, "tokens"),
        (("run", "--preset", "glm6"), USAGE, "preset"),
        (("run", "--hidden", "100"), FAILURE, "multiple of"),
        (("bench", "--tokens", "1,x"), USAGE, "'x' is not a token count"),
        (("bench", "--tokens", "+4"), USAGE, "'+4' is not a token count"),
        (("tune", "--tokens", "1,2,"), USAGE, "'' is not a token count"),
        (("bench", "--tokens", "1,0"), USAGE, "'0' is not a token count"),
        (("frobnicate",), USAGE, "unknown command 'frobnicate' (commands: info, quantize, run,"),
])
# Softmax top-k has no expert groups: a preset's go with --routing softmax, typed ones are refused.
expect_one_line_error(run("run", "--preset", "deepseek-v3", "--routing", "softmax", "--n-group", "8", expect_rc=FAILURE),
                      "softmax top-k routing has no expert groups (n_group = 8, topk_group = 1")
p = run("run", "--preset", "deepseek-v3", "--routing", "softmax", "--hidden", "64", "--intermediate", "32",
        "--device", "cpu")
check("softmax_topk (n_group 1, topk_group 1" in p.stdout, f"--routing softmax kept the preset's groups: {p.stdout}")
# A shape override given is applied, 0 included: validation names it, never the preset's value.
expect_errors([
        (("run", "--experts", "0"), FAILURE, "number of experts must be > 0"),
        (("run", "--top-k", "0"), FAILURE, "top_k = 0"),
        (("run", "--hidden", "0"), FAILURE, "hidden size must be > 0"),
        (("run", "--tokens", "100000000"), USAGE, "'100000000' is not an integer in [1, 16777216]"),
        (("run", "--tokens", "1.5"), USAGE, "'1.5' is not an integer in [1, 16777216]"),
        (("bench", "--iters", "x"), USAGE, "--iters: 'x' is not an integer in [1, 100000]"),
        (("run", "--skew", "nan"), USAGE, "'nan' is not a finite number in [0, 1000]"),
        (("bench", "--skew", "-1"), USAGE, "'-1' is not a finite number in [0, 1000]"),
        (("run", "--skew", "1e39"), USAGE, "--skew: '1e39' is not a finite number in [0, 1000]"),
        (("run", "--threads", "-5"), USAGE, "--threads"),
])
# A batch larger than the host's memory fails before the work, with the sizes (no bad_alloc).
expect_one_line_error(run("run", "--tokens", "16777216", "--device", "cpu", expect_rc=FAILURE), "GB of host memory")
# Tensor parallel: refused splits and options, before any GPU or NCCL is needed.
expect_errors([
        (("bench", "--preset", "glm5-tp8", "--tp", "32"), FAILURE, "multiples of 16"),
        (("bench", "--tp", "2", "--json", "/tmp/x.json"), FAILURE, "--tp takes"),
        (("bench", "--tp", "1"), USAGE, "--tp"),
        # every rank builds the whole layer in host memory: 65 copies of 1024 experts of 6144 x 65536
        # (~1.5 TB each) is more than any host has
        (("bench", "--ep", "64", "--experts", "1024", "--intermediate", "65536"), FAILURE,
         "(each rank builds the whole layer's weights) needs ~"),
        (("quantize", "/nonexistent.npy", "/tmp/x"), FAILURE, "cannot open"),
])
# Numbers as typed: no wrapped seed, no saturated width, no NaN through a range, K a multiple of 16.
expect_one_line_error(run("run", "--seed", "-1", expect_rc=USAGE), "'-1' is not an integer")
expect_one_line_error(run("run", "--hidden", "99999999999999999999999", expect_rc=USAGE),
                      "'99999999999999999999999' is not an integer")
expect_errors([
        (("run", "--hidden", str(1 << 30)), FAILURE, "exceeds 2^20"),
        (("bench", "--warmup-ms", "nan"), USAGE, "'nan' is not a finite number"),
        (("tune", "--margin", "nan"), USAGE, "'nan' is not a finite number"),
        (("tactics", "--k", "17"), USAGE, "not a multiple of the NVFP4 block size 16"),
])
# Outputs that cannot be written are refused before the run; options a checkpoint or an input
# file fix cannot be given beside it.
expect_one_line_error(run("run", "--output", "/nonexistent/dir/y.npy", expect_rc=FAILURE), "does not exist")
expect_one_line_error(run("bench", "--tokens", "1", "--json", "/nonexistent/dir/b.json", expect_rc=FAILURE),
                      "does not exist")
expect_one_line_error(run("run", "--checkpoint", "/tmp", "--layer", "0", "--experts", "16", expect_rc=USAGE),
                      "excludes")
expect_one_line_error(run("run", "--input", "/tmp/x.npy", "-t", "5", expect_rc=USAGE), "excludes")
# A checkpoint's router is the model's: no synthetic skew on it; nothing is seeded when the
# weights and the input are both files.
expect_one_line_error(run("run", "--checkpoint", "/tmp", "--layer", "0", "--skew", "5", expect_rc=USAGE), "excludes")
expect_one_line_error(run("run", "--checkpoint", "/tmp", "--layer", "0", "--input", "/tmp/x.npy", "--seed", "3",
                          expect_rc=FAILURE), "--seed: nothing is generated with --checkpoint and --input")
# A width past the bound is named as such, not as a multiple of 16 it also is not.
expect_one_line_error(run("run", "--hidden", "99999999999", expect_rc=FAILURE), "exceeds 2^20")
# The bench without a GPU refuses what only times a GPU (and the reverse on a GPU machine).
expect_one_line_error(run("bench", "--preset", "glm5-tp8", "--tokens", "1", "--iters", "5", expect_rc=FAILURE,
                          env={"CUDA_VISIBLE_DEVICES": ""}), "bench: --iters applies to a GPU run; there is no GPU here")
# Options that would be ignored are refused: an output dtype without an output, replays to time
# where no GPU runs, an empty path (read as not given), a cache file for `cache path`.
expect_one_line_error(run("run", "--output-dtype", "bf16", expect_rc=USAGE), "--output-dtype requires --output")
expect_one_line_error(run("run", "--preset", "glm5-tp8", "--device", "cpu", "--iters", "5", expect_rc=FAILURE),
                      "--iters times the GPU's graph replays; there is no GPU run here")
for option in [("run", "--output"), ("run", "--input"), ("bench", "--json"), ("tune", "--json")]:
    expect_one_line_error(run(*option, "", expect_rc=USAGE), f"{option[1]}: an empty path")
expect_one_line_error(run("cache", "path", "--file", "x.json", expect_rc=FAILURE), "--file goes with list, show or clear")
# Positional paths are never empty; a misspelt checkpoint is said not to exist; a number with a
# sign or in another base is named as not an integer; tactics refuses batch options a family
# does not read, and the CUTLASS profiles say where a GPU cannot run them.
expect_errors([
        (("inspect", ""), USAGE, "path: an empty path"),
        (("synth", ""), USAGE, "out_dir: an empty path"),
        (("quantize", "", "x"), USAGE, "input: an empty path"),
        (("run", "--checkpoint", "/nonexistent-ckpt", "--layer", "0"), FAILURE, "/nonexistent-ckpt: does not exist"),
        (("run", "--hidden", "+256"), USAGE, "'+256' is not an integer (decimal digits"),
        (("tactics", "--gpu", "h200", "--family", "w4a16_mma", "--k", "4096"), FAILURE,
         "--k sizes the batch w4a16_gemv stages; --family w4a16_mma does not read it"),
        (("tactics", "--gpu", "h200", "--family", "w4a16_fused", "--tokens", "2"), FAILURE,
         "--tokens sizes the batch w4a16_gemv stages; --family w4a16_fused does not read it"),
        (("tactics", "--gpu", "h200", "--family", "w4a16_mma", "--slots", "9"), FAILURE,
         "--slots sizes the routing w4a16_gemv and w4a16_fused stage"),
        (("tactics", "--gpu", "h200", "--json", "--explain"), USAGE, "excludes"),
])
p = run("tactics", "--gpu", "h200", "--family", "cutlass_sm120")
check("fits" not in p.stdout.split("reason", 1)[1].replace("this GPU's capacity", "")
      and p.stdout.count("cutlass_sm120 is sm_120/sm_121 code") == 16,
      f"tactics --gpu h200 --family cutlass_sm120: {p.stdout[:600]}")
p = run("tactics", "--gpu", "rtx-pro-6000", "--family", "cutlass_sm120")
check(" fits " in p.stdout and "cannot run it" not in p.stdout, f"tactics on sm_120: {p.stdout[:600]}")
# --cuda-device: a GPU asked for by number must exist (no machine has 1024), and goes only where a
# single GPU runs.
expect_errors([
        (("run", "--tokens", "1", "--cuda-device", "1023"), FAILURE, "run: --cuda-device 1023: "),
        (("bench", "--tokens", "1", "--cuda-device", "1023"), FAILURE, "bench: --cuda-device 1023: "),
        (("cache", "path", "--cuda-device", "1023"), FAILURE, "cache path: --cuda-device 1023: "),
        (("run", "--cuda-device", "1024"), USAGE, "--cuda-device: '1024' is not an integer in [0, 1023]"),
        (("run", "--device", "cpu", "--cuda-device", "0"), FAILURE, "--cuda-device picks a GPU; --device cpu runs none"),
        (("bench", "--tp", "2", "--cuda-device", "1"), FAILURE, "--tp runs on CUDA devices 0 to N-1"),
        (("cache", "list", "--cuda-device", "0"), FAILURE, "cache list: --cuda-device goes with path"),
])
# (a build without CUDA refuses tune before it looks for a device)
p = run("tune", "--tokens", "1", "--cuda-device", "1023", expect_rc=FAILURE)
check(p.stderr.startswith("fp4moe: error: tune: --cuda-device 1023: ") or
      p.stderr == "fp4moe: error: tune: this build has no CUDA\n", f"tune --cuda-device 1023: {p.stderr!r}")
# tune finds a cache directory it cannot write before it tunes anything (here one that cannot be
# made: root may write anywhere else).
p = run("tune", "--tokens", "1", expect_rc=FAILURE, env={"FP4MOE_CACHE_DIR": "/proc/fp4moe-cache"})
check(p.stderr.startswith("fp4moe: error: /proc/fp4moe-cache: cannot create the tuning cache directory (") or
      p.stderr == "fp4moe: error: tune: this build has no CUDA\n", f"tune with an unwritable cache: {p.stderr!r}")
# tactics: names checked before the table; a family without the epilogue says so.
p = run("tactics", "--gpu", "h200", "--family", "bogus", expect_rc=USAGE)
check(p.stdout == "", f"tactics printed before refusing --family bogus: {p.stdout[:200]}")
p = run("tactics", "--gpu", "h200", "--family", "w4a16_fused", "--epilogue", "none")
check("w4a16_fused: no tactics with epilogue none" in p.stdout and ":swiglu" not in p.stdout,
      f"tactics --family w4a16_fused --epilogue none: {p.stdout[:300]}")
# A report that could not be written is a failure (stdout on a full device).
if os.path.exists("/dev/full"):
    with open("/dev/full", "w") as full:
        p = subprocess.run([FP4MOE, "tactics", "--gpu", "h200", "--json"], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    check(p.returncode == 1 and p.stderr.strip() == "fp4moe: error: writing to standard output failed",
          f"tactics --json > /dev/full: rc {p.returncode}, {p.stderr!r}")
    with open("/dev/full", "w") as full:  # help is printed by CLI11, through std::cout
        p = subprocess.run([FP4MOE, "run", "--help"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    check(p.returncode == 1 and p.stderr.strip() == "fp4moe: error: writing to standard output failed",
          f"run --help > /dev/full: rc {p.returncode}, {p.stderr!r}")
# A tactic is checked where it is given, GPU or not.
expect_one_line_error(run("bench", "--tokens", "1", "--fc1", "garbage", expect_rc=FAILURE), "garbage")

with tempfile.TemporaryDirectory() as d:
    w = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    np.save(os.path.join(d, "w.npy"), w)
    p = run("quantize", os.path.join(d, "w.npy"), os.path.join(d, "w.safetensors"))
    check("relative error" in p.stdout, f"quantize output: {p.stdout}")
    check(os.path.getsize(os.path.join(d, "w.safetensors")) > 32 * 32, "no safetensors written")
    p = run("quantize", "--format", "mxfp4", os.path.join(d, "w.npy"), os.path.join(d, "m"))
    codes = np.load(os.path.join(d, "m.weight.npy"))
    check(codes.shape == (32, 32) and codes.dtype == np.uint8, f"mxfp4 codes {codes.shape}")
    # MXFP4, not NVFP4 under its name: one E8M0 scale per 32 values, codes and scales byte for
    # byte as the independent NumPy + ml_dtypes oracle quantizes them.
    want_scales, want_codes = fp_oracle.mxfp4(w)
    scales = np.load(os.path.join(d, "m.weight_scale.npy"))
    check(scales.shape == (32, 2) and scales.dtype == np.uint8, f"mxfp4 scales {scales.shape} {scales.dtype}")
    check(np.array_equal(scales, want_scales), "mxfp4 scales differ from the oracle's")
    check(np.array_equal(codes, want_codes), "mxfp4 codes differ from the oracle's")
    # An output prefix names files: an empty one or a directory would write hidden .weight.npy files.
    expect_one_line_error(run("quantize", os.path.join(d, "w.npy"), "", expect_rc=USAGE), "output: an empty path")
    expect_one_line_error(run("quantize", os.path.join(d, "w.npy"), d + "/", expect_rc=FAILURE), "not a directory")
    check(not os.path.exists(os.path.join(d, ".weight.npy")), "quantize wrote a hidden .weight.npy")
    # cache --file: an existing file; clear removes only a tuning cache's (tuning-*.json).
    notes = os.path.join(d, "notes.txt")
    with open(notes, "w") as f:
        f.write("keep me\n")
    expect_one_line_error(run("cache", "clear", "--file", notes, expect_rc=FAILURE), "not a tuning cache file")
    check(os.path.exists(notes), "cache clear --file removed a file that is no tuning cache")
    for action in ("list", "show"):  # a file given that holds no cache at all is an error, not a warning
        expect_one_line_error(run("cache", action, "--file", notes, expect_rc=FAILURE),
                              f"cache {action}: --file {notes}: not a tuning cache (")
    expect_one_line_error(run("cache", "list", "--file", os.path.join(d, "tuning-none.json"), expect_rc=FAILURE),
                          "cannot stat")
    # A JSON write that fails only at the close (a full device) is an error, not "wrote".
    if os.path.exists("/dev/full"):
        # (the CPU path: on a GPU machine the GPU bench would need cuBLAS before the write)
        expect_one_line_error(run("bench", "--preset", "glm5-tp8", "--tokens", "1", "--cpu-max-tokens", "0",
                                  "--json", "/dev/full", expect_rc=FAILURE, env={"CUDA_VISIBLE_DEVICES": ""}),
                              "/dev/full: write failed")
    np.save(os.path.join(d, "odd.npy"), w[:, :40])
    expect_one_line_error(
        run("quantize", os.path.join(d, "odd.npy"), os.path.join(d, "o"), expect_rc=FAILURE),
        "multiple of the block size 16")
    bad = w.copy()
    bad[1, 3] = np.inf
    np.save(os.path.join(d, "inf.npy"), bad)
    expect_one_line_error(run("quantize", os.path.join(d, "inf.npy"), os.path.join(d, "o"), expect_rc=FAILURE),
                          "inf.npy: element 67 (row 1, column 3) is inf")
    np.save(os.path.join(d, "vec.npy"), w[0])
    expect_one_line_error(
        run("quantize", os.path.join(d, "vec.npy"), os.path.join(d, "o"), expect_rc=FAILURE), "2-D")
    expect_one_line_error(
        run("quantize", os.path.join(d, "w.npy"), "/nonexistent/dir/wq", expect_rc=FAILURE), "does not exist")
    p = run("run", "--preset", "glm5-tp8", "--tokens", "1", "--seed", "010", "--device", "cpu")
    check("seed 10)" in p.stdout, f"--seed 010 is ten, not octal 8: {p.stdout}")
    p = run("run", "--preset", "glm5-tp8", "--tokens", "010", "--device", "cpu")
    check("output [10, " in p.stdout, f"--tokens 010 is ten, not octal 8: {p.stdout}")
    np.save(os.path.join(d, "empty.npy"), w[:0, :])
    expect_one_line_error(
        run("quantize", os.path.join(d, "empty.npy"), os.path.join(d, "o"), expect_rc=FAILURE), "is empty")
    # A tuning cache that is a FIFO is reported and skipped, never waited on.
    os.mkfifo(os.path.join(d, "tuning-fifo.json"))
    env = dict(os.environ, FP4MOE_CACHE_DIR=d)
    p = subprocess.run([FP4MOE, "cache", "list"], capture_output=True, text=True, timeout=60, env=env)
    check(p.returncode == 0 and "not a regular file" in p.stdout, f"cache list over a FIFO: {p.stdout}{p.stderr}")
    cache_file = os.path.join(d, "w.npy")
    p = subprocess.run([FP4MOE, "cache", "list"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, FP4MOE_CACHE_DIR=cache_file))
    expect_one_line_error(p, "is not a directory")
    check(p.returncode != 0, "cache list with the cache directory a file: rc 0")
    p = subprocess.run([FP4MOE, "cache", "list"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, FP4MOE_CACHE_DIR=os.path.join(cache_file, "sub")))
    expect_one_line_error(p, "which is not a directory")
    # Text from a file is printed with its control bytes escaped (no terminal escape, no broken line).
    ck = os.path.join(d, "ck")
    p = run("synth", ck, "--hidden", "256", "--intermediate", "256", "--experts", "8", "--top-k", "2")
    # A small checkpoint's size in MB (8 experts of 3 x 256 x 256 NVFP4 weights, their scales: about 1 MB).
    check(" MB of NVFP4 weights" in p.stdout and "0.00 GB" not in p.stdout, f"synth's size line: {p.stdout!r}")
    import json
    with open(os.path.join(ck, "config.json")) as f:
        conf = json.load(f)
    conf["model_type"] = "glm\u001b[2J\nx"
    with open(os.path.join(ck, "config.json"), "w") as f:
        json.dump(conf, f)
    p = run("inspect", ck)
    check("glm\\x1b[2J\\x0ax" in p.stdout and "\x1b" not in p.stdout, f"inspect printed {p.stdout[:300]!r}")
    np.save(os.path.join(d, "narrow.npy"), w[:2, :40])
    expect_one_line_error(
        run("run", "--input", os.path.join(d, "narrow.npy"), expect_rc=FAILURE),
        "expected shape (T, 6144), got (2, 40)")
    # Outputs that would hang or destroy: a FIFO (the open waits for a reader), the input itself.
    fifo = os.path.join(d, "fifo.npy")
    os.mkfifo(fifo)
    small = ("--hidden", "256", "--intermediate", "256", "--experts", "8", "--top-k", "2")
    expect_one_line_error(run("run", *small, "--device", "cpu", "--tokens", "1", "--output", fifo, expect_rc=FAILURE),
                          "is a FIFO or socket")
    os.mkfifo(os.path.join(d, "qf.weight_scale.npy"))  # the second of quantize's files
    expect_one_line_error(run("quantize", os.path.join(d, "w.npy"), os.path.join(d, "qf"), expect_rc=FAILURE),
                          "qf.weight_scale.npy is a FIFO or socket")
    x = os.path.join(d, "x.npy")
    np.save(x, np.random.default_rng(3).standard_normal((2, 256), dtype=np.float32))
    before = open(x, "rb").read()
    expect_one_line_error(run("run", *small, "--device", "cpu", "--input", x, "--output", x, expect_rc=FAILURE),
                          "is the input")
    xq = os.path.join(d, "xq.weight.npy")
    np.save(xq, np.random.default_rng(4).standard_normal((2, 256), dtype=np.float32))
    expect_one_line_error(run("quantize", xq, os.path.join(d, "xq"), expect_rc=FAILURE), "is the input")
    check(open(x, "rb").read() == before, "run --input X --output X changed X")
    expect_one_line_error(run("run", "--output", os.path.join(x, "y.npy"), expect_rc=FAILURE), x + " is not a directory")
    # A finite input past bf16's range is named with its place, not later as a router logit.
    np.save(x, np.full((2, 256), 3.4e38, dtype=np.float32))  # bf16 ends at 3.39e38
    expect_one_line_error(run("run", *small, "--device", "cpu", "--input", x, expect_rc=FAILURE),
                          "element 0 (token 0) is 3.4e+38, beyond bf16's range")
    # cache clear removes cache files only: a directory of that name is skipped, the rest cleared.
    cd = os.path.join(d, "cd")
    os.makedirs(os.path.join(cd, "tuning-a.json"))
    open(os.path.join(cd, "tuning-a.json", "keep"), "w").write("1")
    open(os.path.join(cd, "tuning-b.json"), "w").write("{}")
    p = subprocess.run([FP4MOE, "cache", "clear"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, FP4MOE_CACHE_DIR=cd))
    check(p.returncode == 0 and "skipped" in p.stdout and not os.path.exists(os.path.join(cd, "tuning-b.json"))
          and os.path.exists(os.path.join(cd, "tuning-a.json", "keep")), f"cache clear: {p.stdout}{p.stderr}")
    # synth: refused where the disk cannot hold the checkpoint, before writing; never onto a file.
    big = os.path.join(d, "big")
    expect_one_line_error(run("synth", big, "--hidden", "16384", "--intermediate", "16384", "--experts", "1024",
                              "--top-k", "2", "--layers", "1000", expect_rc=FAILURE), "GB on disk")
    check(not os.path.exists(big), "synth refused for the disk still made its directory")
    expect_one_line_error(run("synth", x, *small, expect_rc=FAILURE), "is not a directory")
    expect_one_line_error(run("synth", os.path.join(x, "sub"), *small, expect_rc=FAILURE), "is not a directory")
    # ...nor into another checkpoint's directory (its files stay as they were); an earlier synth's
    # output is replaced whole, the shards of its extra layers included.
    foreign = os.path.join(d, "foreign")
    os.makedirs(foreign)
    with open(os.path.join(foreign, "config.json"), "w") as f:
        f.write('{"mine": 1}')
    expect_one_line_error(run("synth", foreign, *small, expect_rc=FAILURE),
                          "holds no checkpoint of fp4moe synth")
    with open(os.path.join(foreign, "config.json")) as f:
        check(f.read() == '{"mine": 1}', "synth refused a foreign directory but changed its config.json")
    again = os.path.join(d, "again")
    run("synth", again, *small, "--layers", "2")
    run("synth", again, *small)
    shards = sorted(n for n in os.listdir(again) if n.endswith(".safetensors"))
    check(shards == ["model-00001-of-00001.safetensors"], f"synth over an earlier synth left {shards}")
    p = run("inspect", again)
    check("MoE layers 0-0: every tensor the loader reads is there" in p.stdout, f"inspect: {p.stdout[-300:]}")
    # inspect passes only a checkpoint every MoE layer of which loads: a tensor the loader needs,
    # taken out of the index, is named (exit 1), as `run` would name it.
    index = os.path.join(again, "model.safetensors.index.json")
    with open(index) as f:
        idx = json.load(f)
    del idx["weight_map"]["model.layers.0.mlp.experts.5.up_proj.weight_scale_2"]
    with open(index, "w") as f:
        json.dump(idx, f)
    expect_one_line_error(run("inspect", again, expect_rc=FAILURE),
                          "has no tensor 'model.layers.0.mlp.experts.5.up_proj.weight_scale_2'")
    expect_one_line_error(run("run", "--checkpoint", again, "--layer", "0", "--device", "cpu", expect_rc=FAILURE),
                          "has no tensor 'model.layers.0.mlp.experts.5.up_proj.weight_scale_2'")
    # A missing --input is named before the checkpoint is read.
    expect_one_line_error(run("run", "--checkpoint", again, "--layer", "0", "--input", os.path.join(d, "nope.npy"),
                              expect_rc=FAILURE), "nope.npy")
    # bench: each GEMM's tactic with its own epilogue, checked without a GPU too.
    expect_one_line_error(run("bench", "--tokens", "1", "--fc2", "w4a16_mma:m128n8k256:s4:w8:sk1:swiglu",
                              expect_rc=FAILURE), "FC2's epilogue is finalize")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("cli tests passed")
