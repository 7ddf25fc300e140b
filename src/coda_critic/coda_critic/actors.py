# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Action functions that fail in known ways, to produce real failed episodes for the critics.

Each actor wraps the family's scripted expert or replaces it, and runs on the real simulated arm
(``coda_engine.episodes.run_recorded_episode``). The grounded critic labels the resulting episodes
from the privileged trace; the actor's name is only the intent (the label can differ when the
physics does something else, e.g. a sloppy grasp that holds after all).

=================  ===================================================================================
actor              behaviour
=================  ===================================================================================
``expert``         the family's expert, unchanged
``noisy``          the expert with Gaussian noise on the displacement (``noise`` m per axis)
``slow``           the expert with displacements scaled by ``slow_factor`` (runs out of steps)
``wander``         flies to a point away from every object and hovers there
``wrong_object``   the expert acting on a distractor as if it were the target
``offset_grasp``   the expert with the target believed ``grasp_offset`` m higher (closes above it)
``drop``           the expert until the target is carried high, then opens the gripper in the air
``wrong_place``    the expert with the goal believed elsewhere on the table, set down at table height
``sweep``          lowers beside the target and sweeps through it at low height
``random``         uniform random displacements and gripper commands
=================  ===================================================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from coda_engine.sim.families import WorldState, get_family
from coda_engine.sim.families.base import CLOSE, MAX_DELTA, OPEN, move_toward
from coda_engine.sim.scene import Scene

ActionFn = Callable[[np.ndarray, WorldState], np.ndarray]
ACTORS: tuple[str, ...] = ("expert", "noisy", "slow", "wander", "wrong_object", "offset_grasp", "drop", "wrong_place",
                           "sweep", "random")
"""Every actor name."""
GRASP_FAMILIES = ("pick_place", "stack")
"""Families whose expert grasps and carries the target."""


@dataclass(frozen=True)
class ActorConfig:
    """Magnitudes of the actors' faults."""

    noise: float = 0.02
    """Standard deviation of the ``noisy`` actor's displacement noise, m."""
    slow_factor: float = 0.2
    """Displacement scale of the ``slow`` actor."""
    grasp_offset: float = 0.06
    """How much higher the ``offset_grasp`` actor believes the target is, m."""
    drop_height: float = 0.12
    """Tool height above which the ``drop`` actor opens the gripper while carrying, m."""
    wrong_place_distance: float = 0.16
    """How far from the real goal the ``wrong_place`` actor believes the goal is, m."""

    def __post_init__(self) -> None:
        """Check ranges."""
        if self.noise < 0 or not 0 < self.slow_factor <= 1:
            raise ValueError(f"ActorConfig: noise={self.noise} must be >= 0 and slow_factor={self.slow_factor} "
                             "in (0, 1]")
        if not 0.02 <= self.grasp_offset <= 0.2 or not 0.05 <= self.wrong_place_distance <= 0.4:
            raise ValueError("ActorConfig: grasp_offset must be in [0.02, 0.2] m and wrong_place_distance in "
                             "[0.05, 0.4] m")


def _retarget(state: WorldState, scene: Scene, name: str) -> WorldState:
    """Return the state as seen by an expert that takes object ``name`` for the target."""
    return dataclasses.replace(state, target=scene.object(name), target_pos=state.positions[name].copy())


def _free_point(scene: Scene, rng: np.random.Generator) -> np.ndarray:
    """Return a hover point at least 15 cm (horizontally) from every object, inside the reachable workspace."""
    positions = np.array([o.position[:2] for o in scene.objects])
    for _ in range(200):
        xy = rng.uniform([0.3, -0.35], [0.7, 0.35])
        if np.min(np.linalg.norm(positions - xy, axis=1)) > 0.15:
            return np.array([xy[0], xy[1], 0.2])
    return np.array([0.3, 0.0 if abs(positions[:, 1]).min() > 0.2 else 0.35, 0.3])


