# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda eval --policy CKPT [--suite FILE ... | --validation] [--split NAME ...] [options] [--json]``.

Success of a policy checkpoint (a version folder) on held-out suites (:mod:`coda_policy.suite`): the shipped
test suites of ``--split`` (default all five), the shipped validation suites with ``--validation``, or the given
suite files. Prints a table (split x family), or with ``--json`` one object ``{"policy", "results": {split:
{family: rate, "mean": x}}, "outcomes": {split: {scene_id: 0 or 1}}, "kind", "episodes", "seconds", ...}`` (``kind``:
``test``, ``validation`` or ``files`` for ``--suite``); the per-scene outcomes let two checkpoints be compared
paired on the same scenes (``coda compare``). A bad checkpoint folder, suite file or option
exits with code 2 and a message naming what was wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from coda_engine.sim.scene import SPLITS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``coda eval``."""
    parser.add_argument("--policy", type=Path, required=True, help="checkpoint version folder (config.json + weights)")
    parser.add_argument(
        "--suite",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="suite file (repeatable; default: the shipped suites of --split)",
    )
    parser.add_argument(
        "--validation",
        action="store_true",
        help="the shipped validation suites instead of the test suites (choose designs on these; not with --suite)",
    )
    parser.add_argument(
        "--split",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"splits to evaluate, of {list(SPLITS)} (default: all; with --suite: keep those splits)",
    )
    parser.add_argument("--per-family", type=int, default=0, help="first N entries per family of each suite (0: all)")
    parser.add_argument("--workers", type=int, default=1, help="processes running episodes (spawned)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _fail(message: str) -> int:
    print(f"coda eval: {message}", file=sys.stderr, flush=True)
    return 2


def _suites(args: argparse.Namespace) -> list[Any]:
    """Return the suites to run (SuiteError / ValueError name the problem)."""
    from coda_policy.suite import default_suites, load_suite

    splits = args.split
    if splits is not None:
        unknown = [s for s in splits if s not in SPLITS]
        if unknown:
            raise ValueError(f"--split {unknown[0]!r} is not one of {list(SPLITS)}")
    if args.suite and args.validation:
        raise ValueError("--validation picks the shipped validation suites; it cannot be combined with --suite")
    if not args.suite:
        kind = "validation" if args.validation else "test"
        return list(default_suites(tuple(splits) if splits is not None else SPLITS, kind=kind).values())
    suites = [load_suite(path) for path in args.suite]
    if splits is not None:
        suites = [s for s in suites if s.split in splits]
        if not suites:
            raise ValueError(f"none of the --suite files is of the splits {splits}")
    return suites


def results_table(results: dict[str, dict[str, float]]) -> str:
    """Plain-text table: one row per split, one column per family and the mean."""
    from coda_policy.suite import ordered_families

    families = ordered_families({f for fam in results.values() for f in fam if f != "mean"})
    header = ["split", *families, "mean"]
    rows = [
        [split, *(f"{fam[f]:.2f}" if f in fam else "-" for f in families), f"{fam['mean']:.2f}"]
        for split, fam in results.items()
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in [header, *rows]
    )


def eval_record(policy: Path, suites: list[Any], result: Any, seconds: float, *, kind: str, workers: int,
                per_family: int) -> dict[str, Any]:
    """Return the ``--json`` object of an evaluation (``result``: ``evaluate_suites``'s) of ``policy``."""
    results = {
        split: {**{f: round(v, 6) for f, v in fam.items()}, "mean": round(result.per_split[split], 6)}
        for split, fam in result.rates.items()
    }
    return {
        "policy": str(policy),
        "results": results,
        "outcomes": result.outcomes(),
        "kind": kind,
        "episodes": len(result.episodes),
        "seconds": round(seconds, 3),
        "workers": workers,
        "per_family": per_family,
        "suites": {s.split: str(s.path) for s in suites},
    }


def run(args: argparse.Namespace) -> int:
    """Evaluate and print; 2 on a bad checkpoint, suite file or option."""
    from tqdm import tqdm

    from coda_policy.evaluation import CheckpointError, evaluate_suites, load_checkpoint
    from coda_policy.suite import SuiteError

    if args.per_family < 0:
        return _fail(f"--per-family {args.per_family} must be >= 0")
    if args.workers < 1:
        return _fail(f"--workers {args.workers} must be >= 1")
    start = time.perf_counter()
    try:
        load_checkpoint(args.policy)
        suites = _suites(args)
    except (CheckpointError, SuiteError, ValueError) as exc:
        return _fail(str(exc))
    total = sum(len(s.select(args.per_family)) for s in suites)
    bar = tqdm(
        total=total, desc="coda eval", unit="episode", file=sys.stderr, disable=args.no_progress, dynamic_ncols=True
    )
    try:
        result = evaluate_suites(
            args.policy,
            suites,
            per_family=args.per_family,
            workers=args.workers,
            progress=lambda done, _: bar.update(done - bar.n),
        )
    except (CheckpointError, ValueError) as exc:
        return _fail(str(exc))
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    kind = "files" if args.suite else "validation" if args.validation else "test"
    record = eval_record(args.policy, suites, result, seconds, kind=kind, workers=args.workers,
                         per_family=args.per_family)
    if args.json:
        print(json.dumps(record))
        return 0
    results = record["results"]
    print(
        f"policy {args.policy}: {len(result.episodes)} episodes in {seconds:.1f} s "
        f"({args.workers} worker{'s' if args.workers > 1 else ''})"
    )
    print(results_table(results))
    return 0
