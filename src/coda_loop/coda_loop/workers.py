# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Where a round's episodes run: local simulation processes, ``sim_bridge`` workers and real arms on the ROS domain.

:class:`EpisodeRunner` keeps a queue of (scene, episode id) jobs and hands each to the next free
slot: one of ``workers`` local processes (each with its own ``SimArm`` and its own copy of the
policy, loaded from the run's checkpoint folder) or, when a ROS node is given, one of the
``sim_bridge`` workers whose ``run_episode`` action server is on the domain (found when the runner
is created and before every batch, so workers started later with ``ros2 run coda_engine sim_bridge``
join the next batch). Each goal names the policy version's model hash and this runner's ``get_checkpoint``
service (:class:`coda_engine.ros.checkpoints.CheckpointServer`), so a worker or an arm on another machine that
lacks the version fetches it once and caches it; one that sees the run's checkpoint folder (``checkpoint_root``)
uses it directly. Real arms (the fleet of ``coda run --arms``, each an ``arm_bridge``)
get the number of jobs the loop gives them, one at a time; an arm that refuses (sim-first gate), aborts
(safety, dropped out) or stops answering leaves the batch, its unfinished episode is kept and the job runs
again on simulation workers. Interventions the arms announce on ``safety_events`` are collected for memory.
Results come back in the order of the jobs.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from coda_engine.checkpoint_share import model_sha256
from coda_engine.episodes import STATUS_COMPLETED, RecordedEpisode, RecordingConfig, run_recorded_episode
from coda_engine.policies import DEMONSTRATORS
from coda_engine.processes import die_with_parent
from coda_engine.sim.scene import Scene
from coda_loop.fleet import ArmSpec

ACTION_TYPE = "coda_msgs/action/RunEpisode"
STATUS_NAMES = {0: "COMPLETED", 1: "ABORTED", 2: "REJECTED"}

_ARM: Any = None
SAMPLE_EVERY = 2
"""Trajectory sample period (control steps) of every episode the loop runs, on local processes and remote workers
alike: the critic's diagnoses read these samples, so both must record the same ones."""


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
    act = resolve(version, scene, Path(checkpoint_root), _ARM.config.control_hz)
    return run_recorded_episode(_ARM, scene, act, episode_id=episode_id, policy_version=version, robot_id=robot_id,
                                config=RecordingConfig(keyframes=keyframes, keyframe_size=keyframe_size,
                                                          sample_every=SAMPLE_EVERY))


def run_corrective_local(scene: Scene, version: str, checkpoint_root: str, takeover: int, relabel: int,
                         realign_push: bool = False) -> Any:
    """Run one corrective demonstration in this process (``coda_policy.corrective.run_corrective``)."""
    global _ARM
    from coda_engine.policies import resolve
    from coda_engine.sim.arm import SimArm
    from coda_policy.corrective import run_corrective

    if _ARM is None:
        _ARM = SimArm()
    act = resolve(version, scene, Path(checkpoint_root), _ARM.config.control_hz)
    return run_corrective(_ARM, scene, act, takeover, relabel, realign_push=realign_push)


class EpisodeRunner:
    """Runs batches of episodes on local processes, remote ``sim_bridge`` workers and real arms (module docstring)."""

    def __init__(self, workers: int, checkpoint_root: Path, node: Any | None = None,
                 remote_timeout: float = 300.0, arms: Sequence[ArmSpec] = ()) -> None:
        """Start ``workers`` local processes; with ``node`` (an rclpy node) also use remote workers and ``arms``."""
        self.checkpoint_root = Path(checkpoint_root).resolve()
        self.workers = workers
        self.remote_timeout = remote_timeout
        self.arms = {arm.ns: arm for arm in arms}
        if self.arms and node is None:
            raise ValueError("real arms need ROS: the runner has no node (drop --no-ros)")
        self.pool = (ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_worker) if workers > 0 else None)
        self.client: Any = None
        self.remote_used: dict[str, int] = {}
        self.rejected: dict[str, str] = {}
        """Remote workers dropped for a malformed result, with the reason."""
        self.unfinished: list[RecordedEpisode] = []
        """Real-arm episodes of the last batch that ended ABORTED or REJECTED (their jobs ran again elsewhere)."""
        self.arm_notes: dict[str, str] = {}
        """Why each arm left the last batch early (dropped out, gate, ...)."""
        self.safety_events: dict[str, dict[str, Any]] = {}
        """Interventions announced on the arms' ``safety_events`` topics, by id (collected while batches run)."""
        self._event_subs: dict[str, Any] = {}
        self.checkpoint_server: Any = None
        """Serves this run's versions on ``<node FQN>/get_checkpoint`` to workers, arms and live policy nodes on
        other machines, from a thread of its own for the whole run (with a node only)."""
        self._model_sha256: dict[str, str] = {}
        self.node: Any = None
        """The node the runner's clients live on (goals, services, safety events), ``<node name>_work`` next to the
        given one, spun only while the runner waits. The given node is the loop's name in the graph: its owner
        keeps it spun all the time, so its parameters and liveness answer while the loop trains."""
        if node is not None:
            import rclpy

            from coda_engine.ros.checkpoints import BackgroundCheckpointServer

            # Without the process's global ROS arguments: `ros2 launch` starts the owner with `-r __node:=<name>`,
            # which would give this node the owner's name too.
            self.node = rclpy.create_node(f"{node.get_name()}_work", namespace=node.get_namespace(),
                                          context=node.context, use_global_arguments=False)
            self.checkpoint_server = BackgroundCheckpointServer(node, self.checkpoint_root)

    def close(self) -> None:
        """Stop the local processes and the checkpoint service."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        if self.checkpoint_server is not None:
            self.checkpoint_server.close()
            self.checkpoint_server = None
        if self.client is not None:
            self.client.executor.shutdown(timeout_sec=1.0)
            self.client = None
        if self.node is not None:
            self.node.destroy_node()
            self.node = None

    def _servers(self) -> list[str]:
        from rclpy.action import get_action_names_and_types

        names = [name for name, types in get_action_names_and_types(self.node) if ACTION_TYPE in types]
        return sorted(name.rsplit("/run_episode", 1)[0].strip("/") for name in names if name.endswith("/run_episode"))

    def remote_workers(self) -> list[str]:
        """Namespaces of the simulation ``run_episode`` servers now on the domain.

        Servers of the fleet's arms and of any node named ``arm_bridge`` are never simulation workers.
        """
        if self.node is None:
            return []
        real = {ns.strip("/") for name, ns in self.node.get_node_names_and_namespaces() if name == "arm_bridge"}
        return [ns for ns in self._servers() if ns not in real and ns not in self.arms]

    def available_arms(self) -> list[str]:
        """Namespaces of the fleet's arms whose ``arm_bridge`` is on the domain now."""
        if not self.arms:
            return []
        present = set(self._servers())
        return [ns for ns in self.arms if ns in present]

    def engine_client(self) -> Any:
        """Return the client of the ROS interfaces (``coda_engine.ros.clients.EngineClient``) on the runner's node.

        Its executor spins that node for every wait of the run, episodes and service calls alike (needs a node).
        """
        if self.node is None:
            raise RuntimeError("the episode runner has no ROS node (a run with --no-ros)")
        self._ensure_client()
        return self.client

    def _ensure_client(self) -> None:
        if self.client is None:
            from coda_engine.ros.clients import EngineClient

            self.client = EngineClient(self.node)
        for ns in self.arms:
            if ns not in self._event_subs:
                from coda_engine.ros.arm_bridge_node import EVENT_QOS
                from coda_msgs.msg import SafetyEvent

                self._event_subs[ns] = self.node.create_subscription(
                    SafetyEvent, f"/{ns}/safety_events", self._on_safety_event, EVENT_QOS)

    def _on_safety_event(self, msg: Any) -> None:
        from coda_engine.ros.convert import msg_to_dict

        event = msg_to_dict(msg)
        stamp = event["header"]["stamp"]
        key = f"{msg.robot_id}-{stamp['sec']}.{stamp['nanosec']:09d}-{msg.kind}"
        self.safety_events.setdefault(key, {**event, "intervention_id": key})

    def collect_events(self, seconds: float = 0.3) -> None:
        """Spin a little to receive interventions announced after the last batch."""
        if self.arms and self.node is not None:
            self._ensure_client()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                self.client.executor.spin_once(timeout_sec=0.05)

    def run(self, jobs: list[tuple[Scene, str]], version: str,
            real: Mapping[str, int] | None = None) -> list[RecordedEpisode]:
        """Run ``version`` on every (scene, episode id) job; return the episodes in job order.

        ``real`` maps an arm's namespace to how many of the jobs it runs (taken from the front of the list);
        an arm that refuses, aborts or drops out leaves the batch and its jobs run on simulation workers, with a
        new episode id (``-retryN``); its unfinished episodes are kept in :attr:`unfinished`.
        """
        self.unfinished, self.arm_notes = [], {}
        remote = self.remote_workers()
        arms = [ns for ns in self.available_arms() if (real or {}).get(ns, 0) > 0]
        for ns in (real or {}):
            if ns in self.arms and ns not in arms and (real or {}).get(ns, 0) > 0:
                self.arm_notes[ns] = "arm_bridge not on the ROS domain"
        if self.pool is None and not remote:
            raise RuntimeError("no simulation worker: workers=0 and no sim_bridge run_episode server on the ROS "
                               "domain (start one with `ros2 run coda_engine sim_bridge` or use --workers >= 1)")
        results: list[RecordedEpisode | None] = [None] * len(jobs)
        ids = [episode_id for _, episode_id in jobs]
        retries = [0] * len(jobs)
        queue = list(range(len(jobs)))
        reserved: dict[str, list[int]] = {}
        for ns in arms:
            reserved[ns] = queue[:real[ns]]  # type: ignore[index]
            queue = queue[len(reserved[ns]):]
        local: dict[int, Future] = {}
        busy: dict[str, tuple[int, Any, float]] = {}
        if remote or arms:
            self._ensure_client()

        def reschedule(i: int) -> None:
            retries[i] += 1
            ids[i] = f"{jobs[i][1]}-retry{retries[i]}"
            queue.append(i)

        def leave(ns: str, why: str) -> None:
            self.arm_notes[ns] = why
            queue.extend(reserved.pop(ns, []))

        while queue or local or busy or any(reserved.values()):
            while self.pool is not None and queue and len(local) < 2 * self.workers:
                i = queue.pop(0)
                local[i] = self.pool.submit(run_local, jobs[i][0], version, str(self.checkpoint_root), ids[i],
                                            f"local_{i % self.workers}")
            for ns in remote:
                if ns not in busy and queue:
                    i = queue.pop()
                    busy[ns] = (i, self._send(ns, jobs[i][0], version, ids[i]), time.monotonic())
            for ns in list(reserved):
                if ns not in busy and reserved[ns]:
                    i = reserved[ns].pop(0)
                    busy[ns] = (i, self._send(ns, jobs[i][0], version, ids[i]), time.monotonic())
            for i, future in list(local.items()):
                if future.done():
                    results[i] = future.result()
                    del local[i]
            for ns, (i, handle, started) in list(busy.items()):
                is_arm = ns in self.arms
                done, episode = self._poll(ns, handle, jobs[i], keep_unfinished=is_arm)
                timeout = self.arms[ns].episode_timeout_s if is_arm else self.remote_timeout
                if done:
                    del busy[ns]
                    if episode is not None and episode.status == STATUS_COMPLETED:
                        results[i] = episode
                        self.remote_used[ns] = self.remote_used.get(ns, 0) + 1
                        continue
                    if episode is not None:  # a real arm's ABORTED or REJECTED episode: kept, the job runs again
                        self.unfinished.append(episode)
                    why = (f"episode {ids[i]} {STATUS_NAMES.get(episode.status, '?')}: {episode.status_detail}"
                           if episode is not None else self.rejected.get(ns, "refused the goal or vanished"))
                    if is_arm:
                        reschedule(i)
                        leave(ns, why)
                    else:
                        queue.append(i)
                        remote = [r for r in remote if r != ns]
                elif time.monotonic() - started > timeout:
                    del busy[ns]
                    if is_arm:
                        reschedule(i)
                        leave(ns, f"episode {ids[i]} still running after {timeout:g} s")
                    else:
                        queue.append(i)
                        remote = [r for r in remote if r != ns]
            if self.pool is None and not remote and (queue or local):
                raise RuntimeError("every remote sim_bridge worker dropped out and there are no local workers")
            if self.client is not None and busy:
                self.client.executor.spin_once(timeout_sec=0.01)
            else:
                time.sleep(0.01)
        self.collect_events()
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
        if version not in self._model_sha256:
            known = "" if version in DEMONSTRATORS else model_sha256(self.checkpoint_root / version)
            self._model_sha256[version] = known
        goal = RunEpisode.Goal(scene=dict_to_msg(SceneSpec, scene.to_dict()), policy_version=version,
                               record_keyframes=True, episode_id=episode_id,
                               policy_sha256=self._model_sha256[version],
                               checkpoint_service=self.checkpoint_server.name, sample_every=SAMPLE_EVERY)
        return {"sent": client.send_goal_async(goal), "result": None}

    def _poll(self, ns: str, handle: dict[str, Any], job: tuple[Scene, str],
              keep_unfinished: bool = False) -> tuple[bool, RecordedEpisode | None]:
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
        if not response.accepted or response.result.status != STATUS_COMPLETED:
            return True, (unfinished_from_message(response.result, job[0], ns) if keep_unfinished else None)
        try:
            return True, episode_from_message(response.result, job[0], ns)
        except ValueError as error:  # a malformed result (CriticInputError): drop the worker, run the job elsewhere
            self.rejected[ns] = str(error)
            return True, None


def unfinished_from_message(result: Any, scene: Scene, robot_id: str) -> RecordedEpisode:
    """Turn a real arm's ABORTED or REJECTED ``EpisodeResult`` into an episode to store (the critic skips it)."""
    from coda_engine.ros.images import msg_to_image

    return RecordedEpisode(
        episode_id=result.episode_id, scene=scene, policy_version=result.policy_version,
        robot_id=result.robot_id or robot_id, success=False, steps=int(result.length),
        stage_reached=int(result.stage_reached), num_stages=int(result.num_stages),
        control_rate_hz=float(result.control_rate_hz),
        keyframes=[msg_to_image(m) for m in result.keyframes], keyframe_steps=[int(s) for s in result.keyframe_steps],
        status=int(result.status), status_detail=result.status_detail, source=int(result.source))


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
