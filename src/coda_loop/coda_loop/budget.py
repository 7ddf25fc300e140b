# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What a run spent, round by round: the record behind "every method gets the same budget".

:func:`run_budget` reads a finished (or partly finished) run folder's memory and returns, for every round after
round 0 (round 0 is the seed's shared ``sft`` run), what the round spent:

===================  ==========================================================================================
``scenes``           generated scenes (the generation budget), besides ``probe_scenes``
``episodes``         policy episodes simulated on them (generated and probe scenes)
``env_steps``        control steps of those episodes
``expert_labels``    rows of the round's new demonstrations: every one a state labelled by the expert (steps
                     from a scene's start, corrective recoveries and relabelled policy steps alike)
``corrective``       failed scenes taken over by the expert / of them recovered (0 / 0 without corrective data)
``cloning_steps``    behaviour-cloning gradient steps
``ppo_env_steps``    PPO environment steps, and ``ppo_gate``: the gate's success before / after and whether the
                     update was kept (None without PPO)
``bc_gate``          the same for the behaviour-cloning gate (None when it is off)
``seconds``          wall time of the round's steps (each step from the end of the one before, or from the run's
                     start when it was resumed in between)
===================  ==========================================================================================

:func:`label_spread` compares the expert labels of the methods of one experiment round by round, seed by seed:
the figure the method table prints next to the scores. Pure module: no rclpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coda_loop.step_results import EpisodesResult, GenerateResult, TrainResult

TOTALS = ("scenes", "episodes", "env_steps", "expert_labels", "cloning_steps", "ppo_env_steps", "seconds")
"""Fields of a round that :func:`run_budget` sums over rounds."""
LABEL_TOLERANCE = 0.10
"""Expert labels of two methods in one round and seed may differ by this share of the larger before the method
table says so (:func:`label_spread`)."""


def step_seconds(finished: list[tuple[int, str, float]], starts: list[float]) -> dict[tuple[int, str], float]:
    """Return (round, step) -> wall seconds from the steps' finishing times and the run's start times.

    A step took from the later of the previous step's end and the last start before it, to its own end.
    """
    out: dict[tuple[int, str], float] = {}
    previous = None
    for r, step, t in sorted(finished, key=lambda row: row[2]):
        begun = max([s for s in starts if s <= t] + ([previous] if previous is not None else []), default=t)
        out[(r, step)] = max(t - begun, 0.0)
        previous = t
    return out


def run_budget(run_dir: Path | str) -> dict[str, Any]:
    """Return ``{"rounds": [per round after round 0], "totals": {...}}`` of a run folder (module docstring)."""
    from coda_loop.config import run_config
    from coda_loop.memory import MemoryStore

    run_dir = Path(run_dir)
    config = run_config(run_dir)
    if config is None:
        raise ValueError(f"{run_dir} is not a run folder (no config.json)")
    with MemoryStore(run_dir / "memory.db") as store:
        seconds = step_seconds(store.step_times(), [s["started"] for s in store.starts()])
        rounds = []
        for r in range(1, config.rounds + 1):
            train = store.finished_step(r, TrainResult)
            if train is None:
                break
            gen = store.finished_step(r, GenerateResult)
            ran = store.finished_step(r, EpisodesResult)
            lengths = []
            for episode_id in ran.episode_ids if ran is not None else []:
                record = store.get("episode", episode_id)
                lengths.append(int(record.payload.get("length", 0)) if record is not None else 0)
            rl = train.rl
            rounds.append({
                "round": r,
                "scenes": len(gen.scene_ids) if gen is not None else 0,
                "probe_scenes": len(gen.probe_ids) if gen is not None else 0,
                "episodes": len(lengths),
                "env_steps": sum(lengths),
                "expert_labels": int(train.new_steps),
                "new_demos": int(train.new_demos),
                "corrective": ([train.corrective.failed_scenes, train.corrective.recovered]
                               if train.corrective is not None else [0, 0]),
                "cloning_steps": config.finetune_steps if train.bc_version else 0,
                "ppo_env_steps": int(rl.env_steps) if rl is not None else 0,
                "ppo_gate": ({"family": rl.family, "before": rl.success_before, "after": rl.success_after,
                              "kept": rl.kept} if rl is not None else None),
                "bc_gate": ({"before": train.bc_gate.before, "after": train.bc_gate.after, "kept": train.bc_gate.kept}
                            if train.bc_gate is not None else None),
                "seconds": round(sum(v for (k, _), v in seconds.items() if k == r), 1),
            })
    totals: dict[str, Any] = {key: sum(row[key] for row in rounds) for key in TOTALS}
    totals["seconds"] = round(totals["seconds"], 1)
    gates = [row["ppo_gate"] for row in rounds if row["ppo_gate"] is not None]
    totals["ppo_kept"] = [sum(g["kept"] for g in gates), len(gates)]
    return {"rounds": rounds, "totals": totals}


