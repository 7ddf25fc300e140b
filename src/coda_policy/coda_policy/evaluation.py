# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Success of a policy: per family on freshly generated scenes of a split, and on the held-out suites.

:func:`success_rates` checks a network during training on new scenes. :func:`evaluate_suites` runs the deterministic
policy (the action mean) of a checkpoint on the frozen scenes of :mod:`coda_policy.suite`, in this process or in a
pool of spawned processes, and returns success per split and family plus one row per episode (``coda eval``, the
loop's evaluate step).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda_policy.model import CodaPolicyNet
from coda_policy.serving import make_action_fn
from coda_policy.suite import Suite, ordered_families, scene_from_entry


def success_rates(net: CodaPolicyNet, families: tuple[str, ...], episodes: int, rng: np.random.Generator,
                  split: str, embedder: object) -> dict[str, float]:
    """Fraction of ``episodes`` new scenes per family that the deterministic policy solves (engine success)."""
    from coda_engine.sim.arm import SimArm
    from coda_engine.sim.expert import run_episode
    from coda_engine.sim.generator import generate
    from coda_engine.sim.scene import SceneParams

    arm = SimArm()
    was_training = net.training
    net.eval()
    rates = {}
    for family in families:
        wins = 0
        for _ in range(episodes):
            scene = generate(family, rng, SceneParams(split=split))
            act = make_action_fn(net, embedder.embed_one(scene.instruction))  # type: ignore[attr-defined]
            wins += run_episode(arm, scene, act).success
        rates[family] = wins / max(episodes, 1)
    net.train(was_training)
    return rates


# ---------------------------------------------------------------------------------------------- held-out suites
class CheckpointError(ValueError):
    """The policy checkpoint folder cannot be used; the message names the folder and the problem."""


@dataclass
class SuiteResult:
    """Success of one policy on suites."""

    rates: dict[str, dict[str, float]]
    """split -> family -> success rate."""
    per_split: dict[str, float]
    """split -> mean of its family rates."""
    episodes: list[dict[str, Any]]
    """One row per episode: ``scene_id``, ``family``, ``split``, ``suite``, ``success``, ``stage_reached``,
    ``num_stages``, ``steps``, ``progress`` (the family program's potential at the end, in [0, 1])."""
    seconds: float = 0.0
    """Wall-clock time of the evaluation."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict of all fields."""
        return {"rates": self.rates, "per_split": self.per_split, "episodes": self.episodes, "seconds": self.seconds}

    def outcomes(self) -> dict[str, dict[str, int]]:
        """Return split -> scene id -> 1 (success) or 0: what paired comparisons of two policies read."""
        out: dict[str, dict[str, int]] = {split: {} for split in self.rates}
        for row in self.episodes:
            out[row["split"]][row["scene_id"]] = int(bool(row["success"]))
        return out


def load_checkpoint(checkpoint_dir: str | Path) -> Any:
    """Load the policy network of a version folder; :class:`CheckpointError` says what is wrong with it."""
    from safetensors import SafetensorError

    from coda_engine.sim.arm import ArmConfig
    from coda_engine.sim.layout import LAYOUT, OBS_DIM
    from coda_policy.checkpoint import CONFIG_FILE, MODEL_FILE, check_control_hz, load_policy

    folder = Path(checkpoint_dir)
    if not folder.is_dir():
        raise CheckpointError(f"policy checkpoint {folder}: no such folder")
    if not (folder / CONFIG_FILE).is_file() or not (folder / MODEL_FILE).is_file():
        inner = sorted(p.name for p in folder.iterdir() if (p / MODEL_FILE).is_file())
        hint = f"; it holds version folders {inner[:5]}: pass one of them" if inner else ""
        raise CheckpointError(f"policy checkpoint {folder}: needs {CONFIG_FILE} and {MODEL_FILE}{hint}")
    try:
        net, config = load_policy(folder)
    except (ValueError, KeyError, TypeError, RuntimeError, OSError, SafetensorError) as exc:
        raise CheckpointError(f"policy checkpoint {folder}: cannot be loaded: {type(exc).__name__}: {exc}") from None
    try:
        check_control_hz(config, ArmConfig.control_hz)  # the suites run on the simulator's arm
    except ValueError as exc:
        raise CheckpointError(f"policy checkpoint {folder}: {exc}") from None
    if net.cfg.obs_dim != OBS_DIM or any(LAYOUT.get(k, v) != v for k, v in net.cfg.layout.items()):
        raise CheckpointError(
            f"policy checkpoint {folder}: its observation layout (length {net.cfg.obs_dim}) "
            f"is not the simulator's (length {OBS_DIM})"
        )
    return net


class _Runner:
    """Runs suite episodes with one loaded policy, text embedder and simulated arm."""

    def __init__(self, net: Any, embedder: Any) -> None:
        from coda_engine.sim.arm import SimArm

        self.net, self.embedder, self.arm = net, embedder, SimArm()

    def run(self, task: tuple[str, str, int, dict[str, Any]]) -> dict[str, Any]:
        from coda_engine.sim.expert import run_episode
        from coda_policy.serving import make_action_fn

        split, suite_name, index, entry = task
        scene = scene_from_entry(entry, split=split, suite_name=suite_name, index=index)
        embedding = np.asarray(self.embedder.embed_one(scene.instruction), dtype=np.float32)
        if embedding.shape != (self.net.cfg.instruction_dim,):
            raise ValueError(
                f"instruction embedding has shape {embedding.shape}, the policy expects "
                f"({self.net.cfg.instruction_dim},)"
            )
        episode = run_episode(self.arm, scene, make_action_fn(self.net, embedding))
        return {
            "scene_id": scene.scene_id,
            "family": scene.family,
            "split": split,
            "suite": suite_name,
            "success": bool(episode.success),
            "stage_reached": int(episode.stages.max()),
            "num_stages": int(self.arm.program.num_stages),
            "steps": int(episode.steps),
            "progress": float(self.arm.phi),
        }


class _KnownEmbeddings:
    """Embeddings computed by the caller's embedder; a process's own text embedder only for other strings."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table, self.fallback = table, None

    def embed_one(self, text: str) -> np.ndarray:
        if text in self.table:
            return self.table[text]
        if self.fallback is None:
            from coda_engine.text_embedding import TextEmbedder

            self.fallback = TextEmbedder()
        return self.fallback.embed_one(text)


_WORKER: _Runner | None = None


def _init_worker(checkpoint_dir: str, table: dict[str, np.ndarray]) -> None:
    """Pool initialiser: one torch thread, the checkpoint, a text embedder and an arm per process."""
    global _WORKER
    import torch

    from coda_engine.processes import die_with_parent

    die_with_parent()
    torch.set_num_threads(1)
    _WORKER = _Runner(load_checkpoint(checkpoint_dir), _KnownEmbeddings(table))


def _run_in_worker(task: tuple[str, str, int, dict[str, Any]]) -> dict[str, Any]:
    assert _WORKER is not None
    return _WORKER.run(task)


def summarize(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """(split -> family -> success rate, split -> mean of the family rates) of episode rows."""
    rates: dict[str, dict[str, float]] = {}
    for split in dict.fromkeys(r["split"] for r in rows):
        mine = [r for r in rows if r["split"] == split]
        rates[split] = {
            f: float(np.mean([r["success"] for r in mine if r["family"] == f]))
            for f in ordered_families({r["family"] for r in mine})
        }
    return rates, {s: float(np.mean(list(fam.values()))) for s, fam in rates.items()}


def evaluate_suites(
    checkpoint_dir: str | Path,
    suites: Sequence[Suite],
    *,
    per_family: int = 0,
    workers: int = 1,
    embedder: object | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SuiteResult:
    """Success of the checkpoint's deterministic policy (the action mean) on every selected suite entry.

    ``per_family > 0`` keeps the first ``per_family`` entries of each family of each suite. ``workers > 1``
    runs episodes in a pool of spawned processes, each loading the checkpoint (:func:`load_checkpoint`) and
    its own text embedder. ``embedder`` (anything with ``embed_one(text)``): in this process, the embedder
    used (default: the process-wide MiniLM one); with workers, it embeds the instructions once here and the
    workers receive the vectors (so they need not load MiniLM; without it each worker loads its own). Torch
    runs on one thread during the evaluation, so the result does not depend on ``workers``.
    ``progress(done, total)`` is called after every episode. Raises :class:`CheckpointError` for an unusable
    checkpoint, ValueError for bad arguments (two suites of one split, ``per_family < 0``, ``workers < 1``).
    """
    import time

    import torch

    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    if per_family < 0:
        raise ValueError(f"per_family={per_family} must be >= 0")
    splits = [s.split for s in suites]
    if len(set(splits)) != len(splits):
        raise ValueError(f"two suites of the same split in {splits}: results are keyed by split")
    start = time.perf_counter()
    net = load_checkpoint(checkpoint_dir)
    tasks = [(s.split, s.name, i, s.entries[i]) for s in suites for i in s.select(per_family)]
    rows: list[dict[str, Any]] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if workers == 1 or len(tasks) <= 1:
            if embedder is None:
                from coda_policy.serving import embedder as shared_embedder

                embedder = shared_embedder()
            runner = _Runner(net, embedder)
            for task in tasks:
                rows.append(runner.run(task))
                if progress is not None:
                    progress(len(rows), len(tasks))
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            table: dict[str, np.ndarray] = {}
            if embedder is not None:
                for text in dict.fromkeys(task[3]["instruction"] for task in tasks):
                    table[text] = np.asarray(embedder.embed_one(text), dtype=np.float32)  # type: ignore[attr-defined]
            folder = str(Path(checkpoint_dir).resolve())
            # A worker that dies (or fails to start) breaks the executor with an error instead of a hang.
            with ProcessPoolExecutor(
                min(workers, len(tasks)),
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(folder, table),
            ) as pool:
                for row in pool.map(_run_in_worker, tasks):
                    rows.append(row)
                    if progress is not None:
                        progress(len(rows), len(tasks))
    finally:
        torch.set_num_threads(threads)
    rates, per_split = summarize(rows)
    return SuiteResult(rates=rates, per_split=per_split, episodes=rows, seconds=time.perf_counter() - start)
