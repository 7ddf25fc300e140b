# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda screen RUN_DIR --output-dir D --batches potential-gain``: a change to behaviour cloning, paired per step.

Every round's behaviour-cloning step of a finished run (``<run>/checkpoints/r00k-bc``, recorded by the loop) is
trained again with one change (``--batches``, ``--steps``, ``--lr``, ``--potential-weight``, ``--programs``) from
the same parent, data and seeds; the recorded checkpoint (what the same replay without the change gives, byte for
byte) and the changed one are scored on the same validation scenes; the steps are pooled paired
(:mod:`coda_loop.comparison`, bootstrap over steps and scenes). One step against itself removes the drift of whole
runs, so a change a loop test could not see in a few seeds shows here first. Validation suites only: the test
suites choose nothing.

Written to ``D``: ``arm/r00k-bc`` (the changed checkpoints), ``eval/{control,arm}-k.json`` (``coda eval --json``
records) and ``screen.json`` (the comparison and the settings). A killed screen run again with the same options
resumes: finished checkpoints and evaluations are kept. ``potential-gain`` batches of a step that recorded no
programs (a run from before the loop recorded them) read the round's Text2potential programs from the run's memory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from coda_loop.config import OOD_SPLITS
from coda_loop.files import atomic_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``coda screen``."""
    parser.add_argument("run_dir", type=Path, help="a finished run folder (its checkpoints/r00k-bc steps)")
    parser.add_argument("--output-dir", type=Path, required=True, help="where the changed steps and scores go")
    parser.add_argument("--rounds", type=int, nargs="+", default=None, help="rounds to screen (default: every one)")
    parser.add_argument("--batches", default=None, help="uniform, stage-balanced or potential-gain")
    parser.add_argument("--steps", type=int, default=None, help="other gradient steps")
    parser.add_argument("--lr", type=float, default=None, help="another peak learning rate")
    parser.add_argument("--potential-weight", type=float, default=None, help="potential-gain strength")
    parser.add_argument("--programs", type=Path, default=None,
                        help="JSON file {family: program source} for potential-gain (default: the round's)")
    parser.add_argument("--split", nargs="+", default=list(OOD_SPLITS), metavar="NAME",
                        help="validation splits scored (default: the four OOD splits)")
    parser.add_argument("--per-family", type=int, default=0, help="first N validation entries per family (0: all)")
    parser.add_argument("--workers", type=int, default=2, help="processes running evaluation episodes")
    parser.add_argument("--boot", type=int, default=10_000, help="bootstrap replicates of the interval")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _fail(message: str) -> int:
    print(f"coda screen: {message}", file=sys.stderr, flush=True)
    return 2


def recorded_steps(run_dir: Path) -> dict[int, Path]:
    """Return round -> checkpoint folder of every behaviour-cloning step the loop recorded in ``run_dir``."""
    return {k: folder for k, (folder, _) in _recorded_steps(run_dir).items()}


def _recorded_steps(run_dir: Path) -> dict[int, tuple[Path, dict[str, Any]]]:
    """Return round -> (checkpoint folder, its parsed config.json) of every recorded behaviour-cloning step."""
    from coda_policy.checkpoint import read_config
    from coda_policy.finetune import FINETUNE_TRAINER

    steps = {}
    for folder in sorted((run_dir / "checkpoints").glob("r[0-9][0-9][0-9]-bc")):
        try:
            config = read_config(folder)
        except ValueError:
            continue
        meta = config.get("meta") or {}
        if meta.get("trainer") == FINETUNE_TRAINER and isinstance(meta.get("finetune"), dict):
            steps[int(folder.name[1:4])] = (folder, config)
    return steps


def round_programs(run_dir: Path, round_index: int) -> dict[str, str]:
    """Return the source of round ``round_index``'s staged potential program per family, from the run's memory."""
    from coda_loop.memory import MemoryStore
    from coda_loop.step_results import ProgramsResult

    with MemoryStore(run_dir / "memory.db") as store:
        planned = store.finished_step(round_index, ProgramsResult)
        if planned is None:
            raise ValueError(f"{run_dir} holds no finished programs step of round {round_index}")
        return store.potential_sources(planned.potentials)


def _evaluate(policy: Path, splits: list[str], per_family: int, workers: int, path: Path) -> None:
    """Score ``policy`` on the validation suites of ``splits`` and write the ``coda eval --json`` record."""
    from coda_policy.eval_command import eval_record
    from coda_policy.evaluation import evaluate_suites
    from coda_policy.suite import default_suites

    suites = list(default_suites(tuple(splits), kind="validation").values())
    start = time.perf_counter()
    result = evaluate_suites(policy, suites, per_family=per_family, workers=workers)
    atomic_json(path, eval_record(policy, suites, result, time.perf_counter() - start, kind="validation",
                                  workers=workers, per_family=per_family))


def _stale(out: Path, rounds: list[int], records: dict[int, dict[str, Any]], configs: dict[int, Any],
           splits: list[str], per_family: int) -> str:
    """Name what an earlier screen in ``out`` did differently (empty: nothing, its files can be kept)."""
    from coda_policy.checkpoint import read_config

    for k in rounds:
        arm = out / "arm" / records[k]["version_id"]
        if (arm / "config.json").is_file() and read_config(arm)["meta"].get("finetune") != configs[k].to_dict():
            return f"{arm} was trained with another change"
        for side in ("control", "arm"):
            path = out / "eval" / f"{side}-{k}.json"
            if path.is_file():
                record = json.loads(path.read_text())
                if record.get("per_family") != per_family or sorted(record.get("suites", {})) != sorted(splits):
                    return f"{path} scored other splits or entries"
    return ""


def run(args: argparse.Namespace) -> int:
    """Screen the change; exit 2 naming what is wrong with the input."""
    from coda_loop.comparison import Side, compare, format_comparison
    from coda_policy.cli import read_programs
    from coda_policy.finetune import finetune, replay_finetune_config

    changes: dict[str, Any] = {k: v for k, v in (("batches", args.batches), ("steps", args.steps), ("lr", args.lr),
                                                 ("potential_weight", args.potential_weight)) if v is not None}
    if not changes and args.programs is None:
        return _fail("nothing to screen: give a change (--batches, --steps, --lr, --potential-weight, --programs)")
    unknown = [s for s in args.split if s not in OOD_SPLITS and s != "id"]
    if unknown:
        return _fail(f"--split {unknown[0]!r} is not a split of the validation suites")
    if args.per_family < 0 or args.workers < 1:
        return _fail(f"--per-family {args.per_family} must be >= 0 and --workers {args.workers} >= 1")
    found = _recorded_steps(args.run_dir)  # each step's config.json, read once
    steps = {k: folder for k, (folder, _) in found.items()}
    if not steps:
        return _fail(f"{args.run_dir} holds no recorded behaviour-cloning step (checkpoints/r00k-bc with "
                     "meta.finetune)")
    rounds = args.rounds if args.rounds is not None else sorted(steps)
    missing = [k for k in rounds if k not in steps]
    if missing:
        return _fail(f"{args.run_dir} records no behaviour-cloning step of round(s) {missing} (has {sorted(steps)})")
    out = args.output_dir
    records = {k: found[k][1] for k in rounds}
    try:
        fixed_programs = read_programs(args.programs) if args.programs is not None else None
        configs = {}
        for k in rounds:
            step = dict(changes)
            recorded = records[k]["meta"]["finetune"]
            if fixed_programs is not None:
                step["programs"] = fixed_programs
            elif step.get("batches", recorded["batches"]) == "potential-gain" and not recorded.get("programs"):
                step["programs"] = round_programs(args.run_dir, k)
            configs[k] = replay_finetune_config(steps[k], recorded=records[k], **step)
        stale = _stale(out, rounds, records, configs, args.split, args.per_family)
    except ValueError as exc:
        return _fail(str(exc))
    if stale:
        return _fail(f"{out} holds a screen with other settings ({stale}); choose another --output-dir")
    (out / "eval").mkdir(parents=True, exist_ok=True)
    arms, controls = [], []
    for k in rounds:
        recorded = records[k]
        version = recorded["version_id"]
        arm = out / "arm" / version
        if not (arm / "config.json").is_file():
            shutil.rmtree(arm, ignore_errors=True)  # a step killed mid-training starts again
            finetune(configs[k], arm, version, recorded["meta"])  # the step's own record is rewritten
        for side, policy, files in (("control", steps[k], controls), ("arm", arm, arms)):
            path = out / "eval" / f"{side}-{k}.json"
            if not path.is_file():
                _evaluate(policy, args.split, args.per_family, args.workers, path)
            files.append(str(path))
    result = compare(Side.parse(arms), Side.parse(controls), n_boot=args.boot)
    summary = {"run_dir": str(args.run_dir), "rounds": rounds,
               "changes": {**changes, **({"programs": str(args.programs)} if args.programs else {})},
               "comparison": result}
    atomic_json(out / "screen.json", summary)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"coda screen: rounds {rounds} of {args.run_dir}, changed {summary['changes']} (each 'seed' below is one "
              "round's step, changed against as recorded)")
        print(format_comparison(result))
    return 0
