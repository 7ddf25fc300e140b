# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Where a round's episodes run: local simulation worker processes and ``sim_bridge`` workers on the ROS domain.

:class:`EpisodeRunner` keeps a queue of (scene, episode id) jobs and hands each to the next free
slot: one of ``workers`` local processes (each with its own ``SimArm`` and its own copy of the
policy, loaded from the run's checkpoint folder) or, when a ROS node is given, one of the
``sim_bridge`` workers whose ``run_episode`` action server is on the domain (found when the runner
is created and before every batch, so workers started later with ``ros2 run coda_engine sim_bridge``
join the next batch). A remote worker must see the run's checkpoint folder at the same path
(``checkpoint_root`` parameter). Results come back in the order of the jobs.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from coda_engine.episodes import RecordedEpisode, RecordingConfig, run_recorded_episode
from coda_engine.sim.scene import Scene

ACTION_TYPE = "coda_msgs/action/RunEpisode"

_ARM: Any = None


def die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux), so a killed run leaves no workers behind."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the request was made
            os._exit(1)


def _init_worker() -> None:
    import torch

    die_with_parent()
    torch.set_num_threads(1)


def run_local(scene: Scene, version: str, checkpoint_root: str, episode_id: str, robot_id: str,
              keyframe_size: int = 64, keyframes: bool = True) -> RecordedEpisode:
    """Run one episode in this process (a local worker's job); the arm is created once per process."""
    global _ARM
    from coda_engine.policies import resolve
    from coda_engine.sim.arm import SimArm

    if _ARM is None:
        _ARM = SimArm()
    act = resolve(version, scene, Path(checkpoint_root))
    return run_recorded_episode(_ARM, scene, act, episode_id=episode_id, policy_version=version, robot_id=robot_id,
                                config=RecordingConfig(keyframes=keyframes, keyframe_size=keyframe_size,
                                                          sample_every=2))


class EpisodeRunner:
    """Runs batches of episodes on local processes and remote ``sim_bridge`` workers (see the module docstring)."""

    def __init__(self, workers: int, checkpoint_root: Path, node: Any | None = None,
                 remote_timeout: float = 300.0) -> None:
        """Start ``workers`` local processes; with ``node`` (an rclpy node) also use remote workers."""
        self.checkpoint_root = Path(checkpoint_root).resolve()
        self.workers = workers
        self.node = node
        self.remote_timeout = remote_timeout
        self.pool = (ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_worker) if workers > 0 else None)
        self.client: Any = None
        self.remote_used: dict[str, int] = {}
        self.rejected: dict[str, str] = {}
        """Remote workers dropped for a malformed result, with the reason."""

    def close(self) -> None:
        """Stop the local processes."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def remote_workers(self) -> list[str]:
        """Namespaces of the ``run_episode`` action servers now on the domain."""
        if self.node is None:
            return []
        from rclpy.action import get_action_names_and_types

        names = [name for name, types in get_action_names_and_types(self.node) if ACTION_TYPE in types]
        return sorted(name.rsplit("/run_episode", 1)[0].strip("/") for name in names if name.endswith("/run_episode"))

    def run(self, jobs: list[tuple[Scene, str]], version: str) -> list[RecordedEpisode]:
        """Run ``version`` on every (scene, episode id) job; return the episodes in job order."""
        remote = self.remote_workers()
        if self.pool is None and not remote:
            raise RuntimeError("no simulation worker: workers=0 and no sim_bridge run_episode server on the ROS "
                               "domain (start one with `ros2 run coda_engine sim_bridge` or use --workers >= 1)")
        results: list[RecordedEpisode | None] = [None] * len(jobs)
        queue = list(range(len(jobs)))
        local: dict[int, Future] = {}
        busy: dict[str, tuple[int, Any, float]] = {}
        if remote and self.client is None:
            from coda_engine.ros.clients import EngineClient

            self.client = EngineClient(self.node)
        while queue or local or busy:
            while self.pool is not None and queue and len(local) < 2 * self.workers:
                i = queue.pop(0)
                scene, episode_id = jobs[i]
                local[i] = self.pool.submit(run_local, scene, version, str(self.checkpoint_root), episode_id,
                                            f"local_{i % self.workers}")
            for ns in remote:
                if ns not in busy and queue:
                    i = queue.pop()
                    busy[ns] = (i, self._send(ns, jobs[i][0], version, jobs[i][1]), time.monotonic())
            for i, future in list(local.items()):
                if future.done():
                    results[i] = future.result()
                    del local[i]
            for ns, (i, handle, started) in list(busy.items()):
                done, episode = self._poll(ns, handle, jobs[i])
                if done:
                    del busy[ns]
                    if episode is None:  # the worker refused or vanished: run it elsewhere
                        queue.append(i)
                        remote = [r for r in remote if r != ns]
                    else:
                        results[i] = episode
                        self.remote_used[ns] = self.remote_used.get(ns, 0) + 1
                elif time.monotonic() - started > self.remote_timeout:
                    del busy[ns]
                    queue.append(i)
                    remote = [r for r in remote if r != ns]
            if self.pool is None and not remote and (queue or local):
                raise RuntimeError("every remote sim_bridge worker dropped out and there are no local workers")
            if self.client is not None and busy:
                self.client.executor.spin_once(timeout_sec=0.01)
            else:
                time.sleep(0.01)
        return [r for r in results if r is not None]

    def _send(self, ns: str, scene: Scene, version: str, episode_id: str) -> Any:
        from rclpy.action import ActionClient

        from coda_engine.ros.convert import dict_to_msg
        from coda_msgs.action import RunEpisode
        from coda_msgs.msg import SceneSpec

        client = self.client.episode_clients.get(ns)
        if client is None:
            client = ActionClient(self.node, RunEpisode, f"/{ns}/run_episode")
            self.client.episode_clients[ns] = client
        goal = RunEpisode.Goal(scene=dict_to_msg(SceneSpec, scene.to_dict()), policy_version=version,
                               record_keyframes=True, episode_id=episode_id)
        return {"sent": client.send_goal_async(goal), "result": None}

    def _poll(self, ns: str, handle: dict[str, Any], job: tuple[Scene, str]) -> tuple[bool, RecordedEpisode | None]:
        if handle["result"] is None:
            if not handle["sent"].done():
                return False, None
            goal_handle = handle["sent"].result()
            if goal_handle is None or not goal_handle.accepted:
                return True, None
            handle["result"] = goal_handle.get_result_async()
        if not handle["result"].done():
            return False, None
        response = handle["result"].result().result
        if not response.accepted:
            return True, None
        try:
            return True, episode_from_message(response.result, job[0], ns)
        except ValueError as error:  # a malformed result (CriticInputError): drop the worker, run the job elsewhere
            self.rejected[ns] = str(error)
            return True, None


def episode_from_message(result: Any, scene: Scene, robot_id: str) -> RecordedEpisode:
    """Turn a ``coda_msgs/EpisodeResult`` of a remote worker into the episode the loop records and diagnoses.

    Uses the critic's reader of results (:func:`coda_critic.episode_input.episode_from_result`), which also checks
    what the critic relies on; the scene is the one the job sent (with its MJCF).
    """
    from coda_critic.episode_input import SceneBook, episode_from_result
    from coda_engine.ros.convert import msg_to_dict
    from coda_engine.ros.images import msg_to_image

    data = msg_to_dict(result)
    data["keyframes"] = [msg_to_image(m) for m in result.keyframes]
    data["robot_id"] = data["robot_id"] or robot_id
    book = SceneBook(capacity=1)
    book.add(scene.to_dict())
    return dataclasses.replace(episode_from_result(data, book), scene=scene)