def label_spread(budgets: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Compare the expert labels of the methods that spent them (``budgets``: method -> seed -> :func:`run_budget`).

    Returns ``{"largest": share, "where": (seed, round, method with most, its labels, method with fewest, its
    labels), "within": share <= LABEL_TOLERANCE}``: the largest difference between two methods' expert labels in
    one round of one seed, as a share of the larger. Methods without labels in a round (none ran) are left out.
    """
    largest, where = 0.0, None
    seeds = sorted({seed for by_seed in budgets.values() for seed in by_seed})
    for seed in seeds:
        per_round: dict[int, dict[str, int]] = {}
        for method, by_seed in budgets.items():
            for row in (by_seed.get(seed) or {}).get("rounds", []):
                per_round.setdefault(int(row["round"]), {})[method] = int(row["expert_labels"])
        for r, labels in sorted(per_round.items()):
            if len(labels) < 2:
                continue
            most = max(sorted(labels), key=lambda m: labels[m])
            fewest = min(sorted(labels), key=lambda m: labels[m])
            share = (labels[most] - labels[fewest]) / labels[most] if labels[most] else 0.0
            if share > largest:
                largest, where = share, (seed, r, most, labels[most], fewest, labels[fewest])
    return {"largest": largest, "where": where, "within": largest <= LABEL_TOLERANCE}


def budget_table(budgets: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """Markdown: per method, the mean per seed of every total, PPO updates kept, and the expert-label spread."""
    if not any(budgets.values()):
        return ""
    lines = ["", "Budget spent per run (rounds after round 0, mean over seeds; `coda_loop.budget`):", "",
             "| method | seeds | scenes | episodes | env steps | expert labels | cloning steps | PPO env steps "
             "| PPO kept | wall min |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for method, by_seed in budgets.items():
        rows = [b["totals"] for b in by_seed.values() if b and b["rounds"]]
        if not rows:
            continue

        def mean(key: str, rows: list[Mapping[str, Any]] = rows) -> float:
            return sum(float(row[key]) for row in rows) / len(rows)

        kept = [sum(row["ppo_kept"][0] for row in rows), sum(row["ppo_kept"][1] for row in rows)]
        lines.append(f"| {method} | {len(rows)} | {mean('scenes'):.0f} | {mean('episodes'):.0f} | "
                     f"{mean('env_steps'):,.0f} | {mean('expert_labels'):,.0f} | {mean('cloning_steps'):,.0f} | "
                     f"{mean('ppo_env_steps'):,.0f} | {kept[0]}/{kept[1]} | {mean('seconds') / 60:.1f} |")
    spread = label_spread(budgets)
    if spread["where"] is None:
        return "\n".join(lines) + "\n"
    seed, r, most, n_most, fewest, n_fewest = spread["where"]
    verdict = (f"Expert labels per round: every two methods within {LABEL_TOLERANCE:.0%} of each other"
               if spread["within"] else "Expert labels per round differ by more than "
               f"{LABEL_TOLERANCE:.0%}")
    lines += ["", f"{verdict}; the largest difference is {spread['largest']:.1%} (seed {seed}, round {r}: {most} "
                  f"{n_most:,}, {fewest} {n_fewest:,})."]
    return "\n".join(lines) + "\n"
