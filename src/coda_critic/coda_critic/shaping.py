# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""A small discrete pick-and-place MDP to check that staged potential shaping keeps the optimal policy.

The tool moves on a 3 x 3 x 2 grid over the table, the gripper opens or closes, and one cube must be
released into a bin. Each state is written into the real observation layout (``LAYOUT``), so compiled
potential programs evaluate on it exactly as in simulation, with the stage index as part of the state:
states are (grid state, stage k) and k' = the program's stage after the move. Value iteration then
compares the task reward r with the shaped reward r + gamma * Phi(s', k') - Phi(s, k) (Ng, Harada and
Russell 1999): the optimal actions must be the same in every state. Pure module: no rclpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coda_core_cpp import PotentialProgram
from coda_engine.sim.layout import LAYOUT, OBS_DIM

XS = (0.4, 0.5, 0.6)
"""Grid x positions, m."""
YS = (-0.1, 0.0, 0.1)
"""Grid y positions, m."""
ZS = (0.03, 0.14)
"""Tool heights: low (can grasp) and high (carrying height), m."""
CUBE = 0.022
"""Cube half size, m."""
BIN = (0.085, 0.085, 0.025)
"""Bin half extents, m."""
ACTIONS = ("+x", "-x", "+y", "-y", "+z", "-z", "open", "close")
"""The discrete actions."""
MOVES = {"+x": (1, 0, 0), "-x": (-1, 0, 0), "+y": (0, 1, 0), "-y": (0, -1, 0), "+z": (0, 0, 1), "-z": (0, 0, -1)}


@dataclass(frozen=True)
class GridState:
    """Tool cell, gripper, cube cell (or held), and whether the task is done (absorbing)."""

    ee: tuple[int, int, int]
    """Tool cell (ix, iy, iz)."""
    closed: bool
    """Gripper closed."""
    cube: tuple[int, int] | None
    """Cube cell on the table, or None while held."""
    done: bool = False
    """The cube was released into the bin (absorbing)."""


@dataclass(frozen=True)
class PickPlaceMdp:
    """Start and goal cells of the grid task."""

    start_ee: tuple[int, int, int] = (0, 0, 1)
    """Tool start cell."""
    cube_cell: tuple[int, int] = (2, 2)
    """Cube start cell."""
    bin_cell: tuple[int, int] = (0, 2)
    """Bin cell."""

    def step(self, s: GridState, action: str) -> tuple[GridState, float]:
        """Deterministic transition and task reward (1 when the cube is released into the bin)."""
        if s.done:
            return s, 0.0
        if action in MOVES:
            d = MOVES[action]
            ee = (min(max(s.ee[0] + d[0], 0), 2), min(max(s.ee[1] + d[1], 0), 2), min(max(s.ee[2] + d[2], 0), 1))
            return GridState(ee, s.closed, s.cube), 0.0
        if action == "close":
            if s.cube is not None and not s.closed and s.ee[2] == 0 and s.cube == s.ee[:2]:
                return GridState(s.ee, True, None), 0.0
            return GridState(s.ee, True, s.cube), 0.0
        # open
        if s.cube is None:
            if s.ee[:2] == self.bin_cell:
                return GridState(s.ee, False, s.ee[:2], done=True), 1.0
            return GridState(s.ee, False, s.ee[:2]), 0.0
        return GridState(s.ee, False, s.cube), 0.0

    def observe(self, s: GridState, stage: int) -> np.ndarray:
        """Write the state into the observation layout (target = cube in slot 0, goal = bin in slot 1)."""
        obs = np.zeros(OBS_DIM, dtype=np.float32)

        def put(name: str, values: tuple[float, ...] | np.ndarray) -> None:
            offset, length = LAYOUT[name]
            obs[offset:offset + length] = values

        ee = np.array([XS[s.ee[0]], YS[s.ee[1]], ZS[s.ee[2]]])
        put("ee_pos", ee)
        held = s.cube is None
        put("gripper", (2 * CUBE if held and s.closed else 0.0 if s.closed else 0.08,))
        cube = ee - np.array([0.0, 0.0, 0.008]) if held else np.array([XS[s.cube[0]], YS[s.cube[1]], CUBE])
        if s.done:
            cube = np.array([XS[self.bin_cell[0]], YS[self.bin_cell[1]], CUBE])
        put("obj0_pos", cube)
        put("obj0_size", (CUBE, CUBE, CUBE))
        put("obj0_present", (1.0,))
        put("obj1_pos", (XS[self.bin_cell[0]], YS[self.bin_cell[1]], 0.0))
        put("obj1_size", BIN)
        put("obj1_present", (1.0,))
        put("obj1_shape", (3.0,))
        put("stage_index", (float(stage),))
        return obs

    def grid_states(self) -> list[GridState]:
        """Every grid state reachable from the start."""
        start = GridState(self.start_ee, False, self.cube_cell)
        seen, frontier = {start}, [start]
        while frontier:
            nxt = []
            for s in frontier:
                for a in ACTIONS:
                    t, _ = self.step(s, a)
                    if t not in seen:
                        seen.add(t)
                        nxt.append(t)
            frontier = nxt
        return sorted(seen, key=lambda g: (g.done, g.cube is None, g.cube or (-1, -1), g.closed, g.ee))


