# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda report RUN_DIR``: one self-contained HTML page of a run (plots and tables), viewable offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``coda report``."""
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="run folder holding memory.db (runs/<id>)")
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="where to write the page (default RUN_DIR/report.html)"
    )


def run(args: argparse.Namespace) -> int:
    """Write the page; exit 2 when RUN_DIR is not a run folder."""
    from coda_loop.report.data import ReportError
    from coda_loop.report.html import write_report

    try:
        path = write_report(args.run_dir, args.out)
    except ReportError as exc:
        print(f"coda report: {exc}", file=sys.stderr)
        return 2
    print(f"coda report: wrote {path} ({path.stat().st_size} bytes)")
    return 0
