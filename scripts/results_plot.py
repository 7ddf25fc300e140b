#!/usr/bin/env python3
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The picture of README.md and docs/results.md, drawn from the committed experiment records.

    python scripts/results_plot.py            # writes docs/images/bench-ood-per-round.svg
    python scripts/results_plot.py --check    # exit 1 when the committed picture differs from the records

Test OOD success (the mean of the position, instruction, object and distractor splits) after every round of the
``bench`` protocol, per method, averaged over the seeds of the records (default: seeds 10-13 at 5,000 cloning steps
per round, ``docs/results/bench-final5k-seed1{0,1,2,3}.json``). Rounds 0 and 8 are scored on 100 held-out scenes
per split and seed, rounds 1-7 on 16. The chart is the report's own SVG line chart
(``coda_loop.report.svg.line_chart``), made a standalone file: an SVG namespace, a white background, a sans-serif
font. Same records, same bytes: the docs test (``test/test_docs.py``) runs ``--check``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coda_loop.report.experiment import METHOD_NAMES, METHODS
from coda_loop.report.svg import ChartLayout, line_chart

REPO = Path(__file__).resolve().parents[1]
RECORDS: tuple[str, ...] = tuple(f"docs/results/bench-final5k-seed1{seed}.json" for seed in range(4))
"""The records drawn by default: the headline table's four seeds."""
OUTPUT = "docs/images/bench-ood-per-round.svg"
"""Where the picture goes (relative to the workspace root)."""
SPLIT = "ood"
"""The ``per_round`` split drawn: the OOD mean."""


def mean_per_round(records: Sequence[Mapping[str, Any]], split: str = SPLIT) -> tuple[list[int], dict[str, list]]:
    """Return the rounds and, per method, the mean over seeds of ``split`` success after each round.

    A method's value at a round is ``None`` unless every seed that ran the method scored that round. Methods that
    only have round 0 (``sft``) are left out: every other method starts from that same policy.
    """
    values: dict[str, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for record in records:
        for method, rows in record.get("per_round", {}).items():
            for row in rows:
                if row["split"] == split:
                    values[method][int(row["round"])][int(row["seed"])] = float(row["mean"])
    rounds = sorted({r for by_round in values.values() for r in by_round})
    ordered = [m for m in METHODS if m in values] + sorted(m for m in values if m not in METHODS)
    series: dict[str, list] = {}
    for method in ordered:
        by_round = values[method]
        if len(by_round) < 2:
            continue
        seeds = {seed for by_seed in by_round.values() for seed in by_seed}
        series[method] = [
            sum(by_round[r].values()) / len(seeds) if set(by_round.get(r, {})) == seeds else None for r in rounds
        ]
    return rounds, series


def standalone(svg: str) -> str:
    """Return an inline SVG chart as a standalone file: namespace, white background, sans-serif text."""
    head, sep, rest = svg.partition(">")
    if not head.startswith("<svg ") or not sep:
        raise ValueError("not an SVG element")
    head = head.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" ', 1)
    return f'{head}>\n<rect width="100%" height="100%" fill="#ffffff"/>{rest}\n'


def picture(paths: Sequence[Path]) -> str:
    """Return the SVG file's text for the records at ``paths``."""
    records = [json.loads(path.read_text()) for path in paths]
    seeds = sorted({int(seed) for record in records for seed in record.get("seeds", [])})
    rounds, series = mean_per_round(records)
    if not series:
        raise ValueError(f"no per-round OOD success in {[str(p) for p in paths]}")
    seed_text = f"seeds {seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else f"seeds {seeds}"
    chart = line_chart(
        title=f"Test OOD success per round, bench protocol, mean of {seed_text}",
        x_label="round (0: the shared behaviour-cloned start)",
        y_label="OOD success rate",
        x=rounds,
        series={METHOD_NAMES.get(m, m) + f" ({m})": v for m, v in series.items()},
        y_min=0.0,
        y_max=1.0,
        layout=ChartLayout(width=760, height=340, right=250, legend_chars=40),
    )
    return standalone(chart)


def main(argv: list[str] | None = None) -> int:
    """Write the picture, or with ``--check`` compare it with the committed file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", type=Path, help="experiment records (default: the headline's four)")
    parser.add_argument("--out", type=Path, default=REPO / OUTPUT, help=f"SVG file to write (default {OUTPUT})")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)
    paths = args.records or [REPO / record for record in RECORDS]
    text = picture(paths)
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} differs from what the records draw: run python scripts/results_plot.py",
                  file=sys.stderr)
            return 1
        print(f"{args.out} matches {len(paths)} records")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} from {len(paths)} records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
