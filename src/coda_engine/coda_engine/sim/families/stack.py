# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""stack: "stack the red cube on the blue cube" - place the target cube on top of the base cube and let go."""

from __future__ import annotations

import numpy as np

from coda_engine.sim.families.base import CARRY_Z, REACH_AND_GRASP_STAGES, Draw, PickAndPlaceExpert, WorldState
from coda_engine.sim.scene import ROLE_GOAL, ROLE_TARGET, SHAPE_BOX, ObjectSpec

PROGRAM = REACH_AND_GRASP_STAGES + (
    "stage lift:\n"
    "  progress = clip((target_pos.z - target_size.z) / 0.1, 0, 1)\n"
    "  done     = target_pos.z > goal_pos.z + goal_size.z + 2 * target_size.z + 0.03\n"
    "stage place:\n"
    "  progress = 1 - clip(dist(target_pos, goal_pos) / 0.4, 0, 1)\n"
    "  done     = dist_xy(target_pos, goal_pos) < goal_size.x"
    " and abs(target_pos.z - goal_pos.z - goal_size.z - target_size.z) < 0.01"
    " and gripper > 2 * target_size.x + 0.01\n"
)
TARGET_SIZE = (0.021, 0.021, 0.021)
BASE_SIZE = (0.03, 0.03, 0.03)


class StackExpert(PickAndPlaceExpert):
    """Release the target just above the base cube's top face."""

    def place_xy(self, state: WorldState) -> np.ndarray:
        """Over the base cube's current centre."""
        assert state.goal_pos is not None
        return state.goal_pos[:2]

    def place_z(self, state: WorldState) -> float:
        """Target bottom 5 mm above the base top."""
        assert state.goal_pos is not None
        return float(state.goal_pos[2] + state.goal_size[2] + state.target_size[2] + 0.005)


class StackFamily:
    """The stack family."""

    name = "stack"
    max_steps = 80
    program = PROGRAM
    goal_noun = "box"

    def make_objects(self, draw: Draw) -> tuple[ObjectSpec, ObjectSpec | None]:
        """Two cubes: the smaller target and the larger base (the goal)."""
        target = draw.make(SHAPE_BOX, ROLE_TARGET, TARGET_SIZE)
        goal = draw.make(SHAPE_BOX, ROLE_GOAL, BASE_SIZE)
        return target, goal

    def check_layout(self, target: ObjectSpec, goal: ObjectSpec | None, others: list[ObjectSpec]) -> str | None:
        """Target and base need different colours (both are cubes)."""
        assert goal is not None
        return "same_color:target,goal" if target.color_name == goal.color_name else None

    def key_points(self, target: ObjectSpec, goal: ObjectSpec | None) -> list[tuple[str, np.ndarray]]:
        """Grasp point and the release point above the base."""
        assert goal is not None
        grasp = np.asarray(target.position)
        release = np.asarray(goal.position) + np.array([0.0, 0.0, goal.size[2] + target.size[2] + 0.005])
        return [("grasp", grasp), ("carry", grasp + np.array([0, 0, CARRY_Z - grasp[2]])), ("release", release)]

    def success(self, state: WorldState) -> bool:
        """Target resting on the base (centred within its half width, at the right height) and released."""
        assert state.goal_pos is not None
        t, g = state.target_pos, state.goal_pos
        rest_z = g[2] + state.goal_size[2] + state.target_size[2]
        return bool(np.linalg.norm(t[:2] - g[:2]) < state.goal_size[0] and abs(t[2] - rest_z) < 0.01
                    and state.gripper > 2 * state.target_size[0] + 0.01)

    def expert(self) -> StackExpert:
        """Return a fresh expert."""
        return StackExpert()


FAMILY = StackFamily()
