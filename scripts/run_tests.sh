#!/usr/bin/env bash
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
#
# The whole test suite (make test): C++ tests, the C++ core under sanitizers, every Python test (unit, lint,
# ROS 2), the launch tests. Every stage runs whatever the ones before it did; at the end the script names the stages
# that failed and exits 1 if any did.
#   scripts/run_tests.sh                   # everything
#   scripts/run_tests.sh -k interfaces     # extra arguments go to pytest
#   scripts/run_tests.sh --fast [ARGS]     # the fast subset (make test-fast): the C++ tests, then pytest without
#                                          # the tests marked ros or slow; no sanitizer builds, no launch tests
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/env.sh
source scripts/env.sh

fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
FAST_MARKERS="not ros and not slow"

failed=()
# stage NAME COMMAND...: run one stage; a failure is remembered, not fatal.
stage() {
  local name="$1"
  shift
  echo "== $name"
  if "$@"; then
    return 0
  else
    local code=$?
    echo "== $name failed (exit $code)"
    failed+=("$name")
  fi
}

cpp_tests() {
  local status=0 build_dir
  for build_dir in build/coda_core_cpp; do
    ctest --test-dir "$build_dir" --output-on-failure || status=1
  done
  return "$status"
}

stage "C++ tests (ctest)" cpp_tests
if [ "$fast" = 0 ] && [ -x scripts/run_sanitized_cpp_tests.sh ]; then
  stage "C++ tests under AddressSanitizer + UBSan, ThreadSanitizer" scripts/run_sanitized_cpp_tests.sh
fi

# The launch tests (src/*/test/test_launch_*.py) need launch, launch_ros and launch_testing (a ROS 2 install);
# without them pytest leaves them out and says so in its summary. With them, launch_testing's pytest plugin
# collects them, unless this pytest cannot load that plugin (launch_testing releases before 3.9 under
# pytest >= 9): then pytest runs without it and each launch test runs with launch_testing's own runner after it
# (the whole suite only: not when arguments select tests, nor with --fast).
pytest_args=()
launch_tests=()
if [ "$fast" = 1 ]; then
  pytest_args=(-m "$FAST_MARKERS")
fi
if python -c "import launch, launch_ros, launch_testing" 2>/dev/null \
    && ! python -m pytest -p no:cacheprovider --collect-only -q test/test_launch_files.py >/dev/null 2>&1; then
  echo "launch_testing's pytest plugin does not load under this pytest: the launch tests run with launch_test"
  pytest_args+=(-p no:launch_testing -p no:launch_ros)
  if [ $# -eq 0 ] && [ "$fast" = 0 ]; then
    launch_tests=(src/*/test/test_launch_*.py)
  fi
fi
pytest_stage="Python tests (pytest)"
if [ "$fast" = 1 ]; then
  pytest_stage="Python tests (pytest -m '$FAST_MARKERS')"
fi
stage "$pytest_stage" python -m pytest "${pytest_args[@]}" "$@"

launch_test_files() {
  local passed=0 fails=0 file
  for file in "${launch_tests[@]}"; do
    if python -m launch_testing.launch_test "$file"; then
      passed=$((passed + 1))
    else
      fails=$((fails + 1))
    fi
  done
  echo "launch tests: $passed passed, $fails failed"
  [ "$fails" = 0 ]
}
if [ ${#launch_tests[@]} -gt 0 ]; then
  stage "launch tests (launch_test)" launch_test_files
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "== FAILED: ${#failed[@]} stage(s):"
  printf '   %s\n' "${failed[@]}"
  exit 1
fi
echo "== every stage passed"
