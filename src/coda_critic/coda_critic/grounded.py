# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The grounded critic: exact failure labels from the simulator's privileged state trace.

It reads the trajectory samples of a recorded episode (tool position, finger opening, commanded
actions, stage of the family's default program, and every object's pose per step) and applies
fixed definitions, checked in this order (the first that holds is the label):

1. ``success``: the episode's task-success flag.
2. ``wrong_object``: a distractor was lifted (more than ``lift_min`` above its start) with the tool
   next to it, or the tool came near a distractor but never near the target.
3. ``knocked_over``: a movable object tipped (its up axis turned more than ``tilt_max``; spheres
   excepted), fell off the table, or a distractor / the stack base was shoved more than ``shove_max``
   horizontally; in grasp and reach families also the target shoved without ever being held.
4. ``dropped``: the target was held (lifted, next to the tool, fingers not open) and was lost in the air
   (more than ``air_min`` above its start) away from the goal.
5. ``misplaced``: grasp families: the target was held, then released somewhere that is not the goal;
   push: the target was moved more than ``shove_max`` but rests outside the region and has stopped.
6. ``timed_out`` (still progressing): the potential rose by more than ``progress_min`` over the last
   quarter of the episode.
7. ``never_approached``: the tool never came within the target's half height + ``approach_margin``.
8. ``missed_grasp``: grasp families: the tool reached the target but never held it.
9. ``timed_out``: anything else that ran out of steps.

The failed stage is the default program's stage the episode ended in (the first one that did not
complete). The failure step is when the failure began, read off the same trace: the first sample at which a
tipped or shoved object started to move (``onset_move``) or a distractor was first near the tool or lifted,
the last sample the target was held before it was lost or released, the first close of the fingers next to
the target of a missed grasp, the closest approach of a tool that never reached the target, and for a
timed-out episode the last sample at which the potential still rose. Every label has confidence 1. It is the
teacher of the learned critic and the yardstick of every backend. Pure module: no rclpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from coda_critic.diagnosis import (
    MODE_DROPPED,
    MODE_KNOCKED_OVER,
    MODE_MISPLACED,
    MODE_MISSED_GRASP,
    MODE_NEVER_APPROACHED,
    MODE_SUCCESS,
    MODE_TIMED_OUT,
    MODE_WRONG_OBJECT,
    Condition,
    Diagnosis,
    EpisodeLike,
    check_episodes,
    diagnosis_id,
    scene_conditions,
    stage_names,
)
from coda_engine.sim.scene import SHAPE_NAMES, SHAPE_SPHERE, Scene

GRASP_FAMILIES = ("pick_place", "stack")


@dataclass(frozen=True)
class GroundedConfig:
    """Thresholds of the grounded definitions (metres and radians)."""

    approach_margin: float = 0.04
    """The tool approached an object when within its half height + this, m."""
    held_radius: float = 0.045
    """The target is held when within this of the tool, lifted and the fingers are not open, m."""
    lift_min: float = 0.02
    """An object is lifted when more than this above its start height, m."""
    air_min: float = 0.03
    """A lost target was in the air when more than this above its start height, m."""
    open_gripper: float = 0.075
    """Finger openings above this count as open, m."""
    tilt_max: float = 0.8
    """An object tipped when its up axis turned by more than this, rad."""
    shove_max: float = 0.04
    """An object was shoved when it moved more than this horizontally, m."""
    progress_min: float = 0.02
    """Rise of the potential over the last quarter that counts as still progressing."""
    onset_move: float = 0.01
    """An object started to be knocked or shoved when it had moved this far from its start, m."""

    def __post_init__(self) -> None:
        """Check that every threshold is positive."""
        for name, value in self.__dict__.items():
            if not value > 0:
                raise ValueError(f"GroundedConfig.{name}={value} must be > 0")


