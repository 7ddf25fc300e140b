# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Small edits of a stored scene: one factor changed, everything else kept.

A failed scene replayed exactly asks the policy the same question again; an *edited* one asks a neighbouring
question, a small step from where the policy failed, in the direction the failure points to (the level-editing
idea of ACCEL). :func:`edit_scene` applies one operator of :data:`EDIT_OPERATORS` to a scene:

========================  ================================================================================
``target_shift``          the target moved by ``EditConfig.shift`` metres in a random direction
``distractor_closer``     the distractor nearest the target moved to ``EditConfig.closer`` of its distance
                          (never nearer than :data:`CLOSEST_GAP` between the footprints)
``target_yaw``            the target turned by ``EditConfig.yaw`` degrees about the vertical (boxes only)
``goal_shift``            the goal (bin, region, stack base) moved by ``EditConfig.shift`` metres
``target_mass``           the target made ``EditConfig.mass_factor`` times heavier
========================  ================================================================================

The edited layout is checked like a generated one (:mod:`coda_engine.sim.generator`): inside the sampling regions
of ``params`` and outside the split's excluded region, the minimum clearance between footprints, the family's own
layout rule, the arm reaching the family's key points gripper-down, and the objects still after settling with the
arm at home. The instruction is kept word for word, so a scene whose target is named by its position relative to
another object is never moved. A failed check draws another variant, up to ``EditConfig.tries``; then
:class:`EditError` names the operator, the scene and the last reason. Which operator answers which failure is the
critic's business (``coda_critic.generation``); this module only edits. Pure module: no rclpy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np

from coda_engine.sim.families import get_family
from coda_engine.sim.model import scene_mjcf
from coda_engine.sim.scene import SHAPE_BOX, ObjectSpec, RenderSettings, Scene, SceneParams
from coda_engine.sim.vocab import load_vocabulary

EDIT_OPERATORS: tuple[str, ...] = ("target_shift", "distractor_closer", "target_yaw", "goal_shift", "target_mass")
"""Every edit :func:`edit_scene` knows (module docstring)."""
CLOSEST_GAP = 0.025
"""``distractor_closer`` leaves at least this gap between the footprints, m (above the generator's clearance)."""
MOVES = frozenset({"target_shift", "distractor_closer", "goal_shift"})
"""Operators that move an object (refused for scenes whose instruction names the target by a relative position)."""


class EditError(ValueError):
    """An edit that cannot give a valid scene (names the operator, the scene and why)."""


@dataclass(frozen=True)
class EditConfig:
    """How far one edit goes."""

    shift: tuple[float, float] = (0.02, 0.04)
    """Distance range of a move, m (drawn uniformly; the direction uniformly too)."""
    closer: float = 0.6
    """``distractor_closer``: the distractor's new distance to the target as a share of its old one."""
    yaw: tuple[float, float] = (20.0, 45.0)
    """``target_yaw``: turn range, degrees (the sign drawn too)."""
    mass_factor: float = 1.25
    """``target_mass``: multiplier on the target's mass."""
    tries: int = 12
    """Variants drawn before the edit gives up."""

    def __post_init__(self) -> None:
        """Check ranges; the error names the field."""
        if not 0.0 < self.shift[0] <= self.shift[1] <= 0.1:
            raise ValueError(f"EditConfig.shift={self.shift} must satisfy 0 < low <= high <= 0.1 m")
        if not 0.0 < self.closer < 1.0:
            raise ValueError(f"EditConfig.closer={self.closer} must be in (0, 1)")
        if not 0.0 < self.yaw[0] <= self.yaw[1] <= 90.0:
            raise ValueError(f"EditConfig.yaw={self.yaw} must satisfy 0 < low <= high <= 90 degrees")
        if not 1.0 < self.mass_factor <= 3.0:
            raise ValueError(f"EditConfig.mass_factor={self.mass_factor} must be in (1, 3]")
        if self.tries < 1:
            raise ValueError(f"EditConfig.tries={self.tries} must be >= 1")


def _moved(obj: ObjectSpec, dx: float, dy: float) -> ObjectSpec:
    x, y, z = obj.position
    return dataclasses.replace(obj, position=(x + dx, y + dy, z))


