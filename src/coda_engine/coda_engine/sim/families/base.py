# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What every task family shares: the privileged world state, the family interface, expert helpers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from coda_engine.sim.scene import ObjectSpec

MAX_DELTA = 0.05
"""Largest end-effector displacement per control step and axis, m (the action bound)."""
OPEN, CLOSE = -1.0, 1.0
"""Gripper commands: -1 opens fully, +1 closes fully."""
CARRY_Z = 0.17
"""Height at which experts move objects between places, m."""

REACH_AND_GRASP_STAGES = (
    "stage reach:\n"
    "  progress = 1 - clip(dist(ee_pos, target_pos) / 0.4, 0, 1)\n"
    "  done     = dist(ee_pos, target_pos) < 0.03\n"
    "stage grasp:\n"
    "  progress = clip((0.08 - gripper) / (0.08 - 2 * target_size.x), 0, 1)\n"
    "  done     = gripper < 2 * target_size.x + 0.005 and dist(ee_pos, target_pos) < 0.03\n"
)
"""The first two stages of every family that picks its target up (pick_place, stack)."""


@dataclass
class WorldState:
    """Privileged state of a running episode (what success definitions and experts read)."""

    ee_pos: np.ndarray
    """Tool centre point (between the fingertips), world frame, m."""
    gripper: float
    """Finger opening, m (0 closed .. 0.08 open)."""
    target: ObjectSpec
    """The target's attributes (its position field is the scene's initial one)."""
    target_pos: np.ndarray
    """The target's current position, m."""
    goal: ObjectSpec | None
    """The goal's attributes, or None."""
    goal_pos: np.ndarray | None
    """The goal's current position, or None."""
    positions: dict[str, np.ndarray]
    """Current position of every object by name."""

    @property
    def target_size(self) -> np.ndarray:
        """Half extents of the target."""
        return np.asarray(self.target.size)

    @property
    def goal_size(self) -> np.ndarray:
        """Half extents of the goal (zeros without a goal)."""
        return np.asarray(self.goal.size) if self.goal is not None else np.zeros(3)


class Expert(Protocol):
    """A scripted demonstrator: ``reset()`` per episode, then one action per control step."""

    def reset(self) -> None:
        """Forget the previous episode."""

    def act(self, state: WorldState) -> np.ndarray:
        """Return the action ``(dx, dy, dz, gripper)``: metres (|d| <= MAX_DELTA) and gripper in [-1, 1]."""


def move_toward(ee: np.ndarray, goal: np.ndarray, gripper: float, speed: float = MAX_DELTA) -> np.ndarray:
    """Return an action moving the end effector straight toward ``goal`` by at most ``speed`` per axis."""
    delta = np.asarray(goal, dtype=np.float64) - ee
    largest = float(np.max(np.abs(delta)))
    if largest > speed:
        delta *= speed / largest
    return np.array([*delta, gripper], dtype=np.float32)


