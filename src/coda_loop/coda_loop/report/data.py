# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What the run report shows, read from a run's memory: :class:`ReportData` and the series of its plots.

:func:`open_store` opens a run folder's memory (a :class:`ReportError` names what is missing), :func:`collect` reads
it into plain data, and ``success_by_split``, ``failure_modes``, ``budget_allocation`` and ``stage_progress`` turn
that data into plot series (:mod:`coda_loop.report.html` draws them). Pure module: no rclpy.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda_loop.step_results import DiagnoseResult, EpisodesResult

SPLIT_ORDER: tuple[str, ...] = ("id", "position", "instruction", "object", "distractor")
"""Splits in display order (``id`` is in distribution, the others are OOD)."""
RECORD_KINDS: tuple[str, ...] = (
    "scene",
    "episode",
    "diagnosis",
    "generation_program",
    "training_program",
    "potential_program",
    "progress",
    "policy_version",
    "critic_version",
    "intervention",
)
"""Record kinds counted in the summary (``coda_msgs/MemoryEvent`` KIND_*)."""
MAX_STACKS = 9
"""Most series of a stacked bar chart; the smallest ones merge into ``other``."""
NO_STAGE_PURPOSES = frozenset({"demo"})
"""Episode purposes left out of the potential-stage plot (scripted demonstrations measure the expert)."""


class ReportError(ValueError):
    """A run folder that cannot be reported on; the message says what is wrong."""


@dataclass(frozen=True)
class Item:
    """One memory record as the report uses it."""

    round: int
    """Round the record was written in."""
    record_id: str
    """Record id."""
    payload: dict[str, Any]
    """The record."""


@dataclass
class ReportData:
    """Everything the page shows, as plain data."""

    title: str
    """Page title (the run folder name)."""
    source: str
    """Where the data came from (the database path)."""
    counts: dict[str, int] = field(default_factory=dict)
    """Records per kind."""
    progress: list[dict[str, Any]] = field(default_factory=list)
    """``MemoryStore.progress()`` rows."""
    episodes: list[dict[str, Any]] = field(default_factory=list)
    """Per episode: round, family, purpose, success, stage_reached, num_stages, policy_version."""
    diagnoses: list[Item] = field(default_factory=list)
    """Diagnosis records (``Diagnosis.to_dict()`` payloads)."""
    generation_programs: list[Item] = field(default_factory=list)
    """``GenerationProgram.to_dict()`` payloads."""
    potential_programs: list[Item] = field(default_factory=list)
    """``ProgramSpec.to_dict()`` payloads."""
    training_programs: list[Item] = field(default_factory=list)
    """Training program payloads."""
    policy_versions: list[Item] = field(default_factory=list)
    """Policy version payloads (version_id, parent, checkpoint hash, metrics)."""
    critic_versions: list[Item] = field(default_factory=list)
    """Critic version payloads."""
    finished_steps: list[tuple[int, str]] = field(default_factory=list)
    """Loop steps marked finished, (round, step)."""
    critic_agreement: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    """Per round: the ``learned`` part of the finished diagnose step (``grounded+learned`` runs)."""
    arms: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    """Per round with real arms: ``by_source``, ``by_robot`` and ``arm_notes`` of the finished episodes step."""
    interventions: list[Item] = field(default_factory=list)
    """Safety interventions on real arms (``SafetyEvent`` fields)."""
    starts: list[dict[str, Any]] = field(default_factory=list)
    """``MemoryStore.starts()``: each start of the run with the code and machine it ran on."""
    generated: float = field(default_factory=time.time)
    """Unix time the data was read."""

    @property
    def finished_rounds(self) -> list[int]:
        """Rounds with learning progress recorded."""
        return sorted({int(r["round"]) for r in self.progress})


# ---------------------------------------------------------------------------------------------------------------------
# reading the memory


def _items(records: Iterable[Any]) -> list[Item]:
    return [Item(int(r.round), str(r.record_id), dict(r.payload)) for r in records]


ALL = 2**62
"""A ``limit`` larger than any memory."""