def make_actor(kind: str, scene: Scene, rng: np.random.Generator, config: ActorConfig | None = None) -> ActionFn:
    """Return a fresh action function of actor ``kind`` for ``scene`` (ValueError names unknown kinds)."""
    cfg = config or ActorConfig()
    family = get_family(scene.family)
    expert = family.expert()
    expert.reset()
    if kind == "expert":
        return lambda obs, state: expert.act(state)
    if kind == "noisy":
        def noisy(obs: np.ndarray, state: WorldState) -> np.ndarray:
            action = np.array(expert.act(state), dtype=np.float32)
            action[:3] += rng.normal(0.0, cfg.noise, 3).astype(np.float32)
            return np.clip(action, -1, 1)
        return noisy
    if kind == "slow":
        def slow(obs: np.ndarray, state: WorldState) -> np.ndarray:
            action = np.array(expert.act(state), dtype=np.float32)
            action[:3] *= cfg.slow_factor
            return action
        return slow
    if kind == "wander":
        point = _free_point(scene, rng)
        return lambda obs, state: move_toward(state.ee_pos, point, CLOSE)
    if kind == "wrong_object":
        if not scene.distractors:
            raise ValueError(f"actor 'wrong_object' needs a scene with distractors; {scene.scene_id!r} has none")
        wrong = scene.distractors[int(rng.integers(len(scene.distractors)))].name
        return lambda obs, state: expert.act(_retarget(state, scene, wrong))
    if kind == "offset_grasp":
        lift = np.array([0.0, 0.0, cfg.grasp_offset])
        return lambda obs, state: expert.act(dataclasses.replace(state, target_pos=state.target_pos + lift))
    if kind == "drop":
        dropped = {"now": False}

        def drop(obs: np.ndarray, state: WorldState) -> np.ndarray:
            held = np.linalg.norm(state.ee_pos - state.target_pos) < 0.04 and state.gripper < 0.07
            if dropped["now"] or (held and state.ee_pos[2] > cfg.drop_height):
                dropped["now"] = True
                return np.array([0.0, 0.0, 0.0, OPEN], dtype=np.float32)
            return expert.act(state)
        return drop
    if kind == "wrong_place":
        if scene.goal is None:
            raise ValueError(f"actor 'wrong_place' needs a goal; {scene.family!r} scene {scene.scene_id!r} has none")
        goal = np.asarray(scene.goal.position, dtype=np.float64)
        for _ in range(200):
            angle = rng.uniform(0, 2 * np.pi)
            fake = goal + cfg.wrong_place_distance * np.array([np.cos(angle), np.sin(angle), 0.0])
            if 0.35 < fake[0] < 0.65 and abs(fake[1]) < 0.28:
                break
        # Believed goal lowered so that the expert sets the target down on the table.
        lowered = {"pick_place": -2 * float(scene.goal.size[2]), "stack": -float(scene.goal.size[2])}
        fake[2] = lowered.get(scene.family, goal[2])
        return lambda obs, state: expert.act(dataclasses.replace(state, goal_pos=fake.copy()))
    if kind == "sweep":
        target = np.asarray(scene.target.position, dtype=np.float64)
        side = np.array([0.0, 1.0 if target[1] < 0 else -1.0, 0.0])
        start = target - 0.12 * side
        start[2] = 0.1
        low = float(max(scene.target.size[2] * 1.5, 0.025))
        phase = {"name": "approach"}

        def sweep(obs: np.ndarray, state: WorldState) -> np.ndarray:
            ee = state.ee_pos
            if phase["name"] == "approach":
                if np.linalg.norm(ee[:2] - start[:2]) < 0.01:
                    phase["name"] = "lower"
                return move_toward(ee, start, CLOSE)
            if phase["name"] == "lower":
                goal = np.array([start[0], start[1], low])
                if abs(ee[2] - low) < 0.008:
                    phase["name"] = "sweep"
                return move_toward(ee, goal, CLOSE)
            end = target + 0.2 * side
            return move_toward(ee, np.array([end[0], end[1], low]), CLOSE, speed=MAX_DELTA)
        return sweep
    if kind == "random":
        def random_action(obs: np.ndarray, state: WorldState) -> np.ndarray:
            return np.array([*rng.uniform(-MAX_DELTA, MAX_DELTA, 3), rng.choice([OPEN, CLOSE])], dtype=np.float32)
        return random_action
    raise ValueError(f"unknown actor {kind!r}; expected one of {ACTORS}")


def applicable_actors(scene: Scene) -> list[str]:
    """Actors that make sense in ``scene`` (grasp faults only where the expert grasps, etc.)."""
    kinds = ["expert", "noisy", "slow", "wander", "sweep", "random"]
    if scene.distractors:
        kinds.append("wrong_object")
    if scene.family in GRASP_FAMILIES:
        kinds += ["offset_grasp", "drop"]
    if scene.goal is not None:
        kinds.append("wrong_place")
    return kinds