@dataclass
class Tabular:
    """The MDP over (grid state, stage) as arrays."""

    next_index: np.ndarray
    """(S, A) successor state index."""
    reward: np.ndarray
    """(S, A) task reward."""
    phi: np.ndarray
    """(S,) potential of each state."""
    states: list[tuple[GridState, int]]
    """(grid state, stage) of each index; index 0 is the start."""


def tabulate(mdp: PickPlaceMdp, program: PotentialProgram) -> Tabular:
    """Enumerate the (grid state, stage) pairs reachable from the start under ``program``'s stage tracking."""
    start = GridState(mdp.start_ee, False, mdp.cube_cell)
    phi0, k0 = program.evaluate(mdp.observe(start, 0), 0)
    index = {(start, int(k0)): 0}
    states = [(start, int(k0))]
    phis = [float(phi0)]
    rows: list[list[int]] = []
    rewards: list[list[float]] = []
    i = 0
    while i < len(states):
        s, k = states[i]
        row, rew = [], []
        for a in ACTIONS:
            t, r = mdp.step(s, a)
            phi, k2 = program.evaluate(mdp.observe(t, k), k)
            key = (t, int(k2))
            if key not in index:
                index[key] = len(states)
                states.append(key)
                phis.append(float(phi))
            row.append(index[key])
            rew.append(r)
        rows.append(row)
        rewards.append(rew)
        i += 1
    return Tabular(np.array(rows), np.array(rewards), np.array(phis), states)


def value_iteration(next_index: np.ndarray, reward: np.ndarray, gamma: float, tol: float = 1e-12,
                    max_iter: int = 20000) -> np.ndarray:
    """Optimal Q (S, A) of a deterministic MDP by value iteration."""
    v = np.zeros(next_index.shape[0])
    for _ in range(max_iter):
        q = reward + gamma * v[next_index]
        v_new = q.max(axis=1)
        if np.max(np.abs(v_new - v)) < tol:
            return reward + gamma * v_new[next_index]
        v = v_new
    raise RuntimeError(f"value iteration did not converge in {max_iter} iterations")


def optimal_action_sets(q: np.ndarray, tol: float = 1e-7) -> list[frozenset[int]]:
    """Per state, the actions within ``tol`` of the best."""
    best = q.max(axis=1, keepdims=True)
    return [frozenset(np.flatnonzero(row).tolist()) for row in (q >= best - tol)]


@dataclass
class ShapingCheck:
    """Result of comparing the task reward with the shaped reward on the grid task."""

    states: int
    """Number of (grid state, stage) pairs."""
    stages_visited: int
    """Distinct stage indices among them."""
    same_policy: bool
    """Identical optimal action sets in every state."""
    max_q_gap: float
    """max |Q_shaped - (Q - Phi)| (0 up to value-iteration tolerance, by the theorem)."""
    differing_states: int
    """States whose optimal action sets differ."""


def check_shaping(program: PotentialProgram, gamma: float = 0.95, mdp: PickPlaceMdp | None = None,
                  potential_based: bool = True) -> ShapingCheck:
    """Value iteration with r and with r + F; ``potential_based=False`` uses the bonus r + Phi(s') instead of F.

    The non-potential bonus is the control: it is expected to change the optimal policy.
    """
    mdp = mdp or PickPlaceMdp()
    tab = tabulate(mdp, program)
    q = value_iteration(tab.next_index, tab.reward, gamma)
    if potential_based:
        shaped = tab.reward + gamma * tab.phi[tab.next_index] - tab.phi[:, None]
    else:
        done = np.array([s.done for s, _ in tab.states])
        shaped = tab.reward + np.where(done[tab.next_index], 0.0, tab.phi[tab.next_index])
    q_shaped = value_iteration(tab.next_index, shaped, gamma)
    a, b = optimal_action_sets(q), optimal_action_sets(q_shaped)
    differing = sum(x != y for x, y in zip(a, b, strict=True))
    gap = float(np.max(np.abs(q_shaped - (q - tab.phi[:, None]))))
    return ShapingCheck(states=len(tab.states), stages_visited=len({k for _, k in tab.states}),
                        same_policy=differing == 0, max_q_gap=gap, differing_states=differing)


__all__ = ["ACTIONS", "PickPlaceMdp", "ShapingCheck", "check_shaping", "tabulate", "value_iteration"]