def all_records(store: Any, kind: str, *, round_min: int = -1, round_max: int = -1) -> list[Any]:
    """Every record of ``kind`` within the round range (-1: open), oldest first."""
    # MemoryStore.records has no upper bound on ``limit`` (only QueryMemory caps it); newest first.
    return sorted(store.records(kind, round_min=round_min, round_max=round_max, limit=ALL), key=lambda r: r.sequence)


def collect(store: Any, title: str = "") -> ReportData:
    """Read what the report shows from an open memory store."""
    scenes = {r.record_id: r.payload for r in all_records(store, "scene")}
    data = ReportData(title=title or Path(store.path).parent.name, source=str(store.path))
    for kind in RECORD_KINDS:
        data.counts[kind] = len(all_records(store, kind)) if kind != "scene" else len(scenes)
    data.progress = [dict(r) for r in store.progress()]
    for rec in all_records(store, "episode"):
        p = rec.payload
        scene = scenes.get(str(p.get("scene_id", "")), {})
        data.episodes.append(
            {
                "round": int(rec.round),
                "episode_id": rec.record_id,
                "family": str(p.get("family") or scene.get("family") or "unknown"),
                "split": str(p.get("split") or scene.get("split") or ""),
                "purpose": str(p.get("purpose", "")),
                "success": bool(p.get("success", False)),
                "stage_reached": int(p.get("stage_reached", 0)),
                "num_stages": int(p.get("num_stages", 0)),
                "policy_version": str(p.get("policy_version", "")),
            }
        )
    data.diagnoses = _items(all_records(store, "diagnosis"))
    data.generation_programs = _items(all_records(store, "generation_program"))
    data.potential_programs = _items(all_records(store, "potential_program"))
    data.training_programs = _items(all_records(store, "training_program"))
    data.policy_versions = _items(all_records(store, "policy_version"))
    data.critic_versions = _items(all_records(store, "critic_version"))
    data.finished_steps = list(store.finished_steps())
    for rnd, step in data.finished_steps:
        if step == DiagnoseResult.STEP:
            diagnosed = store.finished_step(rnd, DiagnoseResult)
            if diagnosed is not None and diagnosed.learned is not None:
                data.critic_agreement.append((int(rnd), diagnosed.learned.to_dict()))
        elif step == EpisodesResult.STEP:
            ran = store.finished_step(rnd, EpisodesResult)
            if ran is not None and ran.real_arms is not None:
                data.arms.append((int(rnd), ran.real_arms.to_dict()))
    data.interventions = _items(all_records(store, "intervention"))
    data.starts = list(store.starts())
    return data


def open_run(run_dir: Path) -> Path:
    """Return ``run_dir/memory.db``; raise :class:`ReportError` naming what is missing."""
    if not run_dir.exists():
        raise ReportError(f"run folder {run_dir} does not exist")
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a folder (expected a run folder such as runs/<id>/)")
    db = run_dir / "memory.db"
    if not db.is_file():
        raise ReportError(f"{run_dir} holds no memory.db (not a run folder written by coda run?)")
    return db


# ---------------------------------------------------------------------------------------------------------------------
# aggregation (plain data -> plot series)


def split_key(split: str) -> tuple[int, str]:
    """Sort key of a split: the order of SPLIT_ORDER, unknown splits last by name."""
    return (SPLIT_ORDER.index(split) if split in SPLIT_ORDER else len(SPLIT_ORDER), split)


def success_by_split(progress: Sequence[Mapping[str, Any]]) -> tuple[list[int], dict[str, list[float | None]]]:
    """Return the rounds and, per split, the success over all families (weighted by episodes) of each round."""
    sums: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for row in progress:
        acc = sums[(int(row["round"]), str(row["split"]))]
        n = max(int(row.get("episodes", 0)), 0)
        acc[0] += float(row["success"]) * n
        acc[1] += n
        acc[2] += float(row["success"])
        acc[3] += 1
    rounds = sorted({r for r, _ in sums})
    splits = sorted({s for _, s in sums}, key=split_key)
    series: dict[str, list[float | None]] = {}
    for split in splits:
        values: list[float | None] = []
        for rnd in rounds:
            acc = sums.get((rnd, split))
            values.append(None if acc is None else (acc[0] / acc[1] if acc[1] > 0 else acc[2] / acc[3]))
        series[split] = values
    return rounds, series


