# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""reach: "touch the red cube" - bring the tool centre point onto the target."""

from __future__ import annotations

import numpy as np

from coda_engine.sim.families.base import CLOSE, Draw, WorldState, move_toward
from coda_engine.sim.scene import ROLE_TARGET, SHAPE_BOX, SHAPE_CYLINDER, SHAPE_SPHERE, ObjectSpec

PROGRAM = (
    "stage align:\n"
    "  progress = 1 - clip(dist_xy(ee_pos, target_pos) / 0.4, 0, 1)\n"
    "  done     = dist_xy(ee_pos, target_pos) < 0.02\n"
    "stage touch:\n"
    "  progress = 1 - clip(dist(ee_pos, target_pos) / 0.3, 0, 1)\n"
    "  done     = dist(ee_pos, target_pos) < target_size.z + 0.03\n"
)
TOUCH_MARGIN = 0.03
NOMINAL = {SHAPE_BOX: (0.025, 0.025, 0.025), SHAPE_CYLINDER: (0.024, 0.024, 0.035), SHAPE_SPHERE: (0.026,) * 3}


class ReachExpert:
    """Move above the target, then down until the fingertips touch its top."""

    def reset(self) -> None:
        """Nothing to forget."""

    def act(self, state: WorldState) -> np.ndarray:
        """Straight to a point just above the target's top, the last part vertically."""
        top = state.target_pos + np.array([0.0, 0.0, state.target_size[2] + 0.008])
        if np.linalg.norm(state.ee_pos[:2] - top[:2]) > 0.015:
            top[2] += 0.06
        return move_toward(state.ee_pos, top, CLOSE)


class ReachFamily:
    """The reach family."""

    name = "reach"
    max_steps = 40
    program = PROGRAM
    goal_noun = ""

    def make_objects(self, draw: Draw) -> tuple[ObjectSpec, ObjectSpec | None]:
        """Return a box, cylinder or ball target; no goal."""
        shape = int(draw.rng.choice([SHAPE_BOX, SHAPE_CYLINDER, SHAPE_SPHERE]))
        return draw.make(shape, ROLE_TARGET, NOMINAL[shape]), None

    def check_layout(self, target: ObjectSpec, goal: ObjectSpec | None, others: list[ObjectSpec]) -> str | None:
        """No family-specific constraint."""
        return None

    def key_points(self, target: ObjectSpec, goal: ObjectSpec | None) -> list[tuple[str, np.ndarray]]:
        """Return the touch point above the target."""
        return [("touch", np.asarray(target.position) + np.array([0.0, 0.0, target.size[2] + 0.008]))]

    def success(self, state: WorldState) -> bool:
        """Tool centre point within the target's half height + 3 cm of its centre."""
        return bool(np.linalg.norm(state.ee_pos - state.target_pos) < state.target_size[2] + TOUCH_MARGIN)

    def expert(self) -> ReachExpert:
        """Return a fresh expert."""
        return ReachExpert()


FAMILY = ReachFamily()
