#!/usr/bin/env bash
# README's test command: installs what is missing, builds, and runs the whole test suite.
# GPU tests (CTest label "gpu") report "skipped" where no GPU exists.
#   scripts/test.sh [ctest args...]     e.g.  scripts/test.sh -L gpu
# Environment: FP4MOE_BUILD_DIR (default build), FP4MOE_CMAKE_ARGS (extra configure flags, split at
# spaces), FP4MOE_CXX_FLAGS and FP4MOE_LINKER_FLAGS (CMAKE_CXX_FLAGS and CMAKE_EXE_LINKER_FLAGS,
# each kept whole: scripts/test_sanitized.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
build=${FP4MOE_BUILD_DIR:-build}
jobs=$(nproc)
# The interpreter install_deps.sh gave the pinned packages is the one the Python tests and the
# C++ oracle run (FindPython3 could pick another where a machine has several).
flags=(-DPython3_EXECUTABLE="$(command -v python3)")
[ -n "${FP4MOE_CXX_FLAGS:-}" ] && flags+=(-DCMAKE_CXX_FLAGS="$FP4MOE_CXX_FLAGS")
[ -n "${FP4MOE_LINKER_FLAGS:-}" ] && flags+=(-DCMAKE_EXE_LINKER_FLAGS="$FP4MOE_LINKER_FLAGS")
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${FP4MOE_CMAKE_ARGS:-} "${flags[@]}" >/dev/null
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"
