#!/usr/bin/env bash
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
#
# Build the C++ core of coda_core_cpp and its C++ tests (no Python, no ament) under
# AddressSanitizer + UndefinedBehaviorSanitizer in a separate build directory and run them all; then build the
# tests that run threads (the control tick's model hand-over, the transition ring) under ThreadSanitizer and
# run those. Any sanitizer report fails the run (-fno-sanitize-recover=all, halt_on_error).
#   scripts/run_sanitized_cpp_tests.sh            # uses build/coda_core_cpp_asan and build/coda_core_cpp_tsan
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${CODA_ASAN_BUILD_DIR:-$ROOT/build/coda_core_cpp_asan}"
TSAN_DIR="${CODA_TSAN_BUILD_DIR:-$ROOT/build/coda_core_cpp_tsan}"
TSAN_TESTS=(test_control_swap test_transition_ring)
JOBS="$(nproc 2>/dev/null || echo 2)"
FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g"

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
if ! { cmake -S "$ROOT/src/coda_core_cpp" -B "$BUILD_DIR" \
         -DCODA_CORE_ONLY=ON -DCODA_OPTIMIZE=OFF -DCMAKE_BUILD_TYPE=Debug \
         -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" &&
       cmake --build "$BUILD_DIR" --parallel "$JOBS"; } >"$LOG" 2>&1; then
  cat "$LOG" >&2
  echo "run_sanitized_cpp_tests.sh: the sanitizer build failed" >&2
  exit 1
fi

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 300

echo "== C++ tests with threads under ThreadSanitizer: ${TSAN_TESTS[*]}"
if ! { cmake -S "$ROOT/src/coda_core_cpp" -B "$TSAN_DIR" \
         -DCODA_CORE_ONLY=ON -DCODA_OPTIMIZE=OFF -DCMAKE_BUILD_TYPE=Debug \
         -DCMAKE_CXX_FLAGS="-fsanitize=thread -O1 -g" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" &&
       cmake --build "$TSAN_DIR" --parallel "$JOBS" --target "${TSAN_TESTS[@]}"; } >"$LOG" 2>&1; then
  cat "$LOG" >&2
  echo "run_sanitized_cpp_tests.sh: the ThreadSanitizer build failed" >&2
  exit 1
fi
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
ctest --test-dir "$TSAN_DIR" --output-on-failure --timeout 300 -R "^($(IFS='|'; echo "${TSAN_TESTS[*]}"))\$"
