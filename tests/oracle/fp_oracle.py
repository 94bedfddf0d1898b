#!/usr/bin/env python3
"""Independent oracle for fp4moe's format tests: NumPy + ml_dtypes, no fp4moe code.

Usage: fp_oracle.py OP IN OUT [ARGS]
  OP = e2m1 | e4m3 | e8m0          IN: float32 values -> OUT: uint8 codes (ml_dtypes casts)
  OP = nvfp4 ROWS COLS             IN: float32 [ROWS, COLS] -> OUT: the ModelOpt recipe in
                                   NumPy float32 arithmetic with ml_dtypes casts:
                                   float32 global scale, then scales [ROWS, COLS/16] (uint8),
                                   then packed codes [ROWS, COLS/2] (uint8)
  OP = mxfp4 ROWS COLS             OCP MX: scales [ROWS, COLS/32] (uint8), packed codes
  OP = nvfp4_act ROWS COLS SCALE   activations with a calibrated input scale (the W4A4 recipe of
                                   TensorRT-LLM / vLLM's kernels), float32 arithmetic: scales
                                   [ROWS, COLS/16] (uint8), then packed codes [ROWS, COLS/2]
"""
import sys

import ml_dtypes
import numpy as np


def codes(values, dtype):
    return np.asarray(values, dtype=np.float32).astype(dtype).view(np.uint8)


def pack(c):
    c = c.astype(np.uint8) & 0xF
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def nvfp4(w):
    rows, cols = w.shape
    amax = np.float32(np.abs(w).max())
    glob = np.float32(1.0) if amax == 0 else np.float32(amax / np.float32(6.0 * 448.0))
    blocks = w.reshape(rows, cols // 16, 16)
    bamax = np.abs(blocks).max(axis=-1).astype(np.float32)
    ratio = (bamax / np.float32(np.float32(6.0) * glob)).astype(np.float32)
    ratio[ratio == 0] = np.float32(1.0)
    ratio = np.clip(ratio, np.float32(2.0**-9), np.float32(448.0)).astype(np.float32)
    scale = ratio.astype(ml_dtypes.float8_e4m3fn)
    denom = (scale.astype(np.float32) * glob).astype(np.float32)
    scaled = (blocks / denom[..., None]).astype(np.float32)
    q = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(rows, cols)
    return glob, scale.view(np.uint8), pack(q)


def mxfp4(w):
    rows, cols = w.shape
    blocks = w.reshape(rows, cols // 32, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=-1)
    _, e = np.frexp(amax)
    shared = np.where(amax > 0, np.clip(e - 1 - 2, -127, 127), 0).astype(np.int32)
    scaled = np.ldexp(blocks, -shared[..., None]).astype(np.float32)
    q = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(rows, cols)
    return (shared + 127).astype(np.uint8), pack(q)


def nvfp4_act(x, input_scale):
    """sf = e4m3 satfinite(amax(block) / 6 / input_scale); code = e2m1 satfinite(x * (1 / (sf *
    input_scale))), 0 where sf is 0. Saturation is a clip: ml_dtypes casts past e4m3's 448 to NaN."""
    rows, cols = x.shape
    s = np.float32(input_scale)
    blocks = x.reshape(rows, cols // 16, 16).astype(np.float32)
    amax = np.abs(blocks).max(axis=-1).astype(np.float32)
    ratio = ((amax / np.float32(6.0)).astype(np.float32) / s).astype(np.float32)
    sf = np.minimum(ratio, np.float32(448.0)).astype(ml_dtypes.float8_e4m3fn)
    denom = (sf.astype(np.float32) * s).astype(np.float32)
    with np.errstate(divide="ignore"):
        mult = np.where(denom == 0, np.float32(0.0), (np.float32(1.0) / denom)).astype(np.float32)
    scaled = np.clip((blocks * mult[..., None]).astype(np.float32), np.float32(-6.0), np.float32(6.0))
    q = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(rows, cols)
    return sf.view(np.uint8), pack(q)


def main():
    op, src, dst = sys.argv[1:4]
    x = np.fromfile(src, dtype=np.float32)
    with open(dst, "wb") as f:
        if op == "e2m1":
            f.write(codes(x, ml_dtypes.float4_e2m1fn).tobytes())
        elif op == "e4m3":
            f.write(codes(x, ml_dtypes.float8_e4m3fn).tobytes())
        elif op == "e8m0":
            f.write(codes(x, ml_dtypes.float8_e8m0fnu).tobytes())
        elif op == "nvfp4":
            rows, cols = int(sys.argv[4]), int(sys.argv[5])
            glob, scales, packed = nvfp4(x.reshape(rows, cols))
            f.write(np.float32(glob).tobytes())
            f.write(scales.tobytes())
            f.write(packed.tobytes())
        elif op == "mxfp4":
            rows, cols = int(sys.argv[4]), int(sys.argv[5])
            scales, packed = mxfp4(x.reshape(rows, cols))
            f.write(scales.tobytes())
            f.write(packed.tobytes())
        elif op == "nvfp4_act":
            rows, cols, scale = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
            scales, packed = nvfp4_act(x.reshape(rows, cols), np.float32(scale))
            f.write(scales.tobytes())
            f.write(packed.tobytes())
        else:
            sys.exit(f"fp_oracle.py: unknown op {op}")


if __name__ == "__main__":
    main()
