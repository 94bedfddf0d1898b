#!/usr/bin/env bash
# On a machine with a GPU, from already built binaries: the GPU tests, compute-sanitizer
# (memcheck, racecheck) on small cases, the tuner's acceptance, the benchmarks and a profile.
# Logs and JSON go to OUT_DIR.
#   scripts/gpu_check.sh BIN_DIR OUT_DIR [tests|sanitize|tune|checkpoint|bench|families|profile|overlap|all]...
# BIN_DIR holds fp4moe and fp4moe_gpu_tests (a build tree's, or copies of them); the overlap
# step runs fp4moe_dequant_overlap, fp4moe_bulk_stream, fp4moe_route_latency and
# fp4moe_row_gather_stream from there too
# (sm_90 only).
set -uo pipefail
bin=$1; out=$2; shift 2
steps=${*:-all}
mkdir -p "$out"
# cuBLAS: the toolkit's, or the one a Python CUDA wheel ships.
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cu13, os; print(os.path.dirname(nvidia.cu13.__file__)+"/lib")' 2>/dev/null) \
         $(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__)+"/lib")' 2>/dev/null); do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
# This script is run where a GPU is meant to be: a GPU test that finds none fails, not skips.
export FP4MOE_GPU_TESTS_REQUIRED=1
has() { [[ " $steps " == *" $1 "* || " $steps " == *" all "* ]]; }
# Every step's failure is remembered and the script exits non-zero naming them all at the end: a
# caller (or a person reading the last line) cannot mistake a failed run for a clean one.
failures=()
record() {  # RC WHAT: echo the step's exit status; remember a non-zero one
  echo "$2 exit $1"
  [ "$1" = 0 ] || failures+=("$2 (exit $1)")
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
"$bin/fp4moe" info | tee -a "$out/gpu.txt"
if has tests; then
  echo "== GPU tests"; start=$(date +%s)
  # (on an H100 host the suite took over 300 s; exit 124: the limit ran out before the suite did)
  timeout 480 "$bin/fp4moe_gpu_tests" 2>&1 | tee "$out/gpu_tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |FAILED|rel error|tests ran"
  record "${PIPESTATUS[0]}" "GPU tests"; echo "  in $(( $(date +%s) - start )) s"
fi
if has sanitize; then
  echo "== compute-sanitizer"
  # (GraphsSurvive...: a graph replayed after the workspace grew under other plans; only memcheck
  # sees a freed buffer it still addressed - the output stays right)
  small='GpuLayer.RepeatedRunsAreBitwiseIdentical:GpuLayer.GraphsSurviveGrowthsUnderOtherPlans:Dequant.*:*Prepack.*16x256*:Modes/GpuRouting.*T64*'
  # And the layer from the CLI on a small shape (the fused family's runs are listed last): T = 2
  # (the small-batch family: I = 256 is narrow),
  # T = 5 (decode family), T = 100 and 300 (25 and 75 tokens per expert: the prefill family's
  # 256-row 64-token tile with 128-K stages, then its 256-row 128-token tile, in both GEMMs on
  # sm_90a), each against the float64 reference; then experts of I = 1024 (not narrow) at T = 100
  # and 300: the same two tiles; and H = 768,
  # I = 1024 at T = 420 (105 tokens per expert, 192-row blocks that pad neither GEMM past 5%):
  # the 192 x 144 tile in both; at T = 480 (120 per expert) the 192 x 176 tile in both (its width
  # chosen once per unit).
  sanitize_run() {  # TOOL I T LOG [H [REPLAYS]]: the CLI layer (8 experts, top-2, H 512 or H, I) under one tool
    local extra=(); [ "$1" = racecheck ] && extra=(--racecheck-report hazard)
    timeout 150 compute-sanitizer --tool "$1" "${extra[@]}" --error-exitcode 9 "$bin/fp4moe" run --hidden "${5:-512}" \
      --intermediate "$2" --shared-intermediate "$2" --experts 8 --top-k 2 --device gpu --compare-reference -t "$3" \
      --iters "${6:-20}" > "$out/$4" 2>&1
    record $? "$1 fp4moe run (H = ${5:-512}, I = $2) T=$3"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|relative|tactic" "$out/$4"
  }
  for t in 2 5 100 300; do
    for tool in memcheck racecheck; do sanitize_run $tool 256 $t "${tool}_run_$t.log"; done
  done
  for t in 100 300; do
    for tool in memcheck racecheck; do sanitize_run $tool 1024 $t "${tool}_run_wide_$t.log"; done
  done
  for t in 420 480; do
    for tool in memcheck racecheck; do sanitize_run $tool 1024 $t "${tool}_run_192rows_$t.log" 768; done
  done
  # The fused family (sm_90): wide experts (I = 1024) at T = 1 (m128n8k1024), 2 (m128n8k3072) and
  # 4 (m128n8k6144), the whole layer in one launch. Racecheck with one timed replay: it instruments
  # every shared-memory access of the mbarrier waits' polling (with the CLI's 20 replays T = 2 did
  # not end within 170 s; with one, 3 s).
  for t in 1 2 4; do sanitize_run memcheck 1024 $t "memcheck_run_fused_$t.log"; done
  sanitize_run racecheck 1024 1 "racecheck_run_fused_1.log"
  # And at H = 1024, where FC1's routed items (4 K groups at T = 1) outrun the 3-slot ring as
  # glm5's do: a slot rewritten within one item (at H = 512 only FC2's whole-K items do). With one
  # lane releasing each warp's reads of a stage this reported WAR hazards; every consumer thread
  # releases its own now.
  for t in 1 2 4; do sanitize_run racecheck 1024 $t "racecheck_run_fused_h1024_$t.log" 1024 1; done
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/fp4moe_gpu_tests" --gtest_filter="$small" \
    > "$out/memcheck.log" 2>&1; record $? memcheck; tail -3 "$out/memcheck.log"
  timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 "$bin/fp4moe_gpu_tests" \
    --gtest_filter="$small" > "$out/racecheck.log" 2>&1; record $? racecheck; tail -3 "$out/racecheck.log"
  # initcheck: no device read of memory the layer never wrote - the one-expert layer without a
  # correction bias read its bias buffer's 4 unwritten bytes (every family: T = 1, 3, 64).
  timeout 150 compute-sanitizer --tool initcheck --error-exitcode 9 "$bin/fp4moe_gpu_tests" \
    --gtest_filter=GpuLayer.OneExpertWithoutCorrectionBias \
    > "$out/initcheck.log" 2>&1; record $? initcheck; tail -3 "$out/initcheck.log"
fi
if has tune; then
  # Tune glm5 at the default buckets into a fresh cache, then bench the layer with the cache and
  # with the heuristic alone, twice each, interleaved: the spread between repeats is the noise.
  export FP4MOE_CACHE_DIR="$out/cache"
  echo "== tune glm5"; start=$(date +%s)
  timeout 360 "$bin/fp4moe" tune --preset glm5 --json "$out/tune.json" > "$out/tune.txt" 2>/dev/null
  record $? tune; echo "  in $(( $(date +%s) - start )) s"
  for round in 1 2; do
    timeout 110 "$bin/fp4moe" bench --preset glm5 --json "$out/bench_cache_$round.json" > /dev/null 2>&1
    record $? "bench with the cache, round $round"
    timeout 110 "$bin/fp4moe" bench --preset glm5 --no-cache --json "$out/bench_heuristic_$round.json" > /dev/null 2>&1
    record $? "bench without the cache, round $round"
  done
  unset FP4MOE_CACHE_DIR
fi
if has checkpoint; then
  echo "== synthetic ModelOpt checkpoint, run on the GPU against the reference"
  timeout 60 "$bin/fp4moe" synth "$out/ckpt" --hidden 1024 --intermediate 512 --experts 32 --top-k 4 --layers 2 --seed 7 | tail -1
  record "${PIPESTATUS[0]}" synth
  timeout 60 "$bin/fp4moe" run --checkpoint "$out/ckpt" --layer 1 --device gpu --compare-reference -t 48 | tail -3
  record "${PIPESTATUS[0]}" "checkpoint run"
  rm -rf "$out/ckpt"
fi
if has bench; then
  for p in glm5 glm5-tp8; do
    echo "== bench $p"
    timeout 240 "$bin/fp4moe" bench --preset $p --json "$out/bench_$p.json" 2>/dev/null | tee "$out/bench_$p.txt"
    record "${PIPESTATUS[0]}" "bench $p"
    python3 "$(dirname "$0")/../tests/bench_json_test.py" --validate "$out/bench_$p.json"
    record $? "bench $p: its JSON's accounting"
  done
fi
if has families; then
  # The prefill issue's "no cliff" check in one binary: the heuristic plan against each family's
  # tactics alone (both GEMMs forced) at the token counts where the families meet; FAMILY_TOKENS
  # replaces them (e.g. the means under 4 tokens per expert, where the decode family must win),
  # FAMILY_PRESET the preset (glm5-tp8: the narrow experts' boundary).
  ts=${FAMILY_TOKENS:-128,256,512,1024,2048,4096,8192,16384}; fp=${FAMILY_PRESET:-glm5}
  # Two rounds, every run once per round: the graph time of one plan varies up to ~5% between
  # processes, and the comparison takes each plan's fastest repeat. FAMILY_ROUNDS=1 halves the
  # step (~400 s on an H100) where device time is short.
  echo "== families ($fp)"
  fam_bench() {
    timeout 200 "$bin/fp4moe" bench --preset "$fp" --tokens "$ts" --no-cache --no-baseline "$@" > /dev/null 2>&1
    record $? "families bench $*"
  }
  for round in $(seq 1 "${FAMILY_ROUNDS:-2}"); do
    fam_bench --json "$out/fam_dispatched_$round.json"
    for t in w4a16_mma:m128n8k256:s3:w4:sk1 w4a16_mma:m256n8k256:s2:w8:sk1 w4a16_mma:m128n16k256:s2:w4:sk1 \
             w4a16_mma:m256n16k256:s2:w8:sk1 w4a16_mma:m128n32k256:s3:w4:sk1 \
             w4a16_mma:m128n64k256:s3:w8:sk1 w4a16_wgmma:m128n64k64:s14:w12:sk1 w4a16_wgmma:m128n64k64:s7:w12:sk1 \
             w4a16_wgmma:m256n64k64:s10:w20:sk1 w4a16_wgmma:m256n64k128:s6:w20:sk1 w4a16_wgmma:m256n64k256:s3:w20:sk1 \
             w4a16_wgmma:m256n128k64:s7:w20:sk1 w4a16_wgmma:m128n128k64:s9:w12:sk1 w4a16_wgmma:m192n144k64:s7:w16:sk1 \
             w4a16_wgmma:m192n176k64:s7:w16:sk1 w4a16_wgmma:m192n176k128:s3:w16:sk1 \
             w4a16_wgmma:m128n256k64:s5:w12:sk1; do
      fam_bench --fc1 "$t:swiglu" --fc2 "$t:finalize" --json "$out/fam_$(echo "$t" | tr ':' '_')_$round.json"
    done
  done
  python3 "$(dirname "$0")/compare_families.py" "$out"/fam_*.json | tee "$out/families.md"
  record "${PIPESTATUS[0]}" "families comparison"  # exit 1 on a cliff between the families
fi
if has profile; then
  echo "== ncu (glm5, T = 64: FC1 and FC2)"
  timeout 200 ncu --clock-control none --kernel-name regex:w4a16 --launch-skip 0 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    "$bin/fp4moe" bench --preset glm5 --tokens 64 --iters 1 --warmup 0 --no-baseline --no-graph \
    > "$out/ncu_glm5_t64.txt" 2>&1; record $? ncu
  grep -E "w4a16_grouped|Memory Throughput|DRAM Throughput|Duration|Achieved Occupancy|Registers|Compute \(SM\)|Stall|Warp Cycles Per Issued" "$out/ncu_glm5_t64.txt" | head -40
fi
# A developer microbenchmark of tools/, where it was built: TOOL SECONDS WHAT.
run_tool() {
  [ -x "$bin/fp4moe_$1" ] || return 0
  echo "== $3 (tools/$1.cu)"
  timeout "$2" "$bin/fp4moe_$1" | tee "$out/$1.md"
  record "${PIPESTATUS[0]}" "tools/$1"
}
if has overlap; then
  run_tool dequant_overlap 120 "the dequantization beside mma.sync / wgmma"
  run_tool bulk_stream 120 "the fused family's copies alone against a plain read"
  run_tool route_latency 60 "one token's routing in the fused family's CTAs"
  run_tool row_gather_stream 120 "the prefill FC1's token rows gathered by one tensor copy a row"
fi
if [ ${#failures[@]} -gt 0 ]; then
  echo "FAILED steps: ${#failures[@]}"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "every step passed"
