#!/usr/bin/env bash
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
#
# The whole test suite (make test): C++ tests, then every Python test (unit, lint, ROS 2).
# Extra arguments go to pytest, e.g. scripts/run_tests.sh -k interfaces
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/env.sh
source scripts/env.sh

echo "== C++ tests (ctest)"
for build_dir in build/coda_core_cpp; do
  ctest --test-dir "$build_dir" --output-on-failure
done
if [ -x scripts/run_sanitized_cpp_tests.sh ]; then
  echo "== C++ tests under AddressSanitizer + UBSan"
  scripts/run_sanitized_cpp_tests.sh
fi

echo "== Python tests (pytest)"
# The launch tests (src/*/test/test_launch_*.py) need launch, launch_ros and launch_testing (a ROS 2 install);
# without them pytest leaves them out and says so in its summary. With them, launch_testing's pytest plugin
# collects them, unless this pytest cannot load that plugin (launch_testing releases before 3.9 under
# pytest >= 9): then pytest runs without it and each launch test runs with launch_testing's own runner after it
# (the whole suite only: not when arguments select tests).
pytest_args=()
launch_tests=()
if python -c "import launch, launch_ros, launch_testing" 2>/dev/null \
    && ! python -m pytest -p no:cacheprovider --collect-only -q test/test_launch_files.py >/dev/null 2>&1; then
  echo "launch_testing's pytest plugin does not load under this pytest: the launch tests run with launch_test"
  pytest_args=(-p no:launch_testing -p no:launch_ros)
  if [ $# -eq 0 ]; then
    launch_tests=(src/*/test/test_launch_*.py)
  fi
fi
status=0
python -m pytest "${pytest_args[@]}" "$@" || status=$?
if [ ${#launch_tests[@]} -gt 0 ]; then
  echo "== launch tests (launch_test)"
  passed=0
  failed=0
  for file in "${launch_tests[@]}"; do
    if python -m launch_testing.launch_test "$file"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
      status=1
    fi
  done
  echo "launch tests: $passed passed, $failed failed"
fi
exit "$status"
