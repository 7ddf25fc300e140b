# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Episodes and scripted demonstrations.

:func:`run_episode` runs any action function on a :class:`SimArm` in a scene; :func:`run_expert` does so
with the family's scripted expert (closed loop on the privileged state); :func:`collect_demonstrations`
generates scenes, keeps the successful expert episodes and writes them to an ``.npz`` file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from coda_engine.sim.arm import SimArm
from coda_engine.sim.families import WorldState, get_family
from coda_engine.sim.generator import generate
from coda_engine.sim.layout import LAYOUT
from coda_engine.sim.scene import Scene, SceneParams
from coda_engine.sim.state_expert import EXPERT
from coda_engine.sim.state_expert import demonstrator as make_demonstrator

ActionFn = Callable[[np.ndarray, WorldState], np.ndarray]
"""An action function: (observation, privileged state) -> (dx, dy, dz, gripper)."""


@dataclass
class Episode:
    """One episode's record."""

    scene: Scene
    """The scene it ran in."""
    observations: np.ndarray
    """(T + 1, OBS_DIM) float32: the first observation and one per step."""
    actions: np.ndarray
    """(T, 4) float32."""
    stages: np.ndarray
    """(T + 1,) int32 stage index of the default program."""
    success: bool
    """Task success at the end."""
    steps: int
    """Control steps taken (T)."""
    keyframes: list[np.ndarray] = field(default_factory=list)
    """RGB frames taken every ``keyframe_every`` steps (empty unless asked for)."""


def run_episode(arm: SimArm, scene: Scene, act: ActionFn, max_steps: int | None = None,
                stop_on_success: bool = True, keyframe_every: int = 0, keyframe_size: int = 128) -> Episode:
    """Reset ``arm`` to ``scene`` and step ``act`` until success (if ``stop_on_success``) or ``max_steps``."""
    family = get_family(scene.family)
    limit = max_steps or family.max_steps
    obs = arm.reset(scene)
    observations, actions, stages_ = [obs], [], [arm.stage]
    frames = [arm.render(keyframe_size, keyframe_size)] if keyframe_every else []
    success = arm.success()
    for t in range(limit):
        if success and stop_on_success:
            break
        action = np.asarray(act(obs, arm.world_state()), dtype=np.float32)
        obs = arm.step(action)
        observations.append(obs)
        actions.append(action)
        stages_.append(arm.stage)
        success = arm.success()
        if keyframe_every and (t + 1) % keyframe_every == 0:
            frames.append(arm.render(keyframe_size, keyframe_size))
    return Episode(scene=scene, observations=np.asarray(observations, dtype=np.float32),
                   actions=np.asarray(actions, dtype=np.float32).reshape(-1, 4),
                   stages=np.asarray(stages_, dtype=np.int32), success=bool(success), steps=len(actions),
                   keyframes=frames)


def run_expert(arm: SimArm, scene: Scene, demonstrator: str = EXPERT, **kwargs: object) -> Episode:
    """One episode of an expert of the scene's family.

    ``demonstrator``: ``expert`` (the family's scripted state machine) or ``state_expert``
    (``coda_engine.sim.state_expert.StateExpert``).
    """
    expert = make_demonstrator(scene.family, demonstrator)
    return run_episode(arm, scene, lambda obs, state: expert.act(state), **kwargs)  # type: ignore[arg-type]


def expert_success_rate(family: str, rng: np.random.Generator, params: SceneParams, scenes: int,
                        arm: SimArm | None = None) -> float:
    """Fraction of ``scenes`` generated scenes the expert solves."""
    arm = arm or SimArm()
    wins = sum(run_expert(arm, generate(family, rng, params)).success for _ in range(scenes))
    return wins / max(scenes, 1)


def collect_demonstrations(family: str, rng: np.random.Generator, params: SceneParams, episodes: int,
                           path: Path | str | None = None, arm: SimArm | None = None,
                           demonstrator: str = EXPERT) -> dict[str, np.ndarray]:
    """Successful expert episodes of new scenes, flattened; written to ``path`` (``.npz``) if given.

    ``demonstrator`` as in :func:`run_expert`.

    Keys: ``observations`` (N, OBS_DIM) float32 (the observation each action was taken in), ``actions``
    (N, 4), ``episode`` (N,) index, ``instructions`` (E,) str, ``scene_ids`` (E,), ``layout_names``,
    ``layout_offsets`` (the observation layout), ``attempted`` (scalar: episodes tried).
    """
    arm = arm or SimArm()
    obs, acts, index, instructions, scene_ids = [], [], [], [], []
    attempted = 0
    while len(instructions) < episodes:
        attempted += 1
        if attempted > 3 * episodes + 10:
            raise RuntimeError(f"the {family} expert failed too often ({len(instructions)}/{attempted})")
        episode = run_expert(arm, generate(family, rng, params), demonstrator)
        if not episode.success:
            continue
        obs.append(episode.observations[:-1])
        acts.append(episode.actions)
        index.append(np.full(episode.steps, len(instructions), dtype=np.int32))
        instructions.append(episode.scene.instruction)
        scene_ids.append(episode.scene.scene_id)
    data = {
        "observations": np.concatenate(obs), "actions": np.concatenate(acts), "episode": np.concatenate(index),
        "instructions": np.asarray(instructions), "scene_ids": np.asarray(scene_ids),
        "layout_names": np.asarray(list(LAYOUT)), "layout_offsets": np.asarray(list(LAYOUT.values())),
        "attempted": np.asarray(attempted),
    }
    if path is not None:
        np.savez_compressed(path, **data)
    return data