class PickAndPlaceExpert:
    """Grasp the target from above, carry it at ``CARRY_Z`` and release it at a family-given place.

    Closed loop on the privileged state: it re-grasps when the object slips, and follows the
    object while descending. ``place_z`` gives the height of the object centre at release.
    """

    def __init__(self, release_clearance: float = 0.01, open_steps: int = 3, close_steps: int = 4) -> None:
        """Set the release clearance (m) and how many control steps the gripper gets to open/close."""
        self.release_clearance = release_clearance
        self.open_steps = open_steps
        self.close_steps = close_steps
        self.reset()

    def reset(self) -> None:
        """Start from the approach phase."""
        self.phase = "approach"
        self.counter = 0
        self.grasp_offset = 0.0

    def place_xy(self, state: WorldState) -> np.ndarray:
        """Where the object centre goes, xy (overridden by families)."""
        assert state.goal_pos is not None
        return state.goal_pos[:2]

    def place_z(self, state: WorldState) -> float:
        """Height of the object centre at release (overridden by families)."""
        raise NotImplementedError

    def act(self, state: WorldState) -> np.ndarray:
        """One action of the grasp-carry-release state machine."""
        ee, obj = state.ee_pos, state.target_pos
        half_z = float(state.target.size[2])
        # Finger pads centred on the object centre (they sit 13 mm above the tool point), but the palm
        # (about 35 mm above the tool point) must stay clear of the object's top.
        grasp_z = max(obj[2] - 0.012, obj[2] + half_z - 0.032, 0.012)
        if self.phase == "approach":
            above = np.array([obj[0], obj[1], max(obj[2] + half_z + 0.07, 0.1)])
            if np.linalg.norm(ee - above) < 0.012:
                self.phase = "descend"
            return move_toward(ee, above, OPEN)
        if self.phase == "descend":
            goal = np.array([obj[0], obj[1], grasp_z])
            if np.linalg.norm(ee - goal) < 0.008:
                self.phase, self.counter = "close", 0
            return move_toward(ee, goal, OPEN, speed=0.035)
        if self.phase == "close":
            self.counter += 1
            if self.counter >= self.close_steps:
                self.phase = "lift"
                self.grasp_offset = float(ee[2] - obj[2])
            return np.array([0.0, 0.0, 0.0, CLOSE], dtype=np.float32)
        if self.phase == "lift":
            if ee[2] > 0.08 and obj[2] < ee[2] - self.grasp_offset - 0.03:  # slipped out: try again
                self.phase = "approach"
                return move_toward(ee, ee + np.array([0, 0, 0.05]), OPEN)
            goal = np.array([ee[0], ee[1], CARRY_Z])
            if ee[2] > CARRY_Z - 0.015:
                self.phase = "carry"
            return move_toward(ee, goal, CLOSE)
        if self.phase == "carry":
            if obj[2] < ee[2] - self.grasp_offset - 0.03:
                self.phase = "approach"
                return move_toward(ee, ee + np.array([0, 0, 0.05]), OPEN)
            xy = self.place_xy(state) + (ee[:2] - obj[:2])
            goal = np.array([xy[0], xy[1], CARRY_Z])
            if np.linalg.norm(ee[:2] - goal[:2]) < 0.008:
                self.phase = "lower"
            return move_toward(ee, goal, CLOSE, speed=0.04)
        if self.phase == "lower":
            xy = self.place_xy(state) + (ee[:2] - obj[:2])
            goal = np.array([xy[0], xy[1], self.place_z(state) + (ee[2] - obj[2])])
            if np.linalg.norm(ee - goal) < 0.008:
                self.phase, self.counter = "release", 0
            return move_toward(ee, goal, CLOSE, speed=0.03)
        if self.phase == "release":
            self.counter += 1
            if self.counter >= self.open_steps:
                self.phase = "retreat"
            return np.array([0.0, 0.0, 0.0, OPEN], dtype=np.float32)
        # retreat, then hold
        return move_toward(ee, np.array([ee[0], ee[1], CARRY_Z]), OPEN)


class Draw(Protocol):
    """Attribute sampler handed to families by the generator (colours, sizes, physics from the split)."""

    rng: np.random.Generator

    def make(self, shape: int, role: int, nominal: tuple[float, float, float], *, color: str | None = None,
             static: bool = False) -> ObjectSpec:
        """Return an object of ``shape`` with a sampled colour, scaled size, mass and friction (position unset)."""


class TaskFamily(Protocol):
    """The interface each family module's ``FAMILY`` object offers."""

    name: str
    max_steps: int
    program: str
    goal_noun: str

    def make_objects(self, draw: Draw) -> tuple[ObjectSpec, ObjectSpec | None]:
        """Target and goal with attributes (positions are placed by the generator)."""

    def check_layout(self, target: ObjectSpec, goal: ObjectSpec | None, others: list[ObjectSpec]) -> str | None:
        """Return a rejection reason for a family-specific layout problem, or None."""

    def key_points(self, target: ObjectSpec, goal: ObjectSpec | None) -> list[tuple[str, np.ndarray]]:
        """Tool positions the arm must reach to do the task (checked by IK at generation)."""

    def success(self, state: WorldState) -> bool:
        """Task success from the privileged state."""

    def expert(self) -> Expert:
        """Return a fresh scripted expert."""
