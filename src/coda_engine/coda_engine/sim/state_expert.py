# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The state-derived expert: a family's scripted expert whose phase is read from the world state at every step.

The engine's experts are state machines whose phase (approach, descend, close, lift, ...) is advanced by the states
*they* drive to, with step counters for closing and opening the gripper. From a state the policy produced, a fresh
or a shadowing expert can be in the wrong phase (e.g. "approach" while the policy already carries the object, which
opens the gripper mid-air), and even on the expert's own trajectory the same state gets different actions depending
on how long the phase has lasted. :class:`StateExpert` derives the phase from the privileged world state before every
action and reuses the family expert's motion code for that phase: its action is (nearly) a function of the state, so
it can label any state a policy reaches (DAgger, corrective demonstrations) and, as the ``state_expert`` policy
version of :mod:`coda_engine.policies`, demonstrate whole episodes with the same labels.

:func:`off_table`: whether an object fell off the table (unrecoverable; no label is kept from then on).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from coda_engine.sim.families import get_family
from coda_engine.sim.families.base import CARRY_Z, Expert, PickAndPlaceExpert
from coda_engine.sim.families.push import BEHIND, PushExpert, _push_height

EXPERT = "expert"
"""Policy version of a family's scripted expert (its own state machine)."""
STATE_EXPERT = "state_expert"
"""Policy version of :class:`StateExpert` (the phase read from the state at every step)."""
DEMONSTRATORS = (EXPERT, STATE_EXPERT)
"""The experts that can demonstrate a scene in simulation (they read the privileged world state)."""

HOLD_XY = 0.02
"""Largest horizontal distance between object centre and tool point for the object to count as held, m."""
HOLD_Z = (-0.03, 0.035)
"""Range of (object z - tool point z) for the object to count as held, m."""
GRIP_MARGIN = 0.004
"""A finger opening below the object width + this counts as closed on the object, m."""
GRIP_EMPTY = 0.008
"""A finger opening below this holds nothing (closed on air), m."""
SETTLE = 0.0015
"""Fingers closing by more than this per control step are still closing, m."""
AT_POINT = 0.012
"""Distance to a way point within which a phase's way point counts as reached, m."""
OFF_TABLE_Z = -0.02
"""An object centre below this height has fallen off the table, m."""
LOWER_XY = 0.02
"""Horizontal distance to the release point below which a held object is lowered (instead of carried), m."""
REALIGN_PERP = 0.04
"""Push with ``realign_push``: largest distance from the push line of a tool point low behind the target that goes
back to the push's start (``descend``) instead of climbing to re-approach, m."""
REALIGN_DZ = 0.05
"""Push with ``realign_push``: height above the push height below which a tool point behind the target counts as
low, m (the expert's own approach passes behind the target at 0.1 m, above this band)."""


