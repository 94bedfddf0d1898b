#!/usr/bin/env bash
set -uo pipefail
out=$1
scripts/gpu_check.sh .gpu $out tests bench 2>&1 | grep -E "FAILED|PASSED|took" | tail -12
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 200 ncu --clock-control none --kernel-name regex:w4a16 --launch-count 2 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
  .gpu/fp4moe bench --preset glm5 --tokens 64 --iters 1 --warmup 0 --no-baseline --no-graph > $out/ncu64.txt 2>&1
grep -E "w4a16_grouped|DRAM Throughput|Duration|Compute \(SM\)|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A" $out/ncu64.txt
