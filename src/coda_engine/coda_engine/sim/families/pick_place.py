# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""pick_place: "put the blue cylinder in the green bin" - grasp the target and drop it into the bin."""

from __future__ import annotations

import numpy as np

from coda_engine.sim.families.base import CARRY_Z, REACH_AND_GRASP_STAGES, Draw, PickAndPlaceExpert, WorldState
from coda_engine.sim.scene import (
    ROLE_GOAL,
    ROLE_TARGET,
    SHAPE_BIN,
    SHAPE_BOX,
    SHAPE_CYLINDER,
    SHAPE_SPHERE,
    ObjectSpec,
)

PROGRAM = REACH_AND_GRASP_STAGES + (
    "stage lift:\n"
    "  progress = clip((target_pos.z - target_size.z) / 0.1, 0, 1)\n"
    "  done     = target_pos.z > target_size.z + 0.1\n"
    "stage place:\n"
    "  progress = 1 - clip(dist_xy(target_pos, goal_pos) / 0.4, 0, 1)\n"
    "  done     = abs(target_pos.x - goal_pos.x) < goal_size.x - 0.02"
    " and abs(target_pos.y - goal_pos.y) < goal_size.y - 0.02"
    " and target_pos.z < goal_pos.z + 2 * goal_size.z\n"
)
NOMINAL = {SHAPE_BOX: (0.022, 0.022, 0.022), SHAPE_CYLINDER: (0.021, 0.021, 0.032), SHAPE_SPHERE: (0.024,) * 3}
BIN_SIZE = (0.085, 0.085, 0.025)
"""Outer half extents of a bin (x, y) and half its height, m; walls are ``BIN_WALL`` thick."""
BIN_WALL = 0.008


class BinExpert(PickAndPlaceExpert):
    """Release the target above the bin centre, just above the rim."""

    def place_z(self, state: WorldState) -> float:
        """Object centre slightly above the rim."""
        assert state.goal_pos is not None
        return float(state.goal_pos[2] + 2 * state.goal_size[2] + state.target_size[2] + 0.015)


class PickPlaceFamily:
    """The pick_place family."""

    name = "pick_place"
    max_steps = 80
    program = PROGRAM
    goal_noun = "bin"

    def make_objects(self, draw: Draw) -> tuple[ObjectSpec, ObjectSpec | None]:
        """Return a graspable target and a static bin."""
        shape = int(draw.rng.choice([SHAPE_BOX, SHAPE_CYLINDER, SHAPE_SPHERE]))
        target = draw.make(shape, ROLE_TARGET, NOMINAL[shape])
        goal = draw.make(SHAPE_BIN, ROLE_GOAL, BIN_SIZE, static=True)
        return target, goal

    def check_layout(self, target: ObjectSpec, goal: ObjectSpec | None, others: list[ObjectSpec]) -> str | None:
        """No family-specific constraint."""
        return None

    def key_points(self, target: ObjectSpec, goal: ObjectSpec | None) -> list[tuple[str, np.ndarray]]:
        """Grasp point and the release point above the bin."""
        assert goal is not None
        grasp = np.asarray(target.position)
        release = np.asarray(goal.position) + np.array([0.0, 0.0, 2 * goal.size[2] + 0.05])
        return [("grasp", grasp), ("carry", grasp + np.array([0, 0, CARRY_Z - grasp[2]])), ("release", release)]

    def success(self, state: WorldState) -> bool:
        """Target centre inside the bin walls (2 cm margin) and below the rim."""
        assert state.goal_pos is not None
        d = np.abs(state.target_pos - state.goal_pos)
        size = state.goal_size
        return bool(d[0] < size[0] - 0.02 and d[1] < size[1] - 0.02
                    and state.target_pos[2] < state.goal_pos[2] + 2 * size[2])

    def expert(self) -> BinExpert:
        """Return a fresh expert."""
        return BinExpert()


FAMILY = PickPlaceFamily()
