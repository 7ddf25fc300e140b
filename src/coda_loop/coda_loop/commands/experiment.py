# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda experiment``: CoDA against its baselines at the same generation budget (the paper's table).

For every seed, round 0 (expert demonstrations, the SFT policy, its held-out evaluation) runs once
as the ``sft`` method; every other method is a ``coda run`` that starts from that policy
(``LoopConfig.base_from``) and spends the same ``budget`` scenes per round for the same number of
rounds. Each method is then scored on the held-out suites of every split after its last round; the
table reports mean and standard deviation over seeds, and the binomial standard error of each mean from the
number of held-out episodes behind it (sampling error, which a single seed also has). Every run is a
resumable run folder under ``--out``: an interrupted experiment continues where it stopped when started
again with the same ``--out``. Seeds can be split over machines with ``--first-seed``: each machine runs
its own ``seed<k>/`` folders, and copying them into one ``--out`` and running over all seeds there
reads the finished runs back and writes the combined table; or, lighter, ``--combine`` merges their
``results.json`` files (which keep every run's scores and per-scene outcomes under ``runs``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from coda_loop.budget import run_budget
from coda_loop.config import METHODS, OOD_SPLITS, PRESETS, SPLITS, LoopConfig, run_config
from coda_loop.step_results import EvaluateResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``coda experiment``."""
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small", help="experiment size")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per method (mean and std over them)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="first seed: runs seeds K .. K+S-1 (to split the seeds of one experiment over machines)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="methods to run")
    parser.add_argument("--workers", type=int, default=2, help="local simulation worker processes")
    parser.add_argument("--out", type=Path, help="experiment folder (default runs/experiment-<preset>)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--set", action="append", default=[], metavar="[METHODS:]KEY=VALUE", dest="overrides",
                        help="a LoopConfig field for every run of the experiment (VALUE as JSON, else a string), "
                             "or only for the comma-separated METHODS (sft: the round-0 runs), e.g. "
                             "--set demonstrator=state_expert --set coda,coda_no_memory:corrective_relabel=1000; "
                             "repeatable, recorded in results.json")
    parser.add_argument("--combine", nargs="+", type=Path, metavar="RESULTS_JSON",
                        help="run nothing: merge the results.json of experiments over different seeds of one "
                             "preset into the table over all of them (written under --out)")


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--set`` options -> ``{method or "*": {field: value}}``; a ValueError names the option that is wrong."""
    fields = {f.name for f in dataclasses.fields(LoopConfig)}
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        head, eq, text = item.partition("=")
        scope, _, key = head.rpartition(":")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"--set {item!r}: expected [METHODS:]KEY=VALUE")
        if key not in fields or key in ("method", "seed", "rounds", "base_from"):
            raise ValueError(f"--set {item!r}: {key!r} is not a LoopConfig field an experiment lets you set")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        methods = [m.strip() for m in scope.split(",")] if scope else ["*"]
        unknown = [m for m in methods if m != "*" and m not in METHODS]
        if unknown:
            raise ValueError(f"--set {item!r}: unknown methods {unknown}; expected some of {', '.join(METHODS)}")
        for method in methods:
            out.setdefault(method, {})[key] = value
    return out


def _run(run_dir: Path, config: LoopConfig) -> dict[str, Any]:
    from coda_loop.rounds import CoevolutionLoop

    loop = CoevolutionLoop(run_dir, config)
    try:
        return loop.run()
    finally:
        loop.close()


