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
exec python -m pytest "$@"
