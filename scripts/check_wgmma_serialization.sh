#!/bin/sh
# Fails if ptxas serializes the prefill family's wgmma. When it cannot keep the registers of
# the asynchronous wgmma pipeline, ptxas waits for each wgmma before the next (info C7511,
# "wgmma.mma_async instructions are serialized due to insufficient register resources"): the
# kernel stays correct and loses up to the overlap of MMAs with the dequantization (a variant
# that chose the token width once per unit ran 5-8% slower at T = 4096-16384). C7511 is an
# info message that no --warning-as-error turns into an error, so this compiles the two
# prefill instantiation files for sm_90a with ptxas -v and looks for it.
#   scripts/check_wgmma_serialization.sh NVCC INST_DIR FLAGS...
# FLAGS: the library target's include directories and definitions (-I..., -D...), which the
# CTest takes from the target itself.
set -u
nvcc=$1 inst=$2
shift 2
status=0
for f in wgmma_swiglu wgmma_finalize; do
  out=$("$nvcc" "$@" -O3 -DNDEBUG -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
    -Xptxas -v -c "$inst/$f.cu" -o /dev/null 2>&1) || { echo "$out" | tail -20; exit 1; }
  if echo "$out" | grep -q "C7511"; then
    echo "$f.cu: ptxas serializes wgmma:"
    echo "$out" | grep "C7511"
    status=1
  else
    echo "$f.cu: $(echo "$out" | grep -c 'Compiling entry') kernels, no wgmma serialization"
  fi
done
exit $status