def _variant(scene: Scene, operator: str, rng: np.random.Generator, cfg: EditConfig) -> list[ObjectSpec]:
    """Return the scene's objects with one ``operator`` edit drawn from ``rng`` (unchecked)."""
    objects = list(scene.objects)
    index = {o.name: i for i, o in enumerate(objects)}
    target = scene.target
    if operator in ("target_shift", "goal_shift"):
        name = target.name if operator == "target_shift" else scene.goal_object
        if not name:
            raise EditError(f"edit {operator} of scene {scene.scene_id!r}: the {scene.family} family has no goal")
        distance, angle = rng.uniform(*cfg.shift), rng.uniform(0.0, 2 * math.pi)
        objects[index[name]] = _moved(objects[index[name]], distance * math.cos(angle), distance * math.sin(angle))
    elif operator == "distractor_closer":
        if not scene.distractors:
            raise EditError(f"edit {operator} of scene {scene.scene_id!r}: the scene has no distractor")
        tx, ty = target.position[:2]
        near = min(scene.distractors, key=lambda o: (math.hypot(o.position[0] - tx, o.position[1] - ty), o.name))
        dx, dy = near.position[0] - tx, near.position[1] - ty
        distance = math.hypot(dx, dy)
        closest = near.footprint + target.footprint + CLOSEST_GAP  # the footprints just apart
        share = max(cfg.closer * rng.uniform(0.9, 1.1), closest * rng.uniform(1.0, 1.15) / distance)
        if share >= 0.97:
            raise EditError(f"edit {operator} of scene {scene.scene_id!r}: {near.name} is already next to the target")
        objects[index[near.name]] = _moved(near, (share - 1.0) * dx, (share - 1.0) * dy)
    elif operator == "target_yaw":
        if target.shape != SHAPE_BOX:
            raise EditError(f"edit {operator} of scene {scene.scene_id!r}: the target is not a box (turning it "
                            "changes nothing)")
        _, _, qz, qw = target.orientation
        turn = math.radians(rng.uniform(*cfg.yaw)) * (1 if rng.random() < 0.5 else -1)
        yaw = 2 * math.atan2(qz, qw) + turn
        objects[index[target.name]] = dataclasses.replace(target, orientation=(0.0, 0.0, math.sin(yaw / 2),
                                                                                math.cos(yaw / 2)))
    elif operator == "target_mass":
        objects[index[target.name]] = dataclasses.replace(target, mass=target.mass * cfg.mass_factor)
    else:
        raise EditError(f"edit {operator!r} is not one of {EDIT_OPERATORS}")
    return objects


def _problem(scene: Scene, objects: list[ObjectSpec], params: SceneParams) -> str:
    """Why a variant's layout is not valid ("" when it is): regions, clearance, family rule, reach."""
    from coda_engine.sim.generator import default_generator, placement_box, placement_conflict, unreachable

    vocab = load_vocabulary(params.split)
    family = get_family(scene.family)
    for i, (obj, before) in enumerate(zip(objects, scene.objects, strict=True)):
        if obj.position == before.position:
            continue
        x0, x1, y0, y1 = placement_box(obj, vocab, params, goal=obj.name == scene.goal_object)
        x, y = obj.position[:2]
        if not (x0 <= x <= x1 and y0 <= y <= y1):
            return f"outside_region:{obj.name}"
        conflict = placement_conflict(obj, x, y, objects[:i] + objects[i + 1:], vocab, params)
        if conflict:
            return conflict
    by_name = {o.name: o for o in objects}
    target, goal = by_name[scene.target_object], by_name.get(scene.goal_object)
    reason = family.check_layout(target, goal, [o for o in objects if o.name not in (target.name, goal and goal.name)])
    if reason:
        return reason
    return unreachable(family, target, goal, default_generator().ik)


def edit_scene(scene: Scene, operator: str, rng: np.random.Generator, params: SceneParams, *, scene_id: str,
               round_index: int, config: EditConfig | None = None) -> Scene:
    """Return ``scene`` with one ``operator`` edit (module docstring), as a new scene ``scene_id``.

    ``params`` are the generator parameters the scene's round generates with (regions, clearance, settling). The
    new scene records where it came from in ``params_json`` (``edit``: the scene and operator) and its tags
    (``edit:<operator>``). :class:`EditError` when no valid variant is found or the operator does not apply.
    """
    from coda_engine.sim.generator import _RejectError, default_generator

    cfg = config or EditConfig()
    if operator not in EDIT_OPERATORS:
        raise EditError(f"edit {operator!r} is not one of {EDIT_OPERATORS}")
    if operator in MOVES and any(t == "referring:relative" for t in scene.perturbation_tags):
        raise EditError(f"edit {operator} of scene {scene.scene_id!r}: its instruction names the target by a "
                        "relative position, which a move could make false")
    meta = scene.meta
    meta["edit"] = {"from": scene.scene_id, "operator": operator}
    reason = ""
    for _ in range(cfg.tries):
        objects = _variant(scene, operator, rng, cfg)
        reason = _problem(scene, objects, params)
        if reason:
            continue
        draft = dataclasses.replace(scene, scene_id=scene_id, objects=objects, round=round_index, mjcf="",
                                    mjcf_uri="", mjcf_sha256="", generation_program_id="",
                                    perturbation_tags=[*scene.perturbation_tags, f"edit:{operator}"],
                                    params_json=json.dumps(meta, sort_keys=True))
        try:
            draft.objects = default_generator().settle(draft, params)
        except _RejectError as reject:
            reason = str(reject)
            continue
        draft.mjcf = scene_mjcf(draft.objects, RenderSettings.from_meta(meta))
        draft.mjcf_sha256 = hashlib.sha256(draft.mjcf.encode()).hexdigest()
        draft.validate()
        return draft
    raise EditError(f"edit {operator} of scene {scene.scene_id!r}: no valid variant in {cfg.tries} tries "
                    f"(last: {reason})")
