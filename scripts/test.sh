#!/usr/bin/env bash
# README's test command: installs what is missing, builds, and runs the whole test suite.
# GPU tests (CTest label "gpu") report "skipped" where no GPU exists.
#   scripts/test.sh [ctest args...]     e.g.  scripts/test.sh -L gpu
# Environment: FP4MOE_BUILD_DIR (default build), FP4MOE_CMAKE_ARGS (extra configure flags).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
build=${FP4MOE_BUILD_DIR:-build}
jobs=$(nproc)
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${FP4MOE_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"
