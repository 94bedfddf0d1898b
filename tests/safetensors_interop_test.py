#!/usr/bin/env python3
"""safetensors interoperability with the Python `safetensors` package (an independent writer
and reader), driven through the fp4moe binary.

usage: safetensors_interop_test.py FP4MOE_BINARY
  1. Python writes a file (several dtypes, a scalar, an empty tensor, metadata); `fp4moe inspect
     --json` must report the same names, dtypes, shapes and bytes (FNV-1a 64 checksums).
  2. `fp4moe synth` writes a checkpoint; Python's safe_open reads every shard, the index covers
     every tensor, and the bytes of every tensor (read by the header's offsets; through safe_open
     too where NumPy holds the dtype) match fp4moe's checksums.
  3. `fp4moe quantize` writes NVFP4 tensors; Python reads them, equal to the NumPy recipe's
     (tests/oracle/fp_oracle.py) codes, E4M3 block scales and global scale.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle"))
import fp_oracle  # noqa: E402  (the ModelOpt recipe in NumPy + ml_dtypes)

BIN = sys.argv[1]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def fnv1a(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def raw_tensors(path):
    """Every tensor's bytes as the safetensors format places them (8-byte header length, JSON
    header, data_offsets into the buffer after it): for dtypes NumPy cannot hold, such as F8_E4M3."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {name: data[t["data_offsets"][0]:t["data_offsets"][1]]
            for name, t in header.items() if name != "__metadata__"}


def inspect(path):
    p = subprocess.run([BIN, "inspect", "--json", path], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        failures.append(f"inspect {path}: {p.stderr}")
        return {}
    return {t["name"]: t for t in json.loads(p.stdout)}


DTYPE = {"uint8": "U8", "float32": "F32", "float16": "F16", "int32": "I32", "float64": "F64", "int64": "I64",
         "int8": "I8", "uint16": "U16", "bool": "BOOL"}

with tempfile.TemporaryDirectory() as d:
    rng = np.random.default_rng(1)
    tensors = {
        "codes": rng.integers(0, 256, (7, 33), dtype=np.uint8),
        "weights": rng.standard_normal((4, 5)).astype(np.float32),
        "half": rng.standard_normal(9).astype(np.float16),
        "ids": np.arange(6, dtype=np.int32).reshape(2, 3),
        "f64": np.array([1.5, -2.25]),
        "i64": np.array([[-1], [7]], dtype=np.int64),
        "scalar": np.array(0.125, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "flags": np.array([True, False, True]),
    }
    path = os.path.join(d, "py.safetensors")
    save_file(tensors, path, metadata={"producer": "python"})
    ours = inspect(path)
    check(set(ours) == set(tensors), f"names: {sorted(ours)}")
    for name, arr in tensors.items():
        t = ours.get(name, {})
        check(t.get("dtype") == DTYPE[str(arr.dtype)], f"{name}: dtype {t.get('dtype')} vs {arr.dtype}")
        check(t.get("shape") == list(arr.shape), f"{name}: shape {t.get('shape')} vs {arr.shape}")
        check(t.get("fnv1a64") == fnv1a(np.ascontiguousarray(arr).tobytes()), f"{name}: bytes differ")

    ck = os.path.join(d, "ckpt")
    p = subprocess.run([BIN, "synth", "--preset", "glm5", "--hidden", "128", "--intermediate", "64", "--experts", "4",
                        "--top-k", "2", "--layers", "2", ck], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"synth: {p.stderr}")
    index = json.load(open(os.path.join(ck, "model.safetensors.index.json")))["weight_map"]
    ours = inspect(ck)
    seen = set()
    for shard in sorted(set(index.values())):
        raws = raw_tensors(os.path.join(ck, shard))
        with safe_open(os.path.join(ck, shard), framework="numpy") as f:
            for name in f.keys():
                seen.add(name)
                check(index.get(name) == shard, f"{name}: index says {index.get(name)}, found in {shard}")
                sl = f.get_slice(name)
                check(list(sl.get_shape()) == ours[name]["shape"], f"{name}: shape")
                check(sl.get_dtype() == ours[name]["dtype"], f"{name}: dtype {sl.get_dtype()} vs {ours[name]['dtype']}")
                raw = raws[name]
                check(fnv1a(raw) == ours[name]["fnv1a64"], f"{name}: bytes (read by offsets)")
                if sl.get_dtype() in ("U8", "F32", "BF16"):
                    arr = f.get_tensor(name)  # safetensors' own reader, where NumPy holds the dtype
                    check(np.ascontiguousarray(arr).tobytes() == raw, f"{name}: safe_open's bytes")
                    if name.endswith("weight_scale_2"):
                        check(arr.shape == () and float(arr) > 0, f"{name}: not a positive scalar")
    check(seen == set(index), "index and shards disagree")
    check(any(n.endswith("experts.3.down_proj.weight_scale") for n in seen), "expert tensors missing")
    check(any(n.endswith("shared_experts.up_proj.weight") for n in seen), "shared expert missing")

    w = rng.standard_normal((16, 64)).astype(np.float32)
    np.save(os.path.join(d, "w.npy"), w)
    q = os.path.join(d, "q.safetensors")
    p = subprocess.run([BIN, "quantize", os.path.join(d, "w.npy"), q], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"quantize: {p.stderr}")
    glob, scales, codes = fp_oracle.nvfp4(w)
    with safe_open(q, framework="numpy") as f:
        check(f.get_tensor("weight").shape == (16, 32), "quantize: weight shape")
        check(np.array_equal(f.get_tensor("weight"), codes), "quantize: codes differ from the NumPy recipe")
        check(f.get_slice("weight_scale").get_dtype() == "F8_E4M3", "quantize: scale dtype")
        check(list(f.get_slice("weight_scale").get_shape()) == [16, 4], "quantize: scale shape")
        check(raw_tensors(q)["weight_scale"] == scales.tobytes(), "quantize: block scales differ from the NumPy recipe")
        check(f.get_tensor("weight_scale_2") == glob, "quantize: global scale differs from the NumPy recipe")
        check(abs(float(f.get_tensor("weight_scale_2")) - np.abs(w).max() / 2688) < 1e-6, "quantize: global scale")
        check(f.metadata().get("producer") == "fp4moe", "quantize: metadata")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("safetensors interop tests passed")
