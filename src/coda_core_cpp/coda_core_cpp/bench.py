# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Benchmark of the C++ hot paths against what they replace, measured in one run.

``python -m coda_core_cpp.bench [--json]`` (also ``coda bench core``):

* GAE, T=2048, n_envs=16: ours vs Stable-Baselines3 ``RolloutBuffer.compute_returns_and_advantage``.
* ``add`` for 16 envs, obs_dim 128: ours vs SB3 ``RolloutBuffer.add`` (SB3 receives torch tensors
  for value/log_prob as its API requires; ours receives numpy arrays).
* A 4-stage potential program: single-state ``evaluate`` from Python, and ``evaluate_batch`` on
  4096 states against the pure-Python reference interpreter and against the same potential
  written by hand as vectorised numpy.

Ratios are the other implementation's time divided by ours. Each figure is the median of
several repetitions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import coda_core_cpp as core
from coda_core_cpp import reference

GAE_STEPS, GAE_ENVS = 2048, 16
ADD_ENVS, ADD_OBS_DIM, ADD_ACTION_DIM, ADD_STEPS = 16, 128, 8, 256
BATCH_STATES = 4096
TARGETS = {
    "gae_ratio_vs_sb3": (">=", 100.0),
    "add_ratio_vs_sb3": (">=", 10.0),
    "eval_batch_ns_per_state": ("<=", 100.0),
    "eval_batch_ratio_vs_reference": (">=", 200.0),
    "eval_batch_ratio_vs_numpy": (">=", 3.0),
    "eval_single_us": ("<=", 2.0),
}

PROGRAM = """\
stage reach:
  progress = 1 - clip(dist(ee_pos, cube_pos) / 0.3, 0, 1)
  done     = dist(ee_pos, cube_pos) < 0.05
stage grasp:
  progress = 1 - clip(gripper, 0, 1)
  done     = gripper < 0.2 and dist(ee_pos, cube_pos) < 0.06
stage lift:
  progress = clip((cube_pos.z - 0.42) / 0.1, 0, 1)
  done     = cube_pos.z > 0.5
stage place:
  progress = 1 - clip(dist_xy(cube_pos, target_pos) / 0.4, 0, 1)
  done     = dist(cube_pos, target_pos) < 0.05
"""
LAYOUT = {"ee_pos": (0, 3), "cube_pos": (3, 3), "target_pos": (6, 3), "gripper": (9, 1)}
STATE_DIM = 16