class StateExpert:
    """A family's scripted expert whose phase is derived from the world state at every step.

    ``act(state)`` returns the expert's action ``(dx, dy, dz, gripper)`` (metres, like the engine experts) for
    any state, including ones the expert did not drive to. The only memory kept is the previous finger
    opening (to tell closing fingers from settled ones); :meth:`reset` clears it.
    """

    def __init__(self, family: str, realign_push: bool = False) -> None:
        """Wrap a fresh expert of ``family``.

        ``realign_push``: in a push, a tool point low behind the target (off the push line by less than
        ``REALIGN_PERP`` or less than ``REALIGN_DZ`` above the push height, where a policy's push often is) goes back
        to the push's start and down instead of climbing to the approach height and round again. A labelling choice
        for states a policy reached (corrective demonstrations); the demonstrator keeps the default.
        """
        self.family = get_family(family)
        self.realign_push = realign_push
        self.expert: Any = self.family.expert()
        self.phase = ""
        self._last_gripper: float | None = None

    def reset(self) -> None:
        """Start a new episode."""
        self.expert.reset()
        self.phase = ""
        self._last_gripper = None

    def act(self, state: Any) -> np.ndarray:
        """Return the expert action in ``state`` after setting the expert's phase from the state."""
        if isinstance(self.expert, PickAndPlaceExpert):
            self._sync_pick_and_place(state)
        elif isinstance(self.expert, PushExpert):
            self._sync_push(state)
        self._last_gripper = float(state.gripper)
        action = np.asarray(self.expert.act(state), dtype=np.float32)
        self.phase = str(getattr(self.expert, "phase", ""))
        return action

    def _sync_pick_and_place(self, state: Any) -> None:
        ex = self.expert
        ee, obj = np.asarray(state.ee_pos, float), np.asarray(state.target_pos, float)
        half = np.asarray(state.target.size, float)
        width = 2.0 * half[0]
        grip = float(state.gripper)
        last = self._last_gripper if self._last_gripper is not None else grip
        # Fingers still closing on an object that rests on the table: let them settle before lifting.
        settling = last - grip > SETTLE and obj[2] - half[2] < 0.01
        # Closed on the object: narrower than it (while not settling), or settled short of open (a toppled
        # object is wider across the fingers than its nominal width).
        closed_on = (grip < width + GRIP_MARGIN and not settling) or (abs(last - grip) <= SETTLE and grip < 0.075)
        near = np.linalg.norm(obj[:2] - ee[:2]) < HOLD_XY and HOLD_Z[0] < obj[2] - ee[2] < HOLD_Z[1]
        ex.counter = 0
        offset = ee - obj
        release = np.array([*(ex.place_xy(state) + offset[:2]), ex.place_z(state) + offset[2]])
        if near and grip > GRIP_EMPTY and closed_on:
            ex.grasp_offset = float(ee[2] - obj[2])
            if np.linalg.norm(ee - release) < AT_POINT:
                ex.phase = "release"
            elif np.linalg.norm(ee[:2] - release[:2]) < LOWER_XY and ee[2] < CARRY_Z + 0.02:
                ex.phase = "lower"
            elif ee[2] > CARRY_Z - 0.015:
                ex.phase = "carry"
            else:
                ex.phase = "lift"
            return
        at_place = np.linalg.norm(obj[:2] - ex.place_xy(state)) < LOWER_XY and obj[2] < ex.place_z(state) + 0.02
        if at_place or self._placed(state):  # released at its place (or still falling there)
            ex.phase = "retreat"
            return
        grasp_z = max(obj[2] - 0.012, obj[2] + half[2] - 0.032, 0.012)
        above_z = max(obj[2] + half[2] + 0.07, 0.1)
        xy = float(np.linalg.norm(ee[:2] - obj[:2]))
        if near and grip > GRIP_EMPTY and np.linalg.norm(ee - [obj[0], obj[1], grasp_z]) < AT_POINT:
            ex.phase = "close"
        elif xy < AT_POINT and ee[2] < above_z + AT_POINT and grip > width + GRIP_MARGIN:
            ex.phase = "descend"
        else:
            ex.phase = "approach"

    def _placed(self, state: Any) -> bool:
        """Whether the task would be done with the fingers open (the object sits at its place)."""
        return bool(self.family.success(replace(state, gripper=0.08)))

    def _sync_push(self, state: Any) -> None:
        ex = self.expert
        ee, p, g = np.asarray(state.ee_pos, float), np.asarray(state.target_pos, float), state.goal_pos
        to_goal = np.asarray(g[:2], float) - p[:2]
        remaining = float(np.linalg.norm(to_goal))
        if remaining < 1e-6:
            ex.phase = "done"
            return
        u = to_goal / remaining
        reach = float(np.hypot(state.target_size[0], state.target_size[1]))
        rel = ee[:2] - p[:2]
        along = float(rel @ u)
        perp = float(np.linalg.norm(rel - along * u))
        z = _push_height(state)
        behind_xy = p[:2] - u * (reach + BEHIND)
        low_behind = self.realign_push and along < -reach and perp < REALIGN_PERP and ee[2] < z + REALIGN_DZ
        if perp < 0.025 and along < 0.0 and ee[2] < z + 0.015:
            ex.phase = "push"
        elif (np.linalg.norm(ee[:2] - behind_xy) < 0.02 and ee[2] < 0.1 + AT_POINT) or low_behind:
            ex.phase = "descend"
        else:
            ex.phase = "approach"


def off_table(state: Any) -> bool:
    """Whether an object has fallen off the table (unrecoverable; its position leaves the observation's range)."""
    return any(float(p[2]) < OFF_TABLE_Z for p in state.positions.values())


def demonstrator(family: str, name: str = EXPERT) -> Expert:
    """Return a fresh, reset expert of ``family``: ``expert`` (scripted) or ``state_expert`` (:class:`StateExpert`)."""
    if name not in DEMONSTRATORS:
        raise ValueError(f"demonstrator {name!r} must be one of {DEMONSTRATORS}")
    expert: Expert = get_family(family).expert() if name == EXPERT else StateExpert(family)
    expert.reset()
    return expert
