#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time on a
# seed corpus of valid, truncated and corrupt inputs. Exit status non-zero on any finding.
#   tests/fuzz/run_fuzzers.sh SOURCE_DIR WORK_DIR [SECONDS_PER_TARGET]
set -euo pipefail
src=$1; work=$2; secs=${3:-20}
mkdir -p "$work"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/include" -I"$src/src")
common=("$src/src/io/safetensors.cc" "$src/src/io/checkpoint.cc" "$src/src/io/text_file.cc")
clang++ "${flags[@]}" "$src/tests/fuzz/safetensors_header_fuzzer.cc" "${common[@]}" -o "$work/header_fuzzer"
clang++ "${flags[@]}" "$src/tests/fuzz/index_fuzzer.cc" "${common[@]}" -o "$work/index_fuzzer"
# Seed corpora: a valid file and damaged copies; index texts.
python3 - "$work" <<'PY'
import json, os, struct, sys
w = sys.argv[1]
for sub in ("header", "index"):
    os.makedirs(os.path.join(w, "corpus_" + sub), exist_ok=True)
h = json.dumps({"__metadata__": {"k": "v"}, "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                "b": {"dtype": "U8", "shape": [3], "data_offsets": [16, 19]}}).encode()
h += b" " * ((8 - len(h) % 8) % 8)
valid = struct.pack("<Q", len(h)) + h + bytes(range(19))
seeds = {"valid": valid, "truncated": valid[:len(valid) // 2], "short": valid[:5],
         "bad_len": struct.pack("<Q", 1 << 40) + valid[8:], "bad_json": valid.replace(b'"a"', b'"a', 1)}
for n, b in seeds.items():
    open(os.path.join(w, "corpus_header", n), "wb").write(b)
for n, t in {"ok": '{"weight_map": {"a": "s.safetensors"}}', "bad": '{"weight_map": {"a": "../x"}}',
             "empty": "{}"}.items():
    open(os.path.join(w, "corpus_index", n), "w").write(t)
PY
"$work/header_fuzzer" -max_total_time="$secs" -max_len=4096 -timeout=10 "$work/corpus_header" 2>&1 | tail -2
"$work/index_fuzzer" -max_total_time="$secs" -max_len=2048 -timeout=10 "$work/corpus_index" 2>&1 | tail -2
echo "fuzzers: no findings in ${secs} s each"
