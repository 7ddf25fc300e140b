# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The programs one round's diagnoses ask for.

The next round's generation program, this round's training program and the stage RL practises. The one
planner of both deployments: the loop's ``programs`` step (``coda_loop.rounds``) and the critic node's
published programs (``coda_critic.ros.critic_node``) call :func:`plan_programs`. Pure module: no rclpy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from coda_critic.diagnosis import Diagnosis
from coda_critic.generation import GenerationConfig, GenerationPlanner, GenerationProgram, ReplayCandidate
from coda_critic.text2potential import TrainingPlan, training_plan


@dataclass(frozen=True)
class RoundPrograms:
    """The programs planned from the diagnoses of one round."""

    generation: GenerationProgram
    """What to generate in the next round (``round_index + 1``)."""
    training: TrainingPlan
    """Potentials and training settings of this round (``round_index``)."""
    rl_family: str
    """The family with the most failures ("" without failures): the one RL practises."""
    rl_stage: int
    """The stage ``rl_family`` fails in most often (ties: the earlier stage; 0 without failures)."""

    @property
    def cause_diagnosis_ids(self) -> list[str]:
        """The diagnoses the generation program's allocations answer, sorted."""
        return sorted({i for a in self.generation.allocations for i in a.cause_diagnosis_ids})


def plan_programs(diagnoses: Sequence[Diagnosis], round_index: int, budget: int, generation: GenerationConfig, *,
                  families: Sequence[str] | None = None, history: Sequence[Diagnosis] = (),
                  replay: Sequence[ReplayCandidate] = (), recent: Sequence[Diagnosis] = (), sft_epochs: int = 1,
                  rl_env_steps: int = 0, content: bool = True) -> RoundPrograms:
    """Plan the programs answering ``diagnoses``, the diagnoses of round ``round_index``'s episodes.

    ``budget`` scenes for round ``round_index + 1`` under ``generation`` (restricted to ``families`` when
    given); ``history``, ``replay`` and ``recent`` come from memory (see :meth:`GenerationPlanner.plan`; empty
    without it). ``sft_epochs`` and ``rl_env_steps`` are written into the training program. ``content`` False: the
    diagnoses say only pass or fail (:func:`coda_critic.diagnosis.pass_fail`), so no failure is translated by
    Text2potential and every family keeps its default program. A ValueError names a bad budget or round.
    """
    if round_index < 0:
        raise ValueError(f"round_index={round_index} must be >= 0")
    program = GenerationPlanner(generation, families=families).plan(
        diagnoses, budget, round_index + 1, history=list(history), replay=list(replay), recent=list(recent))
    plan = training_plan(diagnoses if content else [], round_index, sft_epochs=sft_epochs, rl_env_steps=rl_env_steps)
    failures = Counter(d.family for d in diagnoses if d.is_failure)
    rl_family = failures.most_common(1)[0][0] if failures else ""
    stages = Counter(d.failed_stage for d in diagnoses if d.is_failure and d.family == rl_family)
    rl_stage = min(stages, key=lambda k: (-stages[k], k)) if stages else 0
    return RoundPrograms(generation=program, training=plan, rl_family=rl_family, rl_stage=rl_stage)