@dataclass
class Trace:
    """The privileged trace of one episode as arrays (T samples, n objects)."""

    steps: np.ndarray
    """(T,) control step of each sample."""
    ee: np.ndarray
    """(T, 3) tool position, m."""
    gripper: np.ndarray
    """(T,) finger opening, m."""
    stage: np.ndarray
    """(T,) stage index of the default program."""
    potential: np.ndarray
    """(T,) potential of the default program."""
    pos: np.ndarray
    """(T, n, 3) object positions, m."""
    up: np.ndarray
    """(T, n, 3) object up axes (world frame)."""
    names: list[str]
    """Object names, scene order."""

    @classmethod
    def from_samples(cls, samples: Sequence[dict[str, Any]]) -> Trace:
        """Stack the ``TrajectorySample`` dicts."""
        ee = np.array([[s["ee_position"][k] for k in "xyz"] for s in samples], dtype=np.float64)
        pos = np.array([[[o["pose"]["position"][k] for k in "xyz"] for o in s["objects"]] for s in samples])
        quat = np.array([[[o["pose"]["orientation"][k] for k in "xyzw"] for o in s["objects"]] for s in samples])
        x, y, z, w = (quat[..., i] for i in range(4))
        up = np.stack([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)], axis=-1)
        return cls(steps=np.array([int(s["step"]) for s in samples]), ee=ee,
                   gripper=np.array([float(s["gripper_opening"]) for s in samples]),
                   stage=np.array([int(s["stage"]) for s in samples]),
                   potential=np.array([float(s["potential"]) for s in samples]),
                   pos=pos, up=up, names=[o["name"] for o in samples[0]["objects"]])

    def index(self, name: str) -> int:
        """Column of object ``name``."""
        return self.names.index(name)


@dataclass
class Finding:
    """A label with the facts that explain it."""

    mode: str
    """Failure mode."""
    detail: str
    """Sentence with the measured facts."""
    other_object: str = ""
    """Distractor involved (wrong_object, knocked_over), if any."""
    onset: int = -1
    """Index of the trace sample at which the failure began (-1: not known)."""


