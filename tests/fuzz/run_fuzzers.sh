#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time on a
# seed corpus of valid, truncated and corrupt inputs. Exit status non-zero on any finding.
#   tests/fuzz/run_fuzzers.sh SOURCE_DIR WORK_DIR [SECONDS_PER_TARGET [BUILD_INCLUDE_DIR]]
# BUILD_INCLUDE_DIR is the build's include/ (generated fp4moe/version.h); its sibling generated/
# holds build_id.cc (the tuning cache's reader checks the build a file was written by). Without
# it the tuning-cache target is skipped.
set -euo pipefail
src=$1; work=$2; secs=${3:-20}; build_include=${4:-}
mkdir -p "$work"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/include" -I"$src/src")
common=("$src/src/io/safetensors.cc" "$src/src/io/checkpoint.cc" "$src/src/io/text_file.cc" "$src/src/io/json_document.cc")
clang++ "${flags[@]}" "$src/tests/fuzz/safetensors_header_fuzzer.cc" "${common[@]}" -o "$work/header_fuzzer"
clang++ "${flags[@]}" "$src/tests/fuzz/index_fuzzer.cc" "${common[@]}" -o "$work/index_fuzzer"
version=""
if [ -n "$build_include" ]; then
  clang++ "${flags[@]}" -I"$build_include" "$src/tests/fuzz/tuning_cache_fuzzer.cc" "$src/src/tune/tuning_cache.cc" \
    "$src/src/plan/tactic.cc" "$src/src/io/text_file.cc" "$src/src/io/json_document.cc" \
    "$src/src/reference/moe_config.cc" "$src/src/format/nvfp4.cc" "$src/src/format/scalar_codecs.cc" "$build_include/../generated/build_id.cc" -o "$work/tuning_cache_fuzzer"
  version=$(sed -n 's/.*return "\(.*\)";.*/\1/p' "$build_include/../generated/build_id.cc")
fi
# Seed corpora: a valid file and damaged copies; index texts; tuning caches of this version.
python3 - "$work" "$version" <<'PY'
import json, os, struct, sys
w, version = sys.argv[1], sys.argv[2]
for sub in ("header", "index", "cache"):
    os.makedirs(os.path.join(w, "corpus_" + sub), exist_ok=True)
entry = {"gpu": "NVIDIA H200", "sm": 90, "sm_count": 132, "driver": 13000, "library": version,
         "gemm": {"n_out": 4096, "k": 6144, "epilogue": "swiglu", "experts": 256, "top_k": 8, "shared_expert": True,
                  "routing": "sigmoid_noaux_tc", "n_group": 1, "topk_group": 1},
         "bucket": 8, "winner": "w4a16_mma:m128n8k256:s4:w8:sk1:swiglu", "time_us": 80.0,
         "runner_up": "w4a16_mma:m64n8k256:s4:w4:sk1:swiglu", "runner_up_us": 88.0}
cache = {"schema": "fp4moe-tuning/3", "library": version, "arch": "sm_90", "entries": [entry]}
bad = dict(entry, winner="w4a16_mma:m128n8k256:s4:w8:sk1:finalize", bucket=0)
for n, t in {"ok": json.dumps(cache, indent=1), "bad_entry": json.dumps(dict(cache, entries=[bad, entry])),
             "old_schema": json.dumps(dict(cache, schema="fp4moe-tuning/2")), "truncated": json.dumps(cache)[:200]}.items():
    open(os.path.join(w, "corpus_cache", n), "w").write(t)
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
# Each run's whole output goes to its log, printed in full on a finding (the sanitizer's stack,
# the crashing input as base64: the reproducer, `FUZZER INPUT_FILE`); the seed is printed and
# FP4MOE_FUZZ_SEED sets it (a time-bounded run that grew its corpus does not repeat exactly).
seed=${FP4MOE_FUZZ_SEED:-$(( ($(date +%s) % 100000) + 1 ))}
echo "fuzz seed $seed"
fuzz() {  # NAME CORPUS MAX_LEN
  local log="$work/$1.log"
  if "$work/$1" -seed="$seed" -max_total_time="$secs" -max_len="$3" -timeout=10 -artifact_prefix="$work/$1-" \
      "$work/corpus_$2" > "$log" 2>&1; then
    tail -2 "$log"
  else
    echo "== $1 found a problem (seed $seed); its output:"; cat "$log"
    for a in "$work/$1"-*; do [ -f "$a" ] && { echo "== input $a (base64):"; base64 "$a"; }; done
    return 1
  fi
}
fuzz header_fuzzer header 4096
fuzz index_fuzzer index 2048
if [ -n "$build_include" ]; then
  fuzz tuning_cache_fuzzer cache 4096
fi
echo "fuzzers: no findings in ${secs} s each"
