# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda export RUN_DIR --mcap FILE [--round R]``: a run's episodes as a rosbag2 MCAP file.

Topics: ``/coda/trajectory``, ``/coda/commands``, ``/coda/keyframes``, ``/coda/episodes``,
``/coda/diagnoses`` (see :mod:`coda_loop.export_mcap`). ``ros2 bag info FILE`` and Foxglove read it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``coda export``."""
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="run folder holding memory.db (runs/<id>)")
    parser.add_argument("--mcap", type=Path, required=True, metavar="FILE", help="MCAP file to write")
    parser.add_argument("--round", type=int, default=-1, metavar="R", help="only round R (default: every round)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def run(args: argparse.Namespace) -> int:
    """Write the file; exit 2 when RUN_DIR is not a run folder or the round holds no episodes."""
    from coda_loop.export_mcap import ExportError, export_run
    from coda_loop.report.data import ReportError

    try:
        summary = export_run(args.run_dir, args.mcap, round_index=args.round)
    except (ReportError, ExportError) as exc:
        print(f"coda export: {exc}", file=sys.stderr)
        return 2
    facts = {
        "file": str(summary.path),
        "bytes": summary.bytes,
        "episodes": summary.episodes,
        "messages": summary.counts,
        "seconds_of_data": round((summary.end_ns - summary.start_ns) / 1e9, 3),
    }
    if args.json:
        print(json.dumps(facts, indent=2))
    else:
        counts = ", ".join(f"{topic} {n}" for topic, n in summary.counts.items())
        print(f"coda export: wrote {summary.path} ({summary.bytes} bytes): {summary.episodes} episodes; {counts}")
    return 0
