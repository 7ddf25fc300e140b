# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The evaluate step of a round (part of :class:`coda_loop.rounds.CoevolutionLoop`).

The round's policy version on the held-out test suites of every split (all entries after round 0 and the last
round, a few between), and with ``validation`` on the validation suites too; success per split and family goes
to memory, every episode's outcome to the step's result. The version's ``evaluation.json`` is what the
sim-first gate of real arms reads. Pure module: no rclpy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from coda_loop.config import OOD_SPLITS, LoopConfig
from coda_loop.files import atomic_json
from coda_loop.step_results import EvaluateResult, Score, TrainResult


class EvaluateStep:
    """The evaluate step; a base of :class:`~coda_loop.rounds.CoevolutionLoop`, whose state and helpers it uses."""

    config: LoopConfig
    store: Any
    run_dir: Path
    ckpt_root: Path
    demo_dir: Path

    def _step_evaluate(self, r: int) -> EvaluateResult:
        cfg = self.config
        version = self.output(r, TrainResult).version
        per_family = cfg.final_eval_per_family if r in (0, cfg.rounds) else cfg.eval_per_family
        done = None
        if r == 0 and cfg.base_from:  # the same policy on the same suites: reuse the base run's scores
            from coda_loop.memory import MemoryStore

            with MemoryStore(Path(cfg.base_from) / "memory.db") as base:
                done = base.finished_step(0, EvaluateResult)
            wanted = self._suites("test", per_family)[1]
            if done is not None and done.episodes_per_family == wanted and done.outcomes and (
                    not cfg.validation or done.validation is not None):
                done = dataclasses.replace(done, reused_from=cfg.base_from)
            else:
                done = None
        if done is None:
            test = self._score(version, "test", per_family)
            done = EvaluateResult(version=version, **{f.name: getattr(test, f.name) for f in dataclasses.fields(test)})
            if cfg.validation:
                done.validation = self._score(version, "validation", per_family)
        episodes = done.episodes_per_family
        folder = self.ckpt_root / version
        if folder.is_dir():  # what the sim-first gate of real arms reads
            atomic_json(folder / "evaluation.json", {"version": version, "round": r, "per_split": done.per_split,
                                                      "ood": done.ood, "episodes_per_family": episodes})
        for split, rates in done.rates.items():
            for family, rate in rates.items():
                self.store.put_progress(r, family=family, split=split, success=float(rate),
                                        episodes=episodes[split], policy_version=version)
        return done

    def _suites(self, kind: str, per_family: int) -> tuple[list[Any], dict[str, int]]:
        """Return the suites of ``kind`` restricted to the run's families, and the episodes per family and split."""
        from coda_policy.suite import default_suites

        cfg = self.config
        suites = [dataclasses.replace(suite, entries=[e for e in suite.entries if e["family"] in cfg.families])
                  for suite in default_suites(cfg.eval_splits, kind).values()]
        episodes = {s.split: len(s.select(per_family)) // max(len({e["family"] for e in s.entries}), 1)
                    for s in suites}
        return suites, episodes

    def _score(self, version: str, kind: str, per_family: int) -> Score:
        """Return the success of ``version`` on the suites of ``kind``.

        Per split and family, the OOD mean, and every episode's outcome by split and scene id (what paired
        comparisons between methods resample).
        """
        from coda_policy.evaluation import evaluate_suites

        cfg = self.config
        suites, episodes = self._suites(kind, per_family)
        result = evaluate_suites(self.ckpt_root / version, suites, per_family=per_family,
                                 workers=max(cfg.workers, 1), embedder=self.embedder)
        per_split = {s: float(v) for s, v in result.per_split.items()}
        ood = [per_split[s] for s in OOD_SPLITS if s in per_split]
        return Score(rates=result.rates, per_split=per_split, ood=float(np.mean(ood)) if ood else float("nan"),
                     episodes_per_family=episodes,
                     outcomes=result.outcomes())
