# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Policy versions over ROS (``coda_msgs/srv/GetCheckpoint``) for workers and arms on other machines.

:class:`CheckpointServer` serves ``<run>/checkpoints/<version>/``; in the loop it runs as a
:class:`BackgroundCheckpointServer`, on its own node and thread, so it answers at any time of the run, not only
while a batch of episodes waits. :class:`CheckpointFetcher` runs in ``sim_bridge``, ``arm_bridge`` and the live
``policy`` node: it finds a version on this machine or fetches it from the run's service, then checks and caches
it (:mod:`coda_engine.checkpoint_share` has the rules).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from coda_engine.checkpoint_share import CheckpointCache, CheckpointShareError, find_version, read_version
from coda_engine.policies import DEMONSTRATORS, PolicyNotAvailableError
from coda_engine.ros.spin import NodeThread, call_resending
from coda_msgs.msg import CheckpointFile
from coda_msgs.srv import GetCheckpoint

FETCH_TIMEOUT_S = 60.0
"""How long a worker waits for the service to appear and answer, s."""


def default_cache() -> Path:
    """Return ``$XDG_CACHE_HOME/coda/checkpoints`` (``~/.cache/coda/checkpoints`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coda" / "checkpoints"


class CheckpointServer:
    """Serves the versions of one run's checkpoint folder on ``<node's name>/get_checkpoint``."""

    def __init__(self, node: Node, checkpoint_root: Path, name: str = "") -> None:
        """Create the service ``name`` (default ``<node FQN>/get_checkpoint``; goals carry it) on ``node``."""
        self.node = node
        self.root = Path(checkpoint_root)
        self.name = name or f"{node.get_fully_qualified_name().rstrip('/')}/get_checkpoint"
        self.sent: dict[str, int] = {}
        """Versions sent, and how often."""
        self.service = node.create_service(GetCheckpoint, self.name, self.on_request)

    def on_request(self, request: GetCheckpoint.Request, response: GetCheckpoint.Response) -> GetCheckpoint.Response:
        """Send the version's files, or say why not (unknown version, other model hash, not a version id)."""
        try:
            digest, files = read_version(self.root, request.version, request.sha256)
        except CheckpointShareError as exc:
            response.success, response.error = False, str(exc)
            self.node.get_logger().warning(f"get_checkpoint refused: {exc}")
            return response
        response.success, response.sha256 = True, digest
        response.files = [CheckpointFile(name=name, data=data) for name, data in files.items()]
        self.sent[request.version] = self.sent.get(request.version, 0) + 1
        return response


class BackgroundCheckpointServer:
    """A :class:`CheckpointServer` on a node of its own, spun by a thread of its own.

    The service keeps the name it would have on ``owner`` (``<owner FQN>/get_checkpoint``), while ``owner`` itself is
    spun only when its user waits (the loop's runner spins its node during batches only).
    """

    def __init__(self, owner: Node, checkpoint_root: Path) -> None:
        """Start serving ``checkpoint_root`` under ``owner``'s name, in ``owner``'s context."""
        import rclpy

        # Without the process's global ROS arguments: `ros2 launch` starts the owner with `-r __node:=<name>`,
        # which would rename this node to the owner's name too (two nodes of one name in the graph).
        self.node = rclpy.create_node(f"{owner.get_name()}_checkpoint_server", namespace=owner.get_namespace(),
                                      context=owner.context, use_global_arguments=False)
        self.server = CheckpointServer(self.node, checkpoint_root,
                                       f"{owner.get_fully_qualified_name().rstrip('/')}/get_checkpoint")
        self.name = self.server.name
        self._spinner = NodeThread(self.node, "checkpoint_server")

    @property
    def sent(self) -> dict[str, int]:
        """Versions sent, and how often."""
        return self.server.sent

    def close(self) -> None:
        """Stop the thread and destroy the node."""
        self._spinner.close()


class CheckpointFetcher:
    """A worker's way to the folder of a goal's policy version (local, cached, or fetched once and cached)."""

    def __init__(self, node: Node, checkpoint_root: Path | None, cache: Path | None = None,
                 timeout: float = FETCH_TIMEOUT_S) -> None:
        """``checkpoint_root``: this machine's version folders (None: none); ``cache``: where fetched ones go."""
        self.node = node
        self.checkpoint_root = checkpoint_root
        self.cache = CheckpointCache(cache or default_cache())
        self.timeout = timeout
        self.group = ReentrantCallbackGroup()
        self.clients: dict[str, Any] = {}
        self.fetched: list[str] = []
        """``version@sha256[:16]`` of every version fetched, in order."""
        self._lock = threading.Lock()  # one fetch at a time: two goals for one version fetch it once

    @classmethod
    def from_parameters(cls, node: Node) -> CheckpointFetcher:
        """Declare a worker node's ``checkpoint_root`` and ``checkpoint_cache`` parameters; build the fetcher."""
        def declared(name: str, description: str) -> str:
            return str(node.declare_parameter(name, "", ParameterDescriptor(description=description)).value)

        root = declared("checkpoint_root", "folder holding policy version folders (empty = expert only)")
        cache = declared("checkpoint_cache", "where versions fetched from the run are kept "
                                             "(empty: ~/.cache/coda/checkpoints)")
        return cls(node, Path(root) if root else None, Path(cache) if cache else None)

    def root_for(self, version: str, sha256: str, service: str) -> Path | None:
        """Return the folder holding ``<version>/`` for ``policies.resolve`` (None for an expert or no version).

        Raises :class:`PolicyNotAvailableError` naming the version and why it is not here and could not be fetched.
        """
        if version in (*DEMONSTRATORS, ""):  # no checkpoint (resolve names an empty version)
            return None
        try:
            with self._lock:
                root, why = find_version(version, sha256, self.checkpoint_root, self.cache)
                if root is not None:
                    return root
                if not service:
                    raise CheckpointShareError(f"{why}, and the goal names no checkpoint_service to fetch it from")
                return self._fetch(version, sha256, service)
        except CheckpointShareError as exc:
            raise PolicyNotAvailableError(f"policy version {version!r}: {exc}") from None

    def _fetch(self, version: str, sha256: str, service: str) -> Path:
        client = self.clients.get(service)
        if client is None:
            client = self.node.create_client(GetCheckpoint, service, callback_group=self.group)
            self.clients[service] = client
        if not client.wait_for_service(timeout_sec=self.timeout):
            raise CheckpointShareError(f"checkpoint service {service} not available after {self.timeout:g} s")
        started = time.monotonic()

        def resent(attempt: int) -> None:
            self.node.get_logger().warning(f"{service}: no answer yet, request for {version} sent again "
                                           f"(copy {attempt + 1})")

        response = call_resending(client, GetCheckpoint.Request(version=version, sha256=sha256), self.timeout,
                                  on_resend=resent)  # the node's own executor spins it, on another thread
        if response is None:
            raise CheckpointShareError(f"{service} did not answer within {self.timeout:g} s")
        if not response.success:
            raise CheckpointShareError(f"{service} refused: {response.error}")
        files = {f.name: bytes(f.data) for f in response.files}
        root = self.cache.store(version, sha256 or response.sha256, files)
        self.fetched.append(f"{version}@{response.sha256[:16]}")
        self.node.get_logger().info(f"fetched policy version {version} ({sum(map(len, files.values()))} bytes) "
                                    f"from {service} in {time.monotonic() - started:.2f} s into {root}")
        return root