def numpy_potential(states: np.ndarray, stages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Evaluate the benchmark program written by hand as vectorised numpy (what a user would write instead)."""
    ee, cube, target, grip = states[:, 0:3], states[:, 3:6], states[:, 6:9], states[:, 9]
    d_ee_cube = np.sqrt(np.sum((ee - cube) ** 2, axis=1))
    d_cube_target = np.sqrt(np.sum((cube - target) ** 2, axis=1))
    d_xy = np.sqrt(np.sum((cube[:, :2] - target[:, :2]) ** 2, axis=1))
    done = np.stack(
        [d_ee_cube < 0.05, (grip < 0.2) & (d_ee_cube < 0.06), cube[:, 2] > 0.5, d_cube_target < 0.05]
    )
    progress = np.stack(
        [
            1 - np.clip(d_ee_cube / 0.3, 0, 1),
            1 - np.clip(grip, 0, 1),
            np.clip((cube[:, 2] - 0.42) / 0.1, 0, 1),
            1 - np.clip(d_xy / 0.4, 0, 1),
        ]
    )
    k = done.shape[0]
    stage = stages.astype(np.int32, copy=True)
    for j in range(k):
        stage[(stage == j) & done[j]] += 1
    p = progress[np.minimum(stage, k - 1), np.arange(states.shape[0])]
    phi = np.where(stage == k, 1.0, (stage + np.clip(p, 0, 1)) / k).astype(np.float32)
    return phi, stage


def _median_time(fn: Callable[[], Any], repeat: int, number: int = 1) -> float:
    """Median over `repeat` runs of the time of `number` calls, per call, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def _bench_gae(rng: np.random.Generator, repeat: int) -> dict[str, float]:
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.buffers import RolloutBuffer as SB3Buffer

    t, n = GAE_STEPS, GAE_ENVS
    sb3 = SB3Buffer(t, spaces.Box(-1, 1, (4,), np.float32), spaces.Box(-1, 1, (2,), np.float32), "cpu",
                    gae_lambda=0.95, gamma=0.99, n_envs=n)
    sb3.rewards[:] = rng.normal(size=(t, n)).astype(np.float32)
    sb3.values[:] = rng.normal(size=(t, n)).astype(np.float32)
    sb3.episode_starts[:] = (rng.random((t, n)) < 0.02).astype(np.float32)
    last_values = rng.normal(size=n).astype(np.float32)
    dones = (rng.random(n) < 0.1).astype(np.float32)
    last_t = torch.as_tensor(last_values)

    ours = core.RolloutBuffer(t, n, 4, 2)
    ours.rewards[:] = sb3.rewards
    ours.values[:] = sb3.values
    ours.episode_starts[:] = sb3.episode_starts
    for _ in range(t):  # mark the steps as stored
        ours.add(np.zeros((n, 4), np.float32), np.zeros((n, 2), np.float32), ours.rewards[0], ours.episode_starts[0],
                 ours.values[0], np.zeros(n, np.float32), np.zeros(n, np.int32))
    ours.rewards[:] = sb3.rewards
    ours.values[:] = sb3.values
    ours.episode_starts[:] = sb3.episode_starts

    sb3_s = _median_time(lambda: sb3.compute_returns_and_advantage(last_t, dones), repeat)
    ours_s = _median_time(lambda: ours.compute_gae(last_values, dones, 0.99, 0.95), repeat * 5, 20)
    if not np.allclose(ours.advantages, sb3.advantages, atol=1e-5):
        raise RuntimeError("GAE results differ from SB3")
    return {"gae_sb3_s": sb3_s, "gae_ours_s": ours_s, "gae_ratio_vs_sb3": sb3_s / ours_s}


def _bench_add(rng: np.random.Generator, repeat: int) -> dict[str, float]:
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.buffers import RolloutBuffer as SB3Buffer

    n, od, ad, steps = ADD_ENVS, ADD_OBS_DIM, ADD_ACTION_DIM, ADD_STEPS
    sb3 = SB3Buffer(steps, spaces.Box(-1, 1, (od,), np.float32), spaces.Box(-1, 1, (ad,), np.float32), "cpu",
                    n_envs=n)
    ours = core.RolloutBuffer(steps, n, od, ad)
    obs = rng.normal(size=(n, od)).astype(np.float32)
    act = rng.normal(size=(n, ad)).astype(np.float32)
    rew = rng.normal(size=n).astype(np.float32)
    starts = np.zeros(n, np.float32)
    val = rng.normal(size=n).astype(np.float32)
    logp = rng.normal(size=n).astype(np.float32)
    stage = np.zeros(n, np.int32)
    val_t, logp_t = torch.as_tensor(val), torch.as_tensor(logp)

    def fill_sb3() -> None:
        sb3.pos, sb3.full = 0, False
        for _ in range(steps):
            sb3.add(obs, act, rew, starts, val_t, logp_t)

    def fill_ours() -> None:
        ours.reset()
        for _ in range(steps):
            ours.add(obs, act, rew, starts, val, logp, stage)

    sb3_s = _median_time(fill_sb3, repeat) / steps
    ours_s = _median_time(fill_ours, repeat * 3) / steps
    # reset() zeroes the storage; subtract its share so only add() is counted.
    reset_s = _median_time(ours.reset, repeat * 3, 20) / steps
    ours_add = max(ours_s - reset_s, 1e-12)
    return {"add_sb3_us": sb3_s * 1e6, "add_ours_us": ours_add * 1e6, "add_ratio_vs_sb3": sb3_s / ours_add}


def _potential_states(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    states = np.zeros((count, STATE_DIM), np.float32)
    cube = rng.uniform([0.3, -0.2, 0.4], [0.6, 0.2, 0.6], size=(count, 3))
    near = rng.random(count) < 0.5
    ee = np.where(near[:, None], cube + rng.normal(scale=0.03, size=(count, 3)), rng.uniform(0.2, 0.7, (count, 3)))
    states[:, 0:3] = ee
    states[:, 3:6] = cube
    states[:, 6:9] = cube + rng.normal(scale=0.1, size=(count, 3))
    states[:, 9] = rng.uniform(0, 1, count)
    states[:, 10:] = rng.normal(size=(count, STATE_DIM - 10))
    stages = rng.integers(0, 5, count).astype(np.int32)
    return states, stages


def _bench_potential(rng: np.random.Generator, repeat: int) -> dict[str, float]:
    prog = core.PotentialProgram.compile(PROGRAM, LAYOUT)
    ref = reference.PotentialProgram.compile(PROGRAM, LAYOUT)
    states, stages = _potential_states(rng, BATCH_STATES)

    phi, new = prog.evaluate_batch(states, stages)
    ref_phi, ref_new = ref.evaluate_batch(states, stages)
    np_phi, np_new = numpy_potential(states, stages)
    if not (np.array_equal(phi, ref_phi) and np.array_equal(new, ref_new)):
        raise RuntimeError("C++ and reference potentials differ")
    if np.mean(new == np_new) < 0.999 or np.max(np.abs(phi - np_phi)[new == np_new]) > 1e-5:
        raise RuntimeError("the numpy potential differs from the program")

    one, one_stage = states[0], 0
    single_s = _median_time(lambda: prog.evaluate(one, one_stage), repeat, 20000)
    batch_s = _median_time(lambda: prog.evaluate_batch(states, stages), repeat * 5, 50)
    numpy_s = _median_time(lambda: numpy_potential(states, stages), repeat * 2, 10)
    reference_s = _median_time(lambda: ref.evaluate_batch(states, stages), max(1, repeat // 3))
    return {
        "eval_single_us": single_s * 1e6,
        "eval_batch_ns_per_state": batch_s / BATCH_STATES * 1e9,
        "eval_batch_s": batch_s,
        "eval_batch_reference_s": reference_s,
        "eval_batch_numpy_s": numpy_s,
        "eval_batch_ratio_vs_reference": reference_s / batch_s,
        "eval_batch_ratio_vs_numpy": numpy_s / batch_s,
        "eval_batch_states": float(BATCH_STATES),
        "eval_program_stages": float(prog.num_stages),
    }


def run(seed: int = 0, repeat: int = 7) -> dict[str, Any]:
    """Run every benchmark once; return the figures and which targets are met."""
    rng = np.random.default_rng(seed)
    figures: dict[str, Any] = {}
    figures.update(_bench_gae(rng, repeat))
    figures.update(_bench_add(rng, repeat))
    figures.update(_bench_potential(rng, repeat))
    met = {}
    for key, (cmp, bound) in TARGETS.items():
        met[key] = bool(figures[key] >= bound) if cmp == ">=" else bool(figures[key] <= bound)
    figures["targets"] = {key: f"{cmp} {bound:g}" for key, (cmp, bound) in TARGETS.items()}
    figures["targets_met"] = met
    return figures


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: print the figures (one JSON object with --json)."""
    parser = argparse.ArgumentParser(prog="python -m coda_core_cpp.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data")
    parser.add_argument("--repeat", type=int, default=7, help="repetitions per measurement (median is reported)")
    args = parser.parse_args(argv)
    figures = run(args.seed, max(1, args.repeat))
    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return 0
    for key, value in figures.items():
        if key in ("targets", "targets_met"):
            continue
        target = figures["targets"].get(key, "")
        status = "" if not target else ("  ok" if figures["targets_met"][key] else "  MISSED")
        print(f"{key:32s} {value:14.6g}  {target}{status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