class GroundedCritic:
    """Exact labels from privileged state (see the module docstring)."""

    name = "grounded"

    def __init__(self, config: GroundedConfig | None = None) -> None:
        """Keep the thresholds."""
        self.config = config or GroundedConfig()

    def diagnose(self, episodes: Sequence[EpisodeLike]) -> list[Diagnosis]:
        """One diagnosis per episode; :class:`CriticInputError` for episodes without privileged state."""
        check_episodes(episodes, need_privileged=True)
        return [self.diagnose_one(ep) for ep in episodes]

    def diagnose_one(self, ep: EpisodeLike) -> Diagnosis:
        """Label one (checked) episode."""
        scene = ep.scene
        names = stage_names(scene.family)
        trace = Trace.from_samples(ep.samples)
        finding = self.classify(ep, trace)
        if finding.mode == MODE_SUCCESS:
            stage, stage_name = -1, ""
        else:
            stage = int(min(trace.stage[-1], len(names) - 1))
            stage_name = names[stage]
        conditions = scene_conditions(scene)
        text = describe(scene, finding, stage, stage_name, len(names), ep.steps, conditions)
        step = int(trace.steps[finding.onset]) if finding.mode != MODE_SUCCESS and finding.onset >= 0 else -1
        return Diagnosis(diagnosis_id=diagnosis_id(self.name, [ep.episode_id]), episode_ids=[ep.episode_id],
                         scene_id=scene.scene_id, family=scene.family, failure_mode=finding.mode, failure_step=step,
                         failed_stage=stage, failed_stage_name=stage_name, target_object=scene.target_object,
                         conditions=conditions, text=text, confidence=1.0, critic_backend=self.name)

    # ------------------------------------------------------------------ definitions
    def classify(self, ep: EpisodeLike, tr: Trace) -> Finding:
        """Apply the definitions in order (module docstring)."""
        cfg, scene = self.config, ep.scene
        if ep.success:
            return Finding(MODE_SUCCESS, f"the task succeeded after {ep.steps} steps")
        t = tr.index(scene.target_object)
        target = scene.target
        start = tr.pos[0]
        ee_dist = np.linalg.norm(tr.ee[:, None, :] - tr.pos, axis=-1)  # (T, n)
        half_z = np.array([o.size[2] for o in scene.objects])
        near = ee_dist < half_z + cfg.approach_margin
        lifted = tr.pos[:, :, 2] > start[:, 2] + cfg.lift_min
        approached_target = bool(near[:, t].any())
        distractors = [tr.index(o.name) for o in scene.distractors]

        grasped = (ee_dist[:, t] < cfg.held_radius) & (tr.gripper < cfg.open_gripper)
        held = grasped & lifted[:, t]
        shove = np.linalg.norm(tr.pos[-1, :, :2] - start[:, :2], axis=-1)
        tilt = np.arccos(np.clip(np.sum(tr.up * tr.up[:1], axis=-1), -1.0, 1.0)).max(axis=0)
        moved = np.linalg.norm(tr.pos - start[None], axis=-1) > cfg.onset_move  # (T, n) displaced from start
        for d in distractors:
            carried = lifted[:, d] & (ee_dist[:, d] < cfg.held_radius + 0.02)
            if carried.any():
                return Finding(MODE_WRONG_OBJECT, f"it lifted the {tr.names[d]} instead of the {target.name}",
                               tr.names[d], _first(near[:, d] | carried))
            if near[:, d].sum() >= 2 and not approached_target:
                return Finding(MODE_WRONG_OBJECT, f"it went to the {tr.names[d]} and never came near the "
                               f"{target.name}", tr.names[d], _first(near[:, d]))
        for i, obj in enumerate(scene.objects):
            if obj.is_static:
                continue
            if obj.shape != SHAPE_SPHERE and tilt[i] > cfg.tilt_max:
                return Finding(MODE_KNOCKED_OVER, f"it knocked over the {obj.name} (tipped by "
                               f"{np.degrees(tilt[i]):.0f} degrees)", obj.name if i != t else "", _first(moved[:, i]))
            if tr.pos[:, i, 2].min() < -0.02:
                return Finding(MODE_KNOCKED_OVER, f"it knocked the {obj.name} off the table",
                               obj.name if i != t else "", _first(moved[:, i]))
        for d in distractors:
            if shove[d] > cfg.shove_max and near[:, d].any():
                return Finding(MODE_WRONG_OBJECT, f"it moved the {tr.names[d]} {shove[d]:.2f} m instead of the "
                               f"{target.name}", tr.names[d], _first(moved[:, d]))
        for i, obj in enumerate(scene.objects):
            if obj.is_static or shove[i] <= cfg.shove_max:
                continue
            if i in distractors or obj.name == scene.goal_object:
                return Finding(MODE_KNOCKED_OVER, f"it collided with the {obj.name} and shoved it {shove[i]:.2f} m",
                               obj.name, _first(moved[:, i]))
            if i == t and scene.family != "push" and not held.any():
                return Finding(MODE_KNOCKED_OVER, f"it bumped the {obj.name} {shove[i]:.2f} m away without "
                               "grasping it", "", _first(moved[:, i]))

        goal = scene.goal
        if held.any() and goal is not None:
            g = tr.index(goal.name)
            radius = max(goal.size[0], goal.size[1]) + 0.03
            first_held = int(np.flatnonzero(held)[0])
            released = np.flatnonzero(~grasped[first_held:])
            final_away = float(np.linalg.norm(tr.pos[-1, t, :2] - tr.pos[-1, g, :2]))
            if released.size:
                last = first_held + int(released[0]) - 1
                away = float(np.linalg.norm(tr.pos[last, t, :2] - tr.pos[last, g, :2]))
                in_air = tr.pos[last, t, 2] > start[t, 2] + cfg.air_min
                if in_air and away > radius:
                    return Finding(MODE_DROPPED, f"it held the {target.name} and lost it in the air {away:.2f} m "
                                   f"from the {goal.name}", "", last)
                if not grasped[-1]:
                    return Finding(MODE_MISPLACED, f"it released the {target.name} {final_away:.2f} m from the "
                                   f"centre of the {goal.name}, not on it", "", last)
            if tr.pos[-1, t, 2] < start[t, 2] + cfg.air_min and final_away > radius:
                return Finding(MODE_MISPLACED, f"it set the {target.name} down {final_away:.2f} m from the centre "
                               f"of the {goal.name}, not on it", "", _last(held))
        closed_near = near[:, t] & (tr.gripper < cfg.open_gripper)
        if scene.family in GRASP_FAMILIES and closed_near.any() and not held.any():
            return Finding(MODE_MISSED_GRASP, f"it reached the {target.name} and closed the gripper but missed the "
                           "grasp; the object was never lifted", "", _first(closed_near))
        quarter = int(np.searchsorted(tr.steps, 0.75 * tr.steps[-1]))
        rise = float(tr.potential[-1] - tr.potential[min(quarter, len(tr.steps) - 1)])
        if rise > cfg.progress_min:
            return Finding(MODE_TIMED_OUT, f"it was still making progress (potential +{rise:.2f} over the last "
                           f"quarter) when it ran out of steps after {ep.steps}", "", _last_rise(tr.potential))
        if scene.family == "push" and goal is not None and shove[t] > cfg.shove_max:
            g = tr.index(goal.name)
            final_away = float(np.linalg.norm(tr.pos[-1, t, :2] - tr.pos[-1, g, :2]))
            return Finding(MODE_MISPLACED, f"it pushed the {target.name} {shove[t]:.2f} m but left it "
                           f"{final_away:.2f} m from the centre of the {goal.name}", "", _last(moved[:, t]))
        if not approached_target:
            closest = float(ee_dist[:, t].min())
            return Finding(MODE_NEVER_APPROACHED, f"the end effector never approached the {target.name}; the "
                           f"closest it came was {closest:.2f} m", "", int(np.argmin(ee_dist[:, t])))
        return Finding(MODE_TIMED_OUT, f"it ran out of steps after {ep.steps} without finishing", "",
                       _last_rise(tr.potential))


