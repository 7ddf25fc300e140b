#!/usr/bin/env bash
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
#
# Coverage-guided fuzzing (atheris / libFuzzer) of what strangers can hand the workspace.
#   scripts/fuzz.sh potential [SECONDS] [libFuzzer flags...]   # the potential-language compiler (default 60 s)
# Runs at the lowest CPU priority. New corpus entries go to fuzz/work/<target>/ (not tracked); the seeds in
# fuzz/corpus/<target>/ are read, never written. An input that breaks the contract is written to
# fuzz/findings/<target>/ (crash-*, timeout-*, oom-*) and the run stops; replay it with
#   python fuzz/potential_compiler.py fuzz/findings/potential/crash-...
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target="${1:-potential}"
seconds="${2:-60}"
shift $(( $# < 2 ? $# : 2 ))
case "$target" in
  potential) harness=fuzz/potential_compiler.py ;;
  *) echo "fuzz.sh: unknown target '$target' (known: potential)" >&2; exit 2 ;;
esac
# shellcheck disable=SC1091
source scripts/env.sh
python -c "import atheris" 2>/dev/null || pip install --quiet --only-binary :all: -r fuzz/requirements.txt
mkdir -p "fuzz/work/$target" "fuzz/findings/$target"
exec nice -n 19 python "$harness" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="fuzz/findings/$target/" "$@" "fuzz/work/$target" "fuzz/corpus/$target"
