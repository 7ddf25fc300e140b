# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Blocking clients of the engine's ROS 2 interfaces (GenerateScenes, RunEpisode), for scripts and tools."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from rclpy.action import ActionClient
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from coda_engine.ros.spin import call_resending
from coda_msgs.action import RunEpisode
from coda_msgs.msg import SceneSpec
from coda_msgs.srv import GenerateScenes


class EngineClientError(RuntimeError):
    """A call that failed or timed out; the message says which and why."""


class EngineClient:
    """Calls a scene_generator and sim_bridge workers from one node."""

    def __init__(self, node: Node, generator_service: str = "generate_scenes") -> None:
        """Create the clients on ``node`` (which this object spins while it waits)."""
        self.node = node
        self.executor = SingleThreadedExecutor(context=node.context)
        self.executor.add_node(node)
        self.generate_client = node.create_client(GenerateScenes, generator_service)
        self.generate_clients = {generator_service: self.generate_client}
        self.episode_clients: dict[str, ActionClient] = {}

    def wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Spin until ``done()``; raise EngineClientError naming ``what`` after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        while not done():
            if time.monotonic() > end:
                raise EngineClientError(f"timed out after {timeout:g} s waiting for {what}")
            self.executor.spin_once(timeout_sec=0.05)

    def call(self, client: Any, request: Any, timeout: float, what: str) -> Any:
        """Call the service of ``client`` (created on this object's node) and return its response.

        Waits up to 30 s for the service to appear and ``timeout`` s for the answer, sending the request again
        while none comes (:func:`~coda_engine.ros.spin.call_resending`: the services called here may serve a
        request twice); EngineClientError names ``what`` when either runs out.
        """
        self.wait(client.service_is_ready, 30.0, f"the {what} service ({client.srv_name})")

        def resent(attempt: int) -> None:
            self.node.get_logger().warning(f"{what} ({client.srv_name}): no answer yet, request sent again "
                                           f"(copy {attempt + 1})")

        response = call_resending(client, request, timeout, lambda s: self.executor.spin_once(timeout_sec=s),
                                  on_resend=resent)
        if response is None:
            raise EngineClientError(f"timed out after {timeout:g} s waiting for {what} ({client.srv_name})")
        return response

    def generate(
        self,
        family: str,
        count: int,
        seed: int,
        split: str = "id",
        params_json: str = "{}",
        round_index: int = 0,
        timeout: float = 120.0,
        seeds: Sequence[int] = (),
        service: str = "",
    ) -> list[SceneSpec]:
        """Call GenerateScenes and return its scenes.

        ``seeds``: one scene per seed (count and seed unused). ``service``: another generator's GenerateScenes
        (empty: the one this client was made for). EngineClientError carries the node's error.
        """
        client = self.generate_client
        if service:
            if service not in self.generate_clients:
                self.generate_clients[service] = self.node.create_client(GenerateScenes, service)
            client = self.generate_clients[service]
        request = GenerateScenes.Request(
            family=family, split=split, params_json=params_json, count=count, seed=seed, round=round_index,
            seeds=[int(s) for s in seeds],
        )
        response = self.call(client, request, timeout, "generate_scenes")
        if not response.success:
            raise EngineClientError(f"{client.srv_name} failed: {response.error}")
        return list(response.scenes)

    def run_episode(
        self,
        worker_ns: str,
        scene: SceneSpec,
        policy_version: str,
        record_keyframes: bool = True,
        timeout: float = 300.0,
    ) -> Any:
        """Send a RunEpisode goal to ``/<worker_ns>/run_episode`` and return its Result."""
        client = self.episode_clients.get(worker_ns)
        if client is None:
            client = ActionClient(self.node, RunEpisode, f"/{worker_ns.strip('/')}/run_episode")
            self.episode_clients[worker_ns] = client
        self.wait(client.server_is_ready, 30.0, f"the {worker_ns} run_episode server")
        goal = RunEpisode.Goal(scene=scene, policy_version=policy_version, record_keyframes=record_keyframes)
        sent = client.send_goal_async(goal)
        self.wait(sent.done, 30.0, f"{worker_ns} to accept the goal")
        result = sent.result().get_result_async()
        self.wait(result.done, timeout, f"the episode on {worker_ns}")
        return result.result().result