def aggregate(finals: dict[str, list[dict[str, float]]],
              episodes: dict[str, list[dict[str, int]]] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """Return ``{method: {split: {"mean", "std"}}}`` (plus ``ood``, the mean of the OOD splits) over seeds.

    With ``episodes`` (per method and seed, the held-out episodes behind each split's rate) every entry also gets
    ``episodes`` (summed over seeds) and ``se``: the binomial standard error of the mean from those episodes alone,
    ``sqrt(p (1 - p) / episodes)`` (for ``ood``, of the average of the OOD splits). ``std`` is the spread over
    seeds; ``se`` is how far one measurement can be off by sampling scenes, which one seed alone still shows.
    """
    results: dict[str, dict[str, dict[str, float]]] = {}
    for method, rows in finals.items():
        results[method] = {}
        counts = (episodes or {}).get(method, [])
        for split in [*SPLITS, "ood"]:
            values = [row[split] for row in rows if split in row]
            if not values:
                continue
            entry = {"mean": float(np.mean(values)), "std": float(np.std(values))}
            if counts and len(counts) == len(rows):
                parts = ([s for s in OOD_SPLITS if all(s in row for row in rows)]  # the OOD splits evaluated
                         if split == "ood" else [split])
                totals = [sum(c.get(part, 0) for c in counts) for part in parts]
                means = [float(np.mean([row[part] for row in rows])) if part != split else entry["mean"]
                         for part in parts]
                if all(totals):
                    variance = sum(m * (1 - m) / n for m, n in zip(means, totals, strict=True)) / len(parts) ** 2
                    entry["episodes"] = int(sum(totals))
                    entry["se"] = float(np.sqrt(variance))
            results[method][split] = entry
    return results


def last_outcomes(run_dir: Path, rounds: int) -> dict[str, Any]:
    """Per-scene outcomes of a run's last evaluation: ``{"test": {split: {scene: 0/1}}, "validation": ...}``."""
    from coda_loop.memory import MemoryStore

    with MemoryStore(run_dir / "memory.db") as store:
        done = store.finished_step(rounds, EvaluateResult)
    if done is None:
        return {"test": {}}
    out: dict[str, Any] = {"test": done.outcomes}
    if done.validation is not None:
        out["validation"] = done.validation.outcomes
    return out


def paired(outcomes: dict[str, dict[int, dict[str, Any]]], reference: str = "coda",
           seed: int = 0) -> dict[str, dict[str, Any]]:
    """Return ``reference`` minus every other method in OOD mean, paired on scenes and seeds (test, validation).

    ``outcomes``: method -> seed -> :func:`last_outcomes`. Methods without per-scene outcomes are left out.
    """
    from coda_loop.comparison import paired_ood

    result: dict[str, dict[str, Any]] = {}
    ref = outcomes.get(reference, {})
    for method, by_seed in outcomes.items():
        if method == reference or not ref:
            continue
        row: dict[str, Any] = {}
        for kind in ("test", "validation"):
            a = {s: o[kind] for s, o in ref.items() if o.get(kind)}
            b = {s: o[kind] for s, o in by_seed.items() if o.get(kind)}
            try:
                pair = paired_ood(a, b, seed)
            except ValueError as error:
                row[kind] = {"error": str(error)}
                continue
            if pair is not None:
                row[kind] = pair
        if row:
            result[method] = row
    return result


def _run_record(run_dir: Path, config: LoopConfig, summary: dict[str, Any]) -> dict[str, Any]:
    """Return what the table needs of one finished run: last-round scores, episode counts, per-scene outcomes."""
    last = summary["rounds"][-1]
    per_family = last.get("episodes_per_family") or {}
    record: dict[str, Any] = {
        "final": {**last["per_split"], "ood": last["ood"]},
        "episodes": {split: int(n) * len(config.families) for split, n in per_family.items()},
        "outcomes": last_outcomes(run_dir, config.rounds),
        "rounds": [{"round": row["round"], **row["per_split"], "ood": row["ood"]} for row in summary["rounds"]],
        "code": summary.get("code", []),
        "budget": run_budget(run_dir),
    }
    if "validation" in last:
        record["validation"] = {**last["validation"]["per_split"], "ood": last["validation"]["ood"]}
    return record


def summarize(runs: dict[str, dict[str, dict[str, Any]]], preset: str, settings: dict[str, Any],
              seconds: float) -> dict[str, Any]:
    """Return the experiment's result from its finished runs (``runs``: method -> seed -> :func:`_run_record`).

    The result keeps ``runs`` itself, so result files of experiments over different seeds combine
    (``coda experiment --combine``) into the table over all of them.
    """
    methods = list(runs)
    seeds = sorted({int(seed) for by_seed in runs.values() for seed in by_seed})
    finals = {m: [runs[m][str(s)]["final"] for s in seeds if str(s) in runs[m]] for m in methods}
    counts = {m: [runs[m][str(s)]["episodes"] for s in seeds if str(s) in runs[m]] for m in methods}
    validation = {m: [runs[m][str(s)]["validation"] for s in seeds if "validation" in runs[m].get(str(s), {})]
                  for m in methods}
    outcomes = {m: {s: runs[m][str(s)]["outcomes"] for s in seeds if str(s) in runs[m]} for m in methods}
    per_round = {m: [{"round": row["round"], "split": split, "mean": value, "seed": s}
                     for s in seeds if str(s) in runs[m] for row in runs[m][str(s)]["rounds"]
                     for split, value in row.items() if split != "round"] for m in methods}
    return {
        "preset": preset,
        "results": aggregate(finals, counts),
        "paired": paired(outcomes),
        "validation": aggregate({m: rows for m, rows in validation.items() if rows}),
        "budget": settings["budget"],
        "rounds": settings["rounds"],
        "seeds": seeds,
        "per_round": per_round,
        "code": {m: {str(s): runs[m][str(s)]["code"] for s in seeds if str(s) in runs[m]} for m in methods},
        "settings": settings,
        "runs": runs,
        "seconds": round(seconds, 1),
    }


def protocol_of(settings: Any) -> Any:
    """Return the protocol a result's ``settings`` describe: the preset with every method's ``--set`` applied.

    ``overrides["*"]`` goes into ``loop`` (``budget`` into ``budget``); per-method options stay apart. So a preset
    value given by ``--set`` before the preset changed to it and the changed preset are one protocol.
    """
    if not isinstance(settings, dict):
        return settings
    overrides = dict(settings.get("overrides") or {})
    every = dict(overrides.pop("*", {}))
    protocol = {key: value for key, value in settings.items() if key != "overrides"}
    if "budget" in every:
        protocol["budget"] = every.pop("budget")
    protocol["loop"] = {**protocol.get("loop", {}), **every}
    if overrides:
        protocol["overrides"] = overrides
    return protocol


def combine(paths: list[Path]) -> dict[str, Any]:
    """Merge the ``results.json`` of experiments run over different seeds (same preset) into one result.

    The files must describe one protocol (:func:`protocol_of` their settings); a method and seed present in two
    files must hold the same record there; a ValueError names the file and what does not fit.
    """
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    preset: str | None = None
    settings: dict[str, Any] | None = None
    protocol: Any = None
    seconds = 0.0
    for i, path in enumerate(paths):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: not a readable results.json ({error})") from error
        if not isinstance(data, dict) or not isinstance(data.get("runs"), dict):
            raise ValueError(f"{path}: has no per-run records ('runs'); rerun coda experiment on its folder "
                             "to write them")
        if i == 0:  # the first file's protocol; every other file must describe the same
            preset, settings, protocol = data.get("preset"), data.get("settings"), protocol_of(data.get("settings"))
        elif (data.get("preset"), protocol_of(data.get("settings"))) != (preset, protocol):
            raise ValueError(f"{path}: preset {data.get('preset')!r} or its settings differ from {paths[0]}'s "
                             f"({preset!r}); only results of one protocol combine")
        seconds += float(data.get("seconds", 0.0))
        for method, by_seed in data["runs"].items():
            for seed, record in by_seed.items():
                known = runs.setdefault(method, {}).get(seed)
                if known is not None and known != record:
                    raise ValueError(f"{path}: method {method} seed {seed} differs from an earlier file's run")
                runs[method][seed] = record
    if preset is None or settings is None:
        raise ValueError("coda experiment --combine: no results file given")
    return summarize(runs, preset, settings, seconds)


def _write(result: dict[str, Any], out: Path, as_json: bool) -> None:
    """Write ``results.json`` and the table under ``out``; print the result."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    from coda_loop.report.experiment import render_experiment

    table, page = render_experiment(result, out)
    if as_json:
        print(json.dumps(result))
        return
    print(table.read_text())
    sft = result["results"].get("sft", {}).get("ood", {}).get("mean")
    coda = result["results"].get("coda", {}).get("ood", {}).get("mean")
    if sft is not None and coda is not None:
        print(f"coda experiment: OOD success sft {sft:.1%} -> coda {coda:.1%}; splits {', '.join(OOD_SPLITS)}")
    print(f"coda experiment: {result['seconds']} s; table {table}, plots {page}")


def run(args: argparse.Namespace) -> int:
    """Run every method for every seed (or combine result files); print and write the table."""
    if getattr(args, "combine", None):
        out = args.out or Path("runs") / "experiment-combined"
        try:
            result = combine(list(args.combine))
        except ValueError as error:
            print(f"coda experiment: {error}", file=sys.stderr)
            return 2
        _write(result, out, args.json)
        return 0
    if args.seeds < 1 or args.workers < 0 or args.first_seed < 0:
        print("coda experiment: --seeds must be >= 1, --workers and --first-seed >= 0", file=sys.stderr)
        return 2
    preset = PRESETS[args.preset]
    try:
        overrides = parse_overrides(list(getattr(args, "overrides", []) or []))

        def fields_of(method: str, seed: int) -> dict[str, Any]:
            """LoopConfig fields of one run (the run folder's own config.json wins over them when it exists)."""
            return {**preset.loop, "budget": preset.budget, **overrides.get("*", {}), **overrides.get(method, {}),
                    "seed": seed, "workers": args.workers, "progress": not args.quiet, "method": method}

        for method in {"sft", *args.methods}:  # every bad --set is named before anything runs
            LoopConfig(**fields_of(method, args.first_seed))
    except (ValueError, TypeError) as error:
        print(f"coda experiment: {error}", file=sys.stderr)
        return 2
    out = args.out or Path("runs") / f"experiment-{args.preset}"
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    runs: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in args.methods}
    methods = ["sft", *[m for m in args.methods if m != "sft"]]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    for seed in seeds:
        base_dir = out / f"seed{seed}" / "sft"
        for method in methods:
            run_dir = out / f"seed{seed}" / method
            fields = fields_of(method, seed)
            held = run_config(run_dir)
            if held is not None:  # a run started before goes on with its own settings
                config = dataclasses.replace(held, progress=not args.quiet)
            elif method == "sft":
                config = LoopConfig(**{**fields, "rounds": 0})
            else:
                config = LoopConfig(**{**fields, "rounds": preset.rounds, "base_from": str(base_dir.resolve())})
            print(f"coda experiment: seed {seed} {method} -> {run_dir}", flush=True)
            summary = _run(run_dir, config)
            if method in runs:
                runs[method][str(seed)] = _run_record(run_dir, config, summary)
    settings = dataclasses.asdict(preset)
    if overrides:
        settings["overrides"] = overrides
    result = summarize(runs, args.preset, settings, time.monotonic() - start)
    _write(result, out, args.json)
    return 0
