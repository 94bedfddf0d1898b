#!/usr/bin/env bash
# Installs the build tree into a fresh prefix and builds and runs a project outside the tree
# against it (tests/install/consumer): the README's find_package(fp4moe) path, which needs the
# config to find every dependency the exported targets name.
#   run_install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR CXX_COMPILER [CUDA_TOOLKIT_ROOT [CXX_FLAGS [LINKER_FLAGS]]]
# CXX_FLAGS and LINKER_FLAGS are the library build's (its sanitizers, say): the consumer gets them too.
set -euo pipefail
build=$1; src=$2; work=$3; cxx=$4; cuda_root=${5:-}; cxx_flags=${6:-}; linker_flags=${7:-}
rm -rf "$work"; mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
args=(-DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_CXX_COMPILER="$cxx")
[ -n "$cuda_root" ] && args+=(-DCUDAToolkit_ROOT="$cuda_root")
[ -n "$cxx_flags" ] && args+=(-DCMAKE_CXX_FLAGS="$cxx_flags")
[ -n "$linker_flags" ] && args+=(-DCMAKE_EXE_LINKER_FLAGS="$linker_flags")
cmake -S "$src/tests/install/consumer" -B "$work/consumer" "${args[@]}" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
out=$("$work/consumer/consumer")
echo "$out"
grep -q "nvfp4 2 x 32, value 1.50" <<< "$out"
grep -q "glm5 T = 16 on h200: w4a16_mma:" <<< "$out"
grep -q "refused: quantize_nvfp4: K = 33 is not a multiple of the block size 16" <<< "$out"
# A CUDA build (a toolkit root given) links the GPU half as well.
[ -z "$cuda_root" ] || grep -q "cuda build: [0-9]* GPUs, layer factory linked" <<< "$out"
echo "install test passed"
