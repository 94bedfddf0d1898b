#!/bin/sh
# Fails if ptxas serializes the prefill family's wgmma in a kernel not listed below. When it
# cannot keep the registers of the asynchronous wgmma pipeline, ptxas waits for each wgmma
# before the next (info C7511 or C7512, "wgmma.mma_async instructions are serialized due to
# insufficient register resources"; in the SASS every HGMMA closes its own group and is
# followed by a WARPGROUP.DEPBAR): the kernel stays correct and loses the overlap of MMAs with
# the dequantization (a variant that chose the token width once per unit ran 5-8% slower at
# T = 4096-16384). These are info messages that no --warning-as-error turns into errors, so
# this compiles the two prefill instantiation files for sm_90a with ptxas -v and looks for them.
#
# Known and measured: the two-CTA 64-token tile (w4a16_wgmma:m128n64k64:s7:w12, swiglu and
# finalize: encode_tactic 74310493432234002 and 74310493432234004) has 80 registers a thread at
# launch, in which ptxas serializes every wgmma (C7512, all 84 HGMMA); measured with it, the
# tile is still 1.18x faster than the one-CTA tiles at glm5 T = 1024 (docs/PERFORMANCE.md),
# which is why it is dispatched. Any other serialized kernel fails the check.
#   scripts/check_wgmma_serialization.sh NVCC INST_DIR FLAGS...
# FLAGS: the library target's include directories and definitions (-I..., -D...), which the
# CTest takes from the target itself.
set -u
known="74310493432234002 74310493432234004"
nvcc=$1 inst=$2
shift 2
status=0
for f in wgmma_swiglu wgmma_finalize; do
  out=$("$nvcc" "$@" -O3 -DNDEBUG -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
    -Xptxas -v -c "$inst/$f.cu" -o /dev/null 2>&1) || { echo "$out" | tail -20; exit 1; }
  serialized=$(echo "$out" | grep -E "C751[12]" | sed -n 's/.*kernelILy\([0-9]*\)E.*/\1/p' | sort -u)
  unexpected=""
  for code in $serialized; do
    case " $known " in *" $code "*) ;; *) unexpected="$unexpected $code" ;; esac
  done
  if [ -n "$unexpected" ]; then
    echo "$f.cu: ptxas serializes wgmma in a kernel not listed as known:"
    echo "$out" | grep -E "C751[12]"
    status=1
  else
    echo "$f.cu: $(echo "$out" | grep -c 'Compiling entry') kernels, serialized wgmma only in the known ones (${serialized:-none})"
  fi
done
exit $status
