# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The observation layout: a flat float32 vector, named slices ``{name: (offset, length)}``.

Order: ``ee_pos`` (3), ``ee_vel`` (3), ``gripper`` (1, finger opening in m), then ``MAX_OBJECTS`` object
slots ``obj{i}_pos`` (3), ``obj{i}_rgb`` (3), ``obj{i}_shape`` (1, ``SHAPE_*`` code), ``obj{i}_size`` (3,
half extents), ``obj{i}_present`` (1, the presence mask), and last ``stage_index`` (1, the stage index of the
family's default potential program). Slot 0 is the target, slot 1 the goal (absent for reach), slots 2.. distractors.
Family-generic aliases point into slots 0 and 1: ``target_pos``, ``target_rgb``, ``target_shape``,
``target_size``, ``goal_pos``, ``goal_rgb``, ``goal_shape``, ``goal_size`` (the goal region: centre and
half extents). :func:`scene_layout` adds per-scene aliases ``<object name>_pos`` etc.
"""

from __future__ import annotations

import numpy as np

from coda_engine.sim.scene import MAX_OBJECTS, Scene

SLOT_FIELDS: tuple[tuple[str, int], ...] = (("pos", 3), ("rgb", 3), ("shape", 1), ("size", 3), ("present", 1))
SLOT_DIM = sum(n for _, n in SLOT_FIELDS)


def _build() -> dict[str, tuple[int, int]]:
    layout: dict[str, tuple[int, int]] = {}
    offset = 0
    for name, length in (("ee_pos", 3), ("ee_vel", 3), ("gripper", 1)):
        layout[name] = (offset, length)
        offset += length
    for i in range(MAX_OBJECTS):
        for name, length in SLOT_FIELDS:
            layout[f"obj{i}_{name}"] = (offset, length)
            offset += length
    layout["stage_index"] = (offset, 1)
    for alias, slot in (("target", 0), ("goal", 1)):
        for name, _ in SLOT_FIELDS:
            if name != "present":
                layout[f"{alias}_{name}"] = layout[f"obj{slot}_{name}"]
    return layout


LAYOUT: dict[str, tuple[int, int]] = _build()
"""The fixed layout every scene shares."""
OBS_DIM = LAYOUT["stage_index"][0] + 1
"""Length of the observation vector."""


def slot_offset(slot: int) -> int:
    """Offset of object slot ``slot``."""
    return LAYOUT[f"obj{slot}_pos"][0]


def scene_layout(scene: Scene) -> dict[str, tuple[int, int]]:
    """``LAYOUT`` plus ``<name>_pos``, ``<name>_rgb``, ``<name>_shape``, ``<name>_size`` of the scene's objects."""
    layout = dict(LAYOUT)
    for slot, obj in enumerate(scene.slots):
        if obj is None:
            continue
        for name, _ in SLOT_FIELDS:
            if name != "present":
                layout[f"{obj.name}_{name}"] = LAYOUT[f"obj{slot}_{name}"]
    return layout


def observation_template(scene: Scene) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """Return an observation with the static slot fields of ``scene`` filled (colour, shape, size, presence).

    Also returns ``(slot offset, object name)`` of every present slot: the caller writes each object's current
    position at ``offset:offset + 3`` (simulated arms from the physics, real arms from perception).
    """
    obs = np.zeros(OBS_DIM, dtype=np.float32)
    slots = []
    for slot, obj in enumerate(scene.slots):
        if obj is None:
            continue
        base = slot_offset(slot)
        obs[base + 3:base + 6] = obj.rgba[:3]
        obs[base + 6] = obj.shape
        obs[base + 7:base + 10] = obj.size
        obs[base + 10] = 1.0
        slots.append((base, obj.name))
    return obs, slots
