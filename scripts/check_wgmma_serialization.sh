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
# It also fails where a kernel moves its wgmma descriptors into uniform registers per wgmma
# (R2UR at least as many as HGMMA in the SASS; 15 per kernel, all in the prologue, when ptxas
# sees the consumers' bookkeeping as warp-uniform). That happens silently when a branch in the
# consumer loop depends on a value ptxas cannot prove warp-uniform (anything derived from the
# thread index): the slot and phase after it go to vector registers, and the prefill GEMMs ran
# 3-5% slower (docs/PERFORMANCE.md). The SASS comes from cuobjdump (the toolkit's, or the
# nvidia-cuda-cuobjdump wheel that scripts/install_deps.sh installs, with the nvidia-cuda-nvdisasm
# wheel beside it: cuobjdump -sass runs nvdisasm from its own directory or the PATH).
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
cuobjdump=$(command -v cuobjdump || echo "$(dirname "$nvcc")/cuobjdump")
if [ ! -x "$cuobjdump" ]; then
  wheel=$(python3 -c 'import nvidia.cu13; print(list(nvidia.cu13.__path__)[0])' 2>/dev/null)
  cuobjdump="$wheel/bin/cuobjdump"
fi
[ -x "$cuobjdump" ] || { echo "cuobjdump not found (toolkit or the nvidia-cuda-cuobjdump wheel: scripts/install_deps.sh)"; exit 1; }
obj=$(mktemp -d)
trap 'rm -rf "$obj"' EXIT
status=0
for f in wgmma_swiglu wgmma_finalize; do
  out=$("$nvcc" "$@" -O3 -DNDEBUG -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
    -Xptxas -v -c "$inst/$f.cu" -o "$obj/$f.o" 2>&1) || { echo "$out" | tail -20; exit 1; }
  serialized=$(echo "$out" | grep -E "C751[12]" | sed -n 's/.*kernelILy\([0-9]*\)E.*/\1/p' | sort -u)
  unexpected=""
  # A C7511/C7512 line that names no kernel of that form (a kernel renamed, or not a template of
  # a tactic code) is unexpected too: it must not drop out of the check unread.
  unnamed=$(echo "$out" | grep -E "C751[12]" | grep -cv 'kernelILy[0-9]*E')
  [ "$unnamed" -gt 0 ] && unexpected="$unexpected (${unnamed} line(s) naming no tactic kernel)"
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
  # Per kernel: HGMMA and R2UR in its SASS (cuobjdump prints a "Function :" line, then its code).
  counts=$("$cuobjdump" -sass "$obj/$f.o" | awk '
    /Function :/ { if (name != "") print name, h, r; name = $3; h = 0; r = 0 }
    /HGMMA/ { h++ } / R2UR / { r++ }
    END { if (name != "") print name, h, r }')
  [ -n "$counts" ] || { echo "$f.cu: cuobjdump printed no kernels"; status=1; }
  while read -r name h r; do
    [ -n "$name" ] || continue
    code=$(echo "$name" | sed -n 's/.*kernelILy\([0-9]*\)E.*/\1/p')
    if [ "$h" -gt 0 ] && [ "$r" -ge "$h" ]; then
      echo "$f.cu: kernel $code moves descriptors per wgmma: $r R2UR for $h HGMMA"
      status=1
    else
      echo "$f.cu: kernel $code: $h HGMMA, $r R2UR"
    fi
  done <<EOF_COUNTS
$counts
EOF_COUNTS
done
exit $status
