# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda bench sim``: the simulated arm against raw MuJoCo, scene throughput, render speed, expert success.

- ``step_overhead_ratio``: time of one env control step (IK + 50 physics steps + observation + stage) over
  the time of the same 50 ``mj_step`` calls on the same model (target <= 1.25).
- ``scenes_per_s``: scenes generated and validated (layout checks, IK reachability, settling) per second.
- ``render_fps_64`` / ``render_fps_128``: scene-camera frames per second, headless.
- ``expert_success``: ``{family: {split: rate}}`` of the scripted experts over ``--scenes`` scenes each.
"""

from __future__ import annotations

import argparse
import json
import time

import mujoco
import numpy as np

from coda_engine.sim import stages
from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import expert_success_rate
from coda_engine.sim.families import FAMILIES
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SPLITS, SceneParams


def step_overhead(steps: int, seed: int) -> dict[str, float]:
    """Env control step vs raw ``mj_step`` of the same model for the same physics steps."""
    rng = np.random.default_rng(seed)
    arm = SimArm()
    scene = generate("pick_place", rng, SceneParams(num_distractors=(2, 2)))
    arm.reset(scene)
    actions = rng.uniform(-1, 1, (steps, 4)) * np.array([0.02, 0.02, 0.02, 1.0])
    for a in actions[:5]:
        arm.step(a)
    m, d = arm.model, arm.data
    raw = mujoco.MjData(m)
    kind = mujoco.mjtState.mjSTATE_INTEGRATION
    state = np.zeros(mujoco.mj_stateSize(m, kind))
    n = arm.physics_steps_per_control
    env_times, raw_times = np.zeros(steps), np.zeros(steps)
    # Paired timing: each control step, then the same physics steps from the same state with the
    # same controls on a bare MjData (interleaved, so machine load affects both alike).
    for i, a in enumerate(actions):
        mujoco.mj_getState(m, d, state, kind)
        start = time.perf_counter()
        arm.step(a)
        env_times[i] = time.perf_counter() - start
        mujoco.mj_setState(m, raw, state, kind)
        raw.ctrl[:] = d.ctrl
        start = time.perf_counter()
        mujoco.mj_step(m, raw, n)
        raw_times[i] = time.perf_counter() - start
    env_time, raw_time = float(np.median(env_times)), float(np.median(raw_times))
    ratio = float(np.median(env_times / raw_times))
    return {"env_step_ms": env_time * 1e3, "raw_physics_ms": raw_time * 1e3, "ratio": ratio}


def scenes_per_second(count: int, seed: int) -> float:
    """Measure generated and validated scenes per second, over all families."""
    rng = np.random.default_rng(seed)
    names = list(FAMILIES)
    generate(names[0], rng)
    start = time.perf_counter()
    for i in range(count):
        generate(names[i % len(names)], rng)
    return count / (time.perf_counter() - start)


def render_fps(size: int, frames: int, seed: int) -> float:
    """Frames per second of the scene camera at ``size`` x ``size``."""
    arm = SimArm()
    arm.reset(generate("pick_place", np.random.default_rng(seed)))
    arm.render(size, size)
    start = time.perf_counter()
    for _ in range(frames):
        arm.render(size, size)
    fps = frames / (time.perf_counter() - start)
    arm.close()
    return fps


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures (JSON with ``--json``)."""
    parser = argparse.ArgumentParser(prog="coda bench sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--scenes", type=int, default=200, help="scenes per family and split for expert success")
    parser.add_argument("--steps", type=int, default=300, help="control steps timed for the overhead ratio")
    parser.add_argument("--frames", type=int, default=200, help="frames rendered per resolution")
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), help="families of expert_success")
    parser.add_argument("--splits", nargs="*", default=list(SPLITS), help="splits of expert_success")
    parser.add_argument("--seed", type=int, default=0, help="seed of all random draws")
    args = parser.parse_args(argv)
    for name in ("scenes", "steps", "frames"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)}: must be at least 1")
    unknown = [f for f in args.families if f not in FAMILIES] + [s for s in args.splits if s not in SPLITS]
    if unknown:
        parser.error(f"unknown families or splits {unknown} (families: {', '.join(FAMILIES)}; splits: "
                     f"{', '.join(SPLITS)})")
    overhead = step_overhead(args.steps, args.seed)
    result: dict[str, object] = {
        "step_overhead_ratio": round(overhead["ratio"], 3),
        "env_step_ms": round(overhead["env_step_ms"], 3),
        "raw_physics_ms": round(overhead["raw_physics_ms"], 3),
        "scenes_per_s": round(scenes_per_second(max(8, min(args.scenes, 40)), args.seed), 2),
        "render_fps_64": round(render_fps(64, args.frames, args.seed), 1),
        "render_fps_128": round(render_fps(128, args.frames, args.seed), 1),
        "stage_backend": stages.backend(),
    }
    arm = SimArm()
    success: dict[str, dict[str, float]] = {}
    for family in args.families:
        success[family] = {}
        for k, split in enumerate(args.splits):
            rng = np.random.default_rng([args.seed, k, len(family)])
            success[family][split] = round(expert_success_rate(family, rng, SceneParams(split=split), args.scenes,
                                                               arm), 3)
            if not args.json:
                print(f"expert {family:10s} {split:11s} {success[family][split]:.3f}", flush=True)
    result["expert_success"] = success
    result["expert_scenes"] = args.scenes
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0
