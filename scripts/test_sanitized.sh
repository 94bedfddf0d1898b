#!/usr/bin/env bash
# The host code under AddressSanitizer and UndefinedBehaviorSanitizer, in the build without CUDA
# that README promises where there is no nvcc: the format code, the float64 reference, the
# checkpoint and cache parsers, the resource model, the tuner's bookkeeping, the CLI (its Python
# tests run the instrumented binary). A bad read or write, a leak, signed overflow or a misaligned
# access fails the test it happens in. CI runs it after README's test command; it is that command
# (scripts/test.sh) with another build tree, configuration and flags.
#   scripts/test_sanitized.sh [ctest args...]
# Environment: FP4MOE_SANITIZE_BUILD_DIR (default build-sanitize).
# fuzz_parsers is left out: it builds its own sanitized libFuzzer targets and runs in the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers="-fsanitize=address,undefined"
export FP4MOE_BUILD_DIR=${FP4MOE_SANITIZE_BUILD_DIR:-build-sanitize}
export FP4MOE_CMAKE_ARGS="-DFP4MOE_ENABLE_CUDA=OFF"
export FP4MOE_CXX_FLAGS="$sanitizers -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
export FP4MOE_LINKER_FLAGS="$sanitizers"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1
exec ./scripts/test.sh -E '^fuzz_parsers$' "$@"
