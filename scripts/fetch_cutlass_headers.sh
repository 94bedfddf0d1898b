#!/usr/bin/env bash
# Fetches the CUTLASS headers and TensorRT-LLM's fused-MoE extension headers that the optional
# CUTLASS cross-check (tests/cutlass_crosscheck) compiles against, from the pinned PyPI wheel
# flashinfer-python==0.7.4 (CUTLASS 4.5.0, commit b46b16d0; ~100 MB download, nothing installed).
#   scripts/fetch_cutlass_headers.sh DEST      -> DEST/cutlass/include, DEST/cutlass_extensions/include
set -euo pipefail
dest=${1:?usage: fetch_cutlass_headers.sh DEST}
[ -f "$dest/cutlass/include/cutlass/version.h" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_cutlass_headers: downloading flashinfer-python==0.7.4 (headers only)"
python3 -m pip download -q --no-deps --only-binary=:all: flashinfer-python==0.7.4 -d "$tmp"
mkdir -p "$dest"
python3 - "$tmp"/flashinfer_python-0.7.4-*.whl "$dest" <<'PY'
import sys, zipfile, os
whl, dest = sys.argv[1], sys.argv[2]
maps = {"flashinfer/data/cutlass/include/": "cutlass/include/",
        "flashinfer/data/csrc/nv_internal/tensorrt_llm/cutlass_extensions/include/": "cutlass_extensions/include/"}
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        for src, dst in maps.items():
            if n.startswith(src) and not n.endswith("/"):
                out = os.path.join(dest, dst, n[len(src):])
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with z.open(n) as f, open(out, "wb") as g:
                    g.write(f.read())
PY
