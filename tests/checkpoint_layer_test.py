#!/usr/bin/env python3
"""A ModelOpt NVFP4 checkpoint written by Python, run by `fp4moe run --checkpoint`, against a
NumPy layer: no fp4moe code on the oracle's side.

usage: checkpoint_layer_test.py FP4MOE_BINARY

Python writes a GLM-5-layout checkpoint (config.json, hf_quant_config.json, the index, one
safetensors shard a layer) of random values: every E2M1 code, E4M3 block scales over a wide
range, a global scale of its own for each matrix (gate and up differ, as in real checkpoints),
a BF16 router and an F32 correction bias. `fp4moe run --device cpu` computes layer 1 on an
input of bf16 values; NumPy computes the same layer from the file's bytes with ml_dtypes'
decoders: sigmoid routing with the correction bias (noaux_tc, ties to the lower index), the
chosen weights normalised and scaled, SwiGLU experts and the shared expert, in float64. The
output, rounded to bf16 by fp4moe, must match within that rounding. The same oracle with gate
and up swapped, or with layer 0's weights, must not: the test can tell those mistakes apart.
"""
import json
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

BIN = sys.argv[1]
H, I, E, TOP_K, T, LAYERS, SCALING = 128, 64, 8, 3, 6, 2, 2.5
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def nvfp4_matrix(rng, rows, cols, global_scale):
    """Random packed codes (two a byte, the first in the low nibble), E4M3 scales, the global."""
    codes = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    scales = rng.uniform(0.25, 6.0, (rows, cols // 16)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    return {"weight": codes, "weight_scale": scales, "weight_scale_2": np.array(global_scale, dtype=np.float32),
            "input_scale": np.array(rng.uniform(0.001, 0.01), dtype=np.float32)}


def dequantize(m):
    codes = m["weight"]
    nibbles = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(codes.shape[0], -1)
    values = nibbles.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    scales = np.repeat(m["weight_scale"].astype(np.float64), 16, axis=1)
    return values * scales * float(m["weight_scale_2"])


def layer_tensors(rng):
    t = {"gate.weight": rng.standard_normal((E, H)).astype(ml_dtypes.bfloat16),
         "gate.e_score_correction_bias": (0.05 * rng.standard_normal(E)).astype(np.float32)}
    for prefix in [f"experts.{e}" for e in range(E)] + ["shared_experts"]:
        for proj, rows, cols in (("gate_proj", I, H), ("up_proj", I, H), ("down_proj", H, I)):
            for name, value in nvfp4_matrix(rng, rows, cols, rng.uniform(0.005, 0.02)).items():
                t[f"{prefix}.{proj}.{name}"] = value
    return t


def expert(t, prefix, x, swap_gate_up=False):
    """y = down(silu(gate x) * up x) for every row of x."""
    gate, up, down = (dequantize({k: t[f"{prefix}.{proj}.{k}"] for k in ("weight", "weight_scale", "weight_scale_2")})
                      for proj in ("gate_proj", "up_proj", "down_proj"))
    if swap_gate_up:
        gate, up = up, gate
    g, u = x @ gate.T, x @ up.T
    return (g / (1.0 + np.exp(-g)) * u) @ down.T


def moe_layer(t, x, swap_gate_up=False):
    router = t["gate.weight"].astype(np.float64)
    logits = (x @ router.T).astype(np.float32).astype(np.float64)
    scores = 1.0 / (1.0 + np.exp(-logits))
    choice = scores + t["gate.e_score_correction_bias"].astype(np.float64)
    # Each token's routed weight per expert (0 where not chosen), then each expert once on all tokens.
    weights = np.zeros((x.shape[0], E))
    for tok in range(x.shape[0]):
        chosen = np.argsort(-choice[tok], kind="stable")[:TOP_K]  # ties: the lower index first
        w = scores[tok, chosen]
        weights[tok, chosen] = (w / (w.sum() + 1e-20) * SCALING).astype(np.float32)
    out = expert(t, "shared_experts", x, swap_gate_up)
    for e in range(E):
        if weights[:, e].any():
            out += weights[:, e:e + 1] * expert(t, f"experts.{e}", x, swap_gate_up)
    return out


def rel_error(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


with tempfile.TemporaryDirectory() as d:
    rng = np.random.default_rng(2026)
    config = {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "hidden_size": H,
              "moe_intermediate_size": I, "n_routed_experts": E, "num_experts_per_tok": TOP_K,
              "n_shared_experts": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 1,
              "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": SCALING, "hidden_act": "silu",
              "num_hidden_layers": LAYERS, "first_k_dense_replace": 0, "torch_dtype": "bfloat16",
              "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(d, "hf_quant_config.json"), "w") as f:
        json.dump({"producer": {"name": "modelopt", "version": "python test"},
                   "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}}, f)
    # As a real checkpoint is sharded: by size, not by layer. Every layer's tensors in order, cut
    # into SHARDS files of about equal count, so a layer straddles files and a file holds parts
    # of two layers (the loader must follow the index, not assume one layer a file).
    SHARDS = 3
    weight_map, layers, named = {}, [], []
    for layer in range(LAYERS):
        t = layer_tensors(rng)
        layers.append(t)
        named += [(f"model.layers.{layer}.mlp.{k}", v) for k, v in t.items()]
    per_shard = -(-len(named) // SHARDS)
    for s in range(SHARDS):
        shard = f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors"
        part = dict(named[s * per_shard:(s + 1) * per_shard])
        save_file(part, os.path.join(d, shard), metadata={"format": "pt"})
        weight_map.update({k: shard for k in part})
    layer1_files = {f for k, f in weight_map.items() if k.startswith("model.layers.1.")}
    check(len(layer1_files) >= 2, f"layer 1 lies in {len(layer1_files)} file(s); the test means it to straddle two")
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)

    x = rng.standard_normal((T, H)).astype(ml_dtypes.bfloat16).astype(np.float32)  # bf16 values
    np.save(os.path.join(d, "x.npy"), x)
    y_path = os.path.join(d, "y.npy")
    p = subprocess.run([BIN, "run", "--checkpoint", d, "--layer", "1", "--input", os.path.join(d, "x.npy"),
                        "--output", y_path, "--device", "cpu"], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"run --checkpoint: rc {p.returncode}\n{p.stdout}{p.stderr}")
    if p.returncode == 0:
        y = np.load(y_path).astype(np.float64)
        want = moe_layer(layers[1], x.astype(np.float64))
        check(y.shape == want.shape, f"output shape {y.shape}, expected {want.shape}")
        check(np.linalg.norm(want) > 1.0, "the oracle's output is degenerate")
        # fp4moe rounds its float64 result to bf16 (8 significant bits): half an ulp, at most 2^-8
        # of the value; the two float64 computations differ by far less than the slack.
        bound = 2.0**-8 * (1 + 1e-6) * np.abs(want) + 1e-6 * np.abs(want).max()
        worst = np.abs(y - want) - bound
        where = np.unravel_index(worst.argmax(), worst.shape)
        check(worst.max() <= 0, f"output differs from the NumPy layer beyond bf16 rounding at {where}: "
                                f"relative error {rel_error(y, want):.3e}")
        # The oracle can tell the mistakes a loader could make.
        check(rel_error(y, moe_layer(layers[1], x.astype(np.float64), swap_gate_up=True)) > 0.1,
              "gate and up swapped would pass")
        check(rel_error(y, moe_layer(layers[0], x.astype(np.float64))) > 0.1, "layer 0's weights would pass")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("checkpoint layer test passed")
