# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Recorded episodes: run an action function on a simulated arm and describe the result.

:func:`run_recorded_episode` is what a sim worker executes for one ``RunEpisode`` goal: it steps
the arm in-process, reports progress through a callback, takes keyframes at the start, at every
stage change and at the end, and samples the trajectory. :meth:`RecordedEpisode.to_result_dict`
gives the fields of ``coda_msgs/EpisodeResult`` (the node fills the message from it).
Pure module: no rclpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import ActionFn
from coda_engine.sim.families import get_family
from coda_engine.sim.scene import Scene

SOURCE_SIM, SOURCE_REAL = 0, 1
STATUS_COMPLETED, STATUS_ABORTED, STATUS_REJECTED = 0, 1, 2

ProgressFn = Callable[[int, int, float], None]
"""Called after every control step with (step, stage, potential)."""


@dataclass(frozen=True)
class RecordingConfig:
    """What an episode keeps besides its outcome."""

    keyframes: bool = True
    """Take keyframes (start, every stage change, end)."""
    keyframe_size: int = 64
    """Keyframe width and height, pixels."""
    sample_every: int = 1
    """Keep every n-th control step in the trajectory summary (first and last always kept)."""
    privileged_objects: bool = True
    """Attach object states to trajectory samples (simulation only)."""
    stop_on_success: bool = True
    """End the episode at the first step the task succeeds."""

    def __post_init__(self) -> None:
        """Check ranges."""
        if not 16 <= self.keyframe_size <= 512:
            raise ValueError(f"RecordingConfig.keyframe_size={self.keyframe_size} must be in [16, 512]")
        if self.sample_every < 1:
            raise ValueError(f"RecordingConfig.sample_every={self.sample_every} must be >= 1")


@dataclass
class RecordedEpisode:
    """Everything one episode produced."""

    episode_id: str
    """Unique id."""
    scene: Scene
    """The scene it ran in."""
    policy_version: str
    """Who acted."""
    robot_id: str
    """Which worker / arm."""
    success: bool
    """Task success at the end."""
    steps: int
    """Control steps executed."""
    stage_reached: int
    """Highest stage index of the family's default program reached (0..num_stages)."""
    num_stages: int
    """K of that program."""
    control_rate_hz: float
    """Control rate."""
    samples: list[dict[str, Any]] = field(default_factory=list)
    """``TrajectorySample`` dicts."""
    keyframes: list[np.ndarray] = field(default_factory=list)
    """RGB uint8 frames."""
    keyframe_steps: list[int] = field(default_factory=list)
    """Control step of each keyframe."""
    observations: np.ndarray | None = None
    """(T + 1, OBS_DIM) observations (kept in-process for training; not sent over ROS)."""
    actions: np.ndarray | None = None
    """(T, 4) actions."""
    status: int = STATUS_COMPLETED
    """``STATUS_*``."""
    status_detail: str = ""
    """Why the episode was aborted, if it was."""
    source: int = SOURCE_SIM
    """``SOURCE_SIM`` or ``SOURCE_REAL`` (a real arm: no privileged state, success from perception or an operator)."""

    def to_result_dict(self) -> dict[str, Any]:
        """Fields of ``coda_msgs/EpisodeResult`` except header and keyframe images (added by the node)."""
        return {
            "episode_id": self.episode_id,
            "scene_id": self.scene.scene_id,
            "policy_version": self.policy_version,
            "source": self.source,
            "robot_id": self.robot_id,
            "status": self.status,
            "status_detail": self.status_detail,
            "success": self.success,
            "episode_return": float(self.success),
            "length": self.steps,
            "stage_reached": self.stage_reached,
            "num_stages": self.num_stages,
            "control_rate_hz": self.control_rate_hz,
            "trajectory": self.samples,
            "keyframe_steps": list(self.keyframe_steps),
        }


def trajectory_sample(step: int, control_hz: float, ee: np.ndarray, gripper: float, action: np.ndarray | None,
                      stage: int, potential: float, objects: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``TrajectorySample`` dict (``objects``: object states, empty where there is no privileged state)."""
    seconds = step / control_hz
    return {
        "time_from_start": {"sec": int(seconds), "nanosec": round((seconds % 1) * 1e9) % 1_000_000_000},
        "step": step,
        "ee_position": {"x": float(ee[0]), "y": float(ee[1]), "z": float(ee[2])},
        "gripper_opening": float(gripper),
        "action": [float(v) for v in (action if action is not None else np.zeros(4))],
        "stage": int(stage),
        "potential": float(potential),
        "objects": objects,
    }


def _sample(arm: SimArm, step: int, action: np.ndarray | None, privileged: bool) -> dict[str, Any]:
    objects = [o.to_dict() for o in arm.object_states()] if privileged else []
    return trajectory_sample(step, arm.config.control_hz, arm.tcp_position(), arm.world_state().gripper, action,
                             arm.stage, arm.phi, objects)


def run_recorded_episode(
    arm: SimArm,
    scene: Scene,
    act: ActionFn,
    *,
    episode_id: str,
    policy_version: str,
    robot_id: str,
    max_steps: int = 0,
    config: RecordingConfig | None = None,
    progress: ProgressFn | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> RecordedEpisode:
    """Run ``act`` on ``arm`` in ``scene`` and record it (see the module docstring).

    ``max_steps`` 0 means the family's limit. ``should_stop`` is polled every step; when it returns
    True the episode ends with ``STATUS_ABORTED`` (e.g. a cancelled action goal).
    """
    cfg = config or RecordingConfig()
    family = get_family(scene.family)
    limit = max_steps or family.max_steps
    obs = arm.reset(scene)
    observations, actions = [obs], []
    size = cfg.keyframe_size
    frames, frame_steps = ([arm.render(size, size)], [0]) if cfg.keyframes else ([], [])
    samples = [_sample(arm, 0, None, cfg.privileged_objects)]
    stage_reached = arm.stage
    success = arm.success()
    status, detail = STATUS_COMPLETED, ""
    step = 0
    while step < limit and not (success and cfg.stop_on_success):
        if should_stop is not None and should_stop():
            status, detail = STATUS_ABORTED, f"stopped on request after {step} steps"
            break
        action = np.asarray(act(obs, arm.world_state()), dtype=np.float32).reshape(-1)
        previous_stage = arm.stage
        obs = arm.step(action)
        step += 1
        observations.append(obs)
        actions.append(action)
        success = arm.success()
        stage_reached = max(stage_reached, arm.stage)
        if step % cfg.sample_every == 0:
            samples.append(_sample(arm, step, action, cfg.privileged_objects))
        if cfg.keyframes and arm.stage != previous_stage:
            frames.append(arm.render(size, size))
            frame_steps.append(step)
        if progress is not None:
            progress(step, arm.stage, arm.phi)
    if samples[-1]["step"] != step:
        samples.append(_sample(arm, step, actions[-1] if actions else None, cfg.privileged_objects))
    if cfg.keyframes and frame_steps[-1] != step:
        frames.append(arm.render(size, size))
        frame_steps.append(step)
    return RecordedEpisode(
        episode_id=episode_id,
        scene=scene,
        policy_version=policy_version,
        robot_id=robot_id,
        success=bool(success),
        steps=step,
        stage_reached=int(stage_reached),
        num_stages=int(arm.program.num_stages),
        control_rate_hz=float(arm.config.control_hz),
        samples=samples,
        keyframes=frames,
        keyframe_steps=frame_steps,
        observations=np.asarray(observations, dtype=np.float32),
        actions=np.asarray(actions, dtype=np.float32).reshape(-1, 4),
        status=status,
        status_detail=detail,
    )
