# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""push: "push the yellow block onto the marked area" - slide the target on the table into the region."""

from __future__ import annotations

import numpy as np

from coda_engine.sim.families.base import CLOSE, Draw, WorldState, move_toward
from coda_engine.sim.scene import ROLE_GOAL, ROLE_TARGET, SHAPE_BOX, SHAPE_CYLINDER, SHAPE_REGION, ObjectSpec

PROGRAM = (
    "stage approach:\n"
    "  progress = 1 - clip(dist(ee_pos, target_pos) / 0.4, 0, 1)\n"
    "  done     = dist(ee_pos, target_pos) < target_size.x + 0.05\n"
    "stage push:\n"
    "  progress = 1 - clip(dist_xy(target_pos, goal_pos) / 0.3, 0, 1)\n"
    "  done     = abs(target_pos.x - goal_pos.x) < goal_size.x"
    " and abs(target_pos.y - goal_pos.y) < goal_size.y"
    " and target_pos.z < target_size.z + 0.02\n"
)
NOMINAL = {SHAPE_BOX: (0.025, 0.025, 0.025), SHAPE_CYLINDER: (0.025, 0.025, 0.025)}
REGION_SIZE = (0.06, 0.06, 0.001)
PUSH_DISTANCE = (0.10, 0.22)
"""Range of the target-to-region distance, m."""
BEHIND = 0.05
"""How far behind the target (beyond its footprint) the push starts, m."""


def _push_height(state: WorldState) -> float:
    return float(np.clip(state.target_size[2], 0.02, 0.03))


class PushExpert:
    """Get behind the target on the line to the region centre, lower, then push through its centre."""

    def __init__(self) -> None:
        """Start in the approach phase."""
        self.reset()

    def reset(self) -> None:
        """Start in the approach phase."""
        self.phase = "approach"

    def act(self, state: WorldState) -> np.ndarray:
        """One action of the approach-descend-push state machine (re-approaches when off the line)."""
        assert state.goal_pos is not None
        ee, p, g = state.ee_pos, state.target_pos, state.goal_pos
        to_goal = g[:2] - p[:2]
        remaining = float(np.linalg.norm(to_goal))
        if remaining < 0.012 or self.phase == "done":
            self.phase = "done"
            return move_toward(ee, np.array([ee[0], ee[1], 0.12]), CLOSE)
        u = to_goal / remaining
        reach = float(np.hypot(state.target_size[0], state.target_size[1]))
        behind_xy = p[:2] - u * (reach + BEHIND)
        z = _push_height(state)
        if self.phase == "approach":
            goal = np.array([*behind_xy, 0.1])
            if np.linalg.norm(ee[:2] - behind_xy) < 0.01:
                self.phase = "descend"
            return move_toward(ee, goal if ee[2] > 0.08 else np.array([ee[0], ee[1], 0.1]), CLOSE)
        if self.phase == "descend":
            goal = np.array([*behind_xy, z])
            if abs(ee[2] - z) < 0.006:
                self.phase = "push"
            return move_toward(ee, goal, CLOSE)
        rel = ee[:2] - p[:2]
        along = float(rel @ u)
        perp = float(np.linalg.norm(rel - along * u))
        if perp > 0.025 or along > 0.0:
            self.phase = "approach"
            return move_toward(ee, np.array([ee[0], ee[1], 0.1]), CLOSE)
        aim = np.array([*(p[:2] + u * 0.02), z])
        return move_toward(ee, aim, CLOSE, speed=0.02 if remaining < 0.05 else 0.03)


def _segment_distance(point: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    ab = b - a
    t = float(np.clip((point - a) @ ab / max(float(ab @ ab), 1e-12), 0.0, 1.0))
    return float(np.linalg.norm(point - (a + t * ab)))


class PushFamily:
    """The push family."""

    name = "push"
    max_steps = 80
    program = PROGRAM
    goal_noun = "marked area"

    def make_objects(self, draw: Draw) -> tuple[ObjectSpec, ObjectSpec | None]:
        """Return a box or cylinder target and a flat marked region."""
        shape = int(draw.rng.choice([SHAPE_BOX, SHAPE_CYLINDER]))
        target = draw.make(shape, ROLE_TARGET, NOMINAL[shape])
        goal = draw.make(SHAPE_REGION, ROLE_GOAL, REGION_SIZE, static=True)
        return target, goal

    def check_layout(self, target: ObjectSpec, goal: ObjectSpec | None, others: list[ObjectSpec]) -> str | None:
        """Push distance within ``PUSH_DISTANCE``; no distractor on the push corridor."""
        assert goal is not None
        p, g = np.asarray(target.position[:2]), np.asarray(goal.position[:2])
        distance = float(np.linalg.norm(g - p))
        if not PUSH_DISTANCE[0] <= distance <= PUSH_DISTANCE[1]:
            return f"push_distance:{distance:.3f}"
        u = (g - p) / distance
        start = p - u * (target.footprint + BEHIND)
        for other in others:
            gap = _segment_distance(np.asarray(other.position[:2]), start, g)
            if gap < other.footprint + target.footprint + 0.02:
                return f"blocked_path:{other.name}"
        return None

    def key_points(self, target: ObjectSpec, goal: ObjectSpec | None) -> list[tuple[str, np.ndarray]]:
        """Start of the push and the region centre at pushing height."""
        assert goal is not None
        p, g = np.asarray(target.position), np.asarray(goal.position)
        u = (g[:2] - p[:2]) / max(float(np.linalg.norm(g[:2] - p[:2])), 1e-9)
        z = float(np.clip(target.size[2], 0.02, 0.03))
        start = np.array([*(p[:2] - u * (target.footprint + BEHIND)), z])
        return [("push_start", start), ("push_end", np.array([*(g[:2] - u * target.footprint), z]))]

    def success(self, state: WorldState) -> bool:
        """Target centre inside the region, target still on the table."""
        assert state.goal_pos is not None
        d = np.abs(state.target_pos - state.goal_pos)
        return bool(d[0] < state.goal_size[0] and d[1] < state.goal_size[1]
                    and state.target_pos[2] < state.target_size[2] + 0.02)

    def expert(self) -> PushExpert:
        """Return a fresh expert."""
        return PushExpert()


FAMILY = PushFamily()
