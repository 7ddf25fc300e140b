# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda bench loop``: what the loop's scene source and critic cost, in-process and over DDS, against direct calls.

The generate step asks its scene source for one scene per seed, and the diagnose step asks its critic for the
round's diagnoses (:mod:`coda_loop.sources`). This benchmark times, on the same seeds and episodes:

- ``scenes``: the engine's generator called directly (``generate(family, rng, params)``, the reference: what the
  generate step called before it had sources), the in-process source (``coda run``'s default), and with
  ``--dds`` the ``scene_generator`` node's ``GenerateScenes`` (started here as its own process). ``ms_per_scene``
  for each, ``ratio`` to the reference, and whether every way gave the same scenes.
- ``critic`` (with ``--dds``): the grounded critic called directly on a batch of recorded episodes, against the
  ``critic`` node's ``DiagnoseEpisodes`` (scenes in the request); ``ms_per_episode`` and ``ratio``.

The ways alternate in ``--repeats`` rounds (order reversed every other round, after one untimed warm-up call each),
so a change of machine load falls on all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

from coda_engine.sim.generator import draw_seed, generate
from coda_engine.sim.scene import SceneParams
from coda_loop.config import FAMILIES
from coda_loop.sources import InProcessScenes


def _scene_jobs(count: int, seed: int) -> list[tuple[str, int]]:
    """(family, seed of the scene) pairs: the draws a generate step makes, families in turn."""
    rng = np.random.default_rng(seed)
    return [(FAMILIES[i % len(FAMILIES)], draw_seed(rng)) for i in range(count)]


def _reference_scenes(count: int, seed: int, params: SceneParams) -> list[Any]:
    """Return scenes made by the call the generate step made before it had sources.

    ``generate(family, rng, params)`` draws the same seeds from the same generator as :func:`_scene_jobs`.
    """
    rng = np.random.default_rng(seed)
    return [generate(FAMILIES[i % len(FAMILIES)], rng, params) for i in range(count)]


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


class _Nodes:
    """A scene_generator and a critic as their own processes, and a client node, on this process's domain."""

    def __init__(self) -> None:
        import rclpy

        from coda_engine.ros.clients import EngineClient
        from coda_loop.ros.remote import RemoteCritic, RemoteScenes

        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.procs = [subprocess.Popen([sys.executable, "-m", module, "--ros-args", "-p", f"{name}"],
                                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for module, name in (("coda_engine.ros.scene_generator_node", "inline_mjcf:=true"),
                                           ("coda_critic.ros.critic_node", "publish_programs:=false"))]
        rclpy.init()
        self.node = rclpy.create_node("coda_bench_loop")
        self.client = EngineClient(self.node)
        self.scenes = RemoteScenes(lambda: self.client, "/generate_scenes")
        self.critic = RemoteCritic(lambda: self.client, "/diagnose_episodes")

    def close(self) -> None:
        import rclpy

        self.node.destroy_node()
        rclpy.try_shutdown()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=30)


def _episodes(scenes: list[Any]) -> list[Any]:
    """Return recorded episodes of the scripted expert on ``scenes``, sampled as the loop samples its episodes.

    Every other one is turned back after 10 steps, so some fail and the critic has failures to locate.
    """
    from coda_engine.episodes import RecordingConfig, run_recorded_episode
    from coda_engine.policies import resolve
    from coda_engine.sim.arm import SimArm
    from coda_loop.workers import SAMPLE_EVERY

    arm = SimArm()
    out = []
    for i, scene in enumerate(scenes):
        expert = resolve("expert", scene, None, arm.config.control_hz)
        steps = [0]

        def act(obs: Any, state: Any, expert: Any = expert, steps: list[int] = steps, turn: bool = i % 2 == 1) -> Any:
            steps[0] += 1
            action = np.array(expert(obs, state), dtype=float)
            if turn and steps[0] > 10:
                action[:3] = -action[:3]
            return action

        out.append(run_recorded_episode(arm, scene, act, episode_id=f"bench-{i:04d}", policy_version="bench",
                                        robot_id="bench",
                                        config=RecordingConfig(keyframes=False, sample_every=SAMPLE_EVERY)))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures (JSON with ``--json``)."""
    parser = argparse.ArgumentParser(prog="coda bench loop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--scenes", type=int, default=16, help="scenes per way and repeat")
    parser.add_argument("--episodes", type=int, default=16, help="episodes diagnosed per way and repeat (--dds)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats of every way")
    parser.add_argument("--dds", action="store_true", help="also the scene_generator and critic nodes over DDS "
                        "(started here on ROS_DOMAIN_ID; use a domain of your own)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the scene draws")
    args = parser.parse_args(argv)
    if min(args.scenes, args.episodes, args.repeats) < 1:
        parser.error("--scenes, --episodes and --repeats must be >= 1")
    params = SceneParams(split="id", num_distractors=(0, 4), size_scale=(0.8, 1.2), position_shift=0.06)
    local = InProcessScenes()
    nodes = _Nodes() if args.dds else None
    ways: dict[str, Any] = {"reference": lambda jobs, k: _reference_scenes(len(jobs), args.seed + k, params),
                            "in_process": lambda jobs, k: [local.generate(f, [s], params, 0)[0] for f, s in jobs]}
    if nodes is not None:
        ways["dds"] = lambda jobs, k: [nodes.scenes.generate(f, [s], params, 0)[0] for f, s in jobs]
    seconds = {way: 0.0 for way in ways}
    same = True
    try:
        for fn in ways.values():  # warm-up, untimed: vocabularies, models, discovery
            fn(_scene_jobs(1, args.seed + 10_000), 10_000)
        for k in range(args.repeats):
            jobs = _scene_jobs(args.scenes, args.seed + k)
            digests = {}
            order = list(ways) if k % 2 == 0 else list(reversed(ways))
            for way in order:
                took, scenes = _timed(lambda way=way, jobs=jobs, k=k: ways[way](jobs, k))
                seconds[way] += took
                digests[way] = [s.mjcf_sha256 for s in scenes]
            same &= len({tuple(d) for d in digests.values()}) == 1
        total = args.scenes * args.repeats
        result: dict[str, Any] = {"scenes": {
            "ms_per_scene": {way: round(1000 * s / total, 2) for way, s in seconds.items()},
            "ratio": {way: round(s / seconds["reference"], 3) for way, s in seconds.items() if way != "reference"},
            "same_scenes": bool(same), "scenes_timed": total}}
        if nodes is not None:
            from coda_critic.grounded import GroundedCritic

            episodes = _episodes(_reference_scenes(args.episodes, args.seed, params))
            critic = GroundedCritic()
            crit_s = {"reference": 0.0, "dds": 0.0}
            agree = True
            for _ in range(args.repeats):
                took, direct = _timed(lambda: critic.diagnose(episodes))
                crit_s["reference"] += took
                took, remote = _timed(lambda: nodes.critic.diagnose(episodes))
                crit_s["dds"] += took
                agree &= [(d.failure_mode, d.failed_stage) for d in direct] == \
                    [(d.failure_mode, d.failed_stage) for d in remote]
            n = len(episodes) * args.repeats
            result["critic"] = {"ms_per_episode": {w: round(1000 * s / n, 2) for w, s in crit_s.items()},
                                "ratio": {"dds": round(crit_s["dds"] / crit_s["reference"], 3)},
                                "same_diagnoses": bool(agree), "episodes_timed": n}
    finally:
        if nodes is not None:
            nodes.close()
    if args.json:
        print(json.dumps(result))
    else:
        for part, figures in result.items():
            print(f"{part}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