def _top_stacks(per_round: Mapping[int, Counter[str]], rounds: Sequence[int]) -> dict[str, list[float]]:
    totals: Counter[str] = Counter()
    for counter in per_round.values():
        totals.update(counter)
    names = [n for n, _ in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))]
    keep, rest = names[:MAX_STACKS], names[MAX_STACKS:]
    if len(rest) == 1:
        keep, rest = names, []
    stacks = {n: [float(per_round.get(r, Counter())[n]) for r in rounds] for n in keep}
    if rest:
        stacks["other"] = [float(sum(per_round.get(r, Counter())[n] for n in rest)) for r in rounds]
    return stacks


def failure_modes(diagnoses: Sequence[Item]) -> tuple[list[int], dict[str, list[float]]]:
    """Return the rounds and, per failure mode, the number of failure diagnoses of each round."""
    per_round: dict[int, Counter[str]] = defaultdict(Counter)
    for d in diagnoses:
        mode = str(d.payload.get("failure_mode", ""))
        if mode and mode != "success":
            per_round[d.round][mode] += 1
    rounds = sorted(per_round)
    return rounds, _top_stacks(per_round, rounds)


def allocation_label(allocation: Mapping[str, Any]) -> str:
    """Legend name of a budget allocation: its family and, for targeted lines, the target conditions."""
    family = str(allocation.get("family", "?"))
    kind = str(allocation.get("kind", ""))
    conditions = [
        f"{c.get('key')}={c.get('value')}" for c in allocation.get("conditions", []) if c.get("key") != "family"
    ]
    if kind == "targeted":
        return f"{family}: {', '.join(conditions)}" if conditions else f"{family} (targeted)"
    return f"{family} ({kind})" if kind else family


def program_round(item: Item) -> int:
    """Return the round a program was made for (its payload's ``round``, else the record's)."""
    try:
        return int(item.payload.get("round", item.round))
    except (TypeError, ValueError):
        return item.round


def budget_allocation(programs: Sequence[Item]) -> tuple[list[int], dict[str, list[float]]]:
    """Return the rounds and, per family / target, the scenes the generation programs of each round allocate."""
    per_round: dict[int, Counter[str]] = defaultdict(Counter)
    for program in programs:
        rnd = program_round(program)
        for allocation in program.payload.get("allocations", []):
            per_round[rnd][allocation_label(allocation)] += int(allocation.get("count", 0))
    rounds = sorted(per_round)
    return rounds, _top_stacks(per_round, rounds)


def stage_progress(episodes: Sequence[Mapping[str, Any]]) -> tuple[list[int], dict[str, list[float | None]]]:
    """Return the rounds and, per family, the mean of stage_reached / num_stages of the policy's episodes."""
    acc: dict[tuple[int, str], list[float]] = defaultdict(list)
    for ep in episodes:
        if ep.get("purpose") in NO_STAGE_PURPOSES or int(ep.get("num_stages", 0)) <= 0:
            continue
        acc[(int(ep["round"]), str(ep["family"]))].append(int(ep["stage_reached"]) / int(ep["num_stages"]))
    rounds = sorted({r for r, _ in acc})
    families = sorted({f for _, f in acc})
    return rounds, {f: [(sum(v) / len(v)) if (v := acc.get((r, f))) else None for r in rounds] for f in families}


def open_store(run_dir: Path) -> Any:
    """Open ``run_dir``'s memory; raise :class:`ReportError` when it is missing or not a readable memory."""
    import sqlite3

    from coda_loop.memory import MemoryStore

    db = open_run(run_dir)
    try:
        return MemoryStore(db)
    except (sqlite3.DatabaseError, RuntimeError) as exc:
        raise ReportError(f"{db} is not a readable memory database: {exc}") from exc
