# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda compare --arm FILE[:METHOD] ... --control FILE[:METHOD] ...``: a change against its control.

Paired on seeds and scenes, per suite kind and per family (:mod:`coda_loop.comparison`); ``--json`` prints one
object. ``coda eval --json`` outputs compare checkpoints the same way, paired by position.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``coda compare``."""
    parser.add_argument("--arm", nargs="+", required=True, metavar="FILE[:METHOD]",
                        help="results.json of the changed runs (coda experiment), one or more seeds each; "
                             "METHOD defaults to coda; or coda eval --json outputs, paired with --control's by "
                             "position")
    parser.add_argument("--control", nargs="+", required=True, metavar="FILE[:METHOD]",
                        help="results.json of the runs compared against, started from the same round-0 policies")
    parser.add_argument("--boot", type=int, default=10_000, help="bootstrap replicates of the interval")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    """Compare; exit 2 naming what does not fit."""
    from coda_loop.comparison import Side, compare, format_comparison

    try:
        result = compare(Side.parse(args.arm), Side.parse(args.control), n_boot=args.boot)
    except ValueError as error:
        print(f"coda compare: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result) if args.json else format_comparison(result))
    return 0
