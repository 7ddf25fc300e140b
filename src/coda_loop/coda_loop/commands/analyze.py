# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda analyze RUN_DIR ...``: where each run's generation budget went and what it bought.

Per round: scenes per family and allocation kind, the share spent on scenes and conditions the acting policy
already solved, corrective demonstrations, the share of the cloning set that is new, RL gate results and
the held-out success; per targeted condition, success before and after the round that targeted it
(:mod:`coda_loop.analysis`). Runs of the first run's seed are checked against it: through which round they
cloned byte-identical weights (where an ablation starts to differ). ``--json`` prints one object per run; those of
the first run's seed also hold ``same_weights_as_first_through`` (for the first run: its own last round).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``coda analyze``."""
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run folders (coda run / coda experiment)")
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per run")


def run(args: argparse.Namespace) -> int:
    """Analyse every run folder; exit 2 naming a folder that is not a run."""
    from coda_loop.analysis import analyze_run, format_analysis, format_shared, weights_shared_through

    results = []
    for run_dir in args.run_dirs:
        try:
            results.append(analyze_run(run_dir))
        except ValueError as error:
            print(f"coda analyze: {error}", file=sys.stderr)
            return 2
    for result in results:
        if result["seed"] == results[0]["seed"]:
            result["same_weights_as_first_through"] = weights_shared_through(results[0], result)
    if args.json:
        print(json.dumps(results))
    else:
        print("\n\n".join([*(format_analysis(r) for r in results), *(["\n".join(format_shared(results))]
                                                                      if len(results) > 1 else [])]))
    return 0
