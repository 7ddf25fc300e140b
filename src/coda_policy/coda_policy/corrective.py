# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Corrective demonstrations: the state-based expert takes over where the policy failed.

A demonstration from a fresh scene shows the expert's own states only. A policy that drifts (a grasp a
few millimetres off, an object carried too low, a release short of the bin) visits states the expert
never did, and behaviour cloning has no data there. A *corrective* demonstration starts from the policy's
own failure: the policy acts on the scene it failed until ``takeover`` steps, then :class:`StateExpert`
(whose phase is derived from the world state, so it can act from any state) finishes the task. Only the
expert's part is kept, with ``relabel`` of the policy's last steps before the takeover labelled by the
expert as well (DAgger labels: what the expert would have done where the policy went astray).

Where to take over is the critic's decision: :func:`takeover_step` takes the diagnosis's failure step (when
the failure began: the first touch that tipped an object, the last step the target was held, ...) minus a
margin; a critic that cannot tell the onset gives the failed stage, read against the episode's stage trace
(the step the policy entered that stage, minus the margin). Without a critic (the ``dagger`` baselines),
:func:`trace_takeover` reads the takeover off the episode's own recorded progress alone: the last step of its
highest default-program potential, minus the margin. The run is deterministic (the policy's action
mean, MuJoCo), so replaying the policy up to that step reaches the state the diagnosed episode was in.

Pure module: no rclpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from coda_engine.sim.families import get_family
from coda_engine.sim.scene import Scene
from coda_engine.sim.state_expert import StateExpert, off_table

ActionFn = Callable[[np.ndarray, object], np.ndarray]
"""(observation, privileged world state) -> action (dx, dy, dz metres, gripper)."""


@dataclass(frozen=True)
class CorrectiveConfig:
    """Where the expert takes over and which steps are kept."""

    margin_steps: int = 2
    """Control steps before the entry of the failed stage at which the expert takes over (the policy's state
    there is usually already off the expert's path, but not yet past recovery)."""
    relabel_steps: int = 2
    """Policy steps just before the takeover that are also kept, labelled with the expert's action."""

    def __post_init__(self) -> None:
        """Check ranges."""
        if self.margin_steps < 0 or self.relabel_steps < 0:
            raise ValueError(f"CorrectiveConfig: margin_steps={self.margin_steps} and relabel_steps="
                             f"{self.relabel_steps} must be >= 0")


@dataclass
class CorrectiveEpisode:
    """One corrective demonstration."""

    scene: Scene
    """The scene (the one the policy failed)."""
    takeover: int
    """Control step at which the expert took over."""
    success: bool
    """Whether the expert finished the task from there."""
    observations: np.ndarray
    """(N, OBS_DIM) float32: the kept states (relabelled policy steps, then the expert's)."""
    actions: np.ndarray
    """(N, 4) float32: the expert's action in each kept state (metres, gripper)."""
    policy_steps: int
    """Steps the policy acted."""
    steps: int
    """Steps of the whole episode."""


def takeover_step(trace_steps: Sequence[int], trace_stages: Sequence[int], failed_stage: int,
                  margin: int, failure_step: int = -1) -> int:
    """Step at which the expert takes over an episode that failed in ``failed_stage``.

    With a known ``failure_step`` (>= 0): that step minus ``margin``, never before 0. Otherwise from the stage:
    ``trace_steps`` / ``trace_stages`` are the episode's sampled control steps and the stage index at each
    (latched: it never goes back); the takeover is the first sampled step at or past the failed stage, minus
    ``margin`` steps, and never before 0. A stage the trace never reached (or ``failed_stage`` < 0) takes over
    at the start.
    """
    if len(trace_steps) != len(trace_stages):
        raise ValueError(f"trace_steps ({len(trace_steps)}) and trace_stages ({len(trace_stages)}) differ in length")
    if failure_step >= 0:
        return max(int(failure_step) - margin, 0)
    if failed_stage < 0:
        return 0
    for step, stage in zip(trace_steps, trace_stages, strict=True):
        if stage >= failed_stage:
            return max(int(step) - margin, 0)
    return 0


def trace_takeover(trace_steps: Sequence[int], trace_potentials: Sequence[float], margin: int) -> int:
    """Step at which the expert takes over a failed episode, read off its recorded progress alone (no critic).

    The progress is the family's default staged potential, which every episode records at its sampled steps. The
    takeover is the last sampled step at which it stood at its highest, minus ``margin`` (never before 0): every step
    the policy took up to its best progress is kept with the expert's label, and the expert recovers from where the
    policy stopped making progress. An empty trace takes over at the start.

    Taking over at the entry of the last stage reached instead took over at step 0, with no policy step labelled,
    in 83 of 148 recovered demonstrations of a development run (failures in the first stage), where the critic's
    onset did so in none.
    """
    if len(trace_steps) != len(trace_potentials):
        raise ValueError(f"trace_steps ({len(trace_steps)}) and trace_potentials ({len(trace_potentials)}) differ "
                         "in length")
    if not len(trace_steps):
        return 0
    best = max(float(p) for p in trace_potentials)
    peak = max(i for i, p in enumerate(trace_potentials) if float(p) >= best - 1e-9)
    return max(int(trace_steps[peak]) - margin, 0)


def run_corrective(arm: object, scene: Scene, policy: ActionFn, takeover: int, relabel: int = 0,
                   max_steps: int | None = None, realign_push: bool = False) -> CorrectiveEpisode:
    """Run ``policy`` on ``scene`` for ``takeover`` steps, then :class:`StateExpert` until success or the limit.

    ``arm`` is a ``coda_engine.sim.arm.SimArm``. The expert is asked for its action in every state (its
    phase follows the state; it also tracks the fingers), and states are kept from ``takeover - relabel`` on
    until an object falls off the table. The episode stops at success or after the family's ``max_steps``.
    ``realign_push`` is :class:`StateExpert`'s (a push low behind the target goes back down to the push's start).
    """
    if takeover < 0 or relabel < 0:
        raise ValueError(f"takeover={takeover} and relabel={relabel} must be >= 0")
    family = get_family(scene.family)
    limit = max_steps or family.max_steps
    expert = StateExpert(scene.family, realign_push=realign_push)
    expert.reset()
    obs = arm.reset(scene)  # type: ignore[attr-defined]
    kept_obs: list[np.ndarray] = []
    kept_act: list[np.ndarray] = []
    success = bool(arm.success())  # type: ignore[attr-defined]
    lost = False
    steps = 0
    for t in range(limit):
        if success:
            break
        state = arm.world_state()  # type: ignore[attr-defined]
        label = expert.act(state)
        lost = lost or off_table(state)
        if t >= takeover - relabel and not lost:
            kept_obs.append(np.asarray(obs, dtype=np.float32))
            kept_act.append(np.asarray(label, dtype=np.float32))
        action = np.asarray(policy(obs, state), dtype=np.float32) if t < takeover else label
        obs = arm.step(action)  # type: ignore[attr-defined]
        steps = t + 1
        success = bool(arm.success())  # type: ignore[attr-defined]
    dim = len(obs)
    return CorrectiveEpisode(
        scene=scene, takeover=int(takeover), success=success,
        observations=np.asarray(kept_obs, dtype=np.float32).reshape(-1, dim),
        actions=np.asarray(kept_act, dtype=np.float32).reshape(-1, 4),
        policy_steps=min(int(takeover), steps), steps=steps)
