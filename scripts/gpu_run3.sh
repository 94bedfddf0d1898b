#!/usr/bin/env bash
set -uo pipefail
out=$1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 200 .gpu/fp4moe_gpu_tests 2>&1 | grep -E "FAILED|PASSED|rel error" | tail -20
for p in glm5 glm5-tp8; do .gpu/fp4moe bench --preset $p --tokens 1,16,64,256,1024 2>/dev/null | grep -E "^ +[0-9]+ |stages" | cut -c1-125; done