def _first(mask: np.ndarray) -> int:
    """Index of the first True sample (-1 if none)."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else -1


def _last(mask: np.ndarray) -> int:
    """Index of the last True sample (-1 if none)."""
    hits = np.flatnonzero(mask)
    return int(hits[-1]) if hits.size else -1


def _last_rise(potential: np.ndarray, eps: float = 1e-3) -> int:
    """Index of the last sample at which the potential rose by more than ``eps`` (0 if it never did)."""
    rises = np.flatnonzero(np.diff(potential) > eps)
    return int(rises[-1]) + 1 if rises.size else 0


MODE_PHRASES: dict[str, str] = {
    MODE_SUCCESS: "Success",
    MODE_NEVER_APPROACHED: "Never approached the target",
    MODE_WRONG_OBJECT: "Approached the wrong object",
    MODE_MISSED_GRASP: "Missed grasp",
    MODE_DROPPED: "Dropped the target",
    MODE_MISPLACED: "Misplaced the target",
    MODE_KNOCKED_OVER: "Knocked over / collided",
    MODE_TIMED_OUT: "Timed out",
}
"""Headline of each mode (the first words of a diagnosis text)."""


def describe(scene: Scene, finding: Finding, stage: int, stage_name: str, num_stages: int, steps: int,
             conditions: list[Condition]) -> str:
    """Natural-language explanation of a finding, in the diagnosis vocabulary Text2potential reads."""
    values = {c.key: c.value for c in conditions}
    target = scene.target
    what = f"{target.color_name} {SHAPE_NAMES[target.shape]}".strip()
    head = f"{MODE_PHRASES[finding.mode]}: in the {scene.family} task \"{scene.instruction}\", {finding.detail}."
    if finding.mode == MODE_SUCCESS:
        return f"{head} All {num_stages} stages completed with the {target.name}."
    return (f"{head} The {stage_name} stage (stage {stage + 1} of {num_stages}) did not complete. "
            f"Target: the {target.name} ({what}, {values['target_size']} size) in the {values['position_region']} "
            f"region, named by {values['phrasing']} phrasing, with {values['num_distractors']} distractors "
            f"({values['split']} split).")
