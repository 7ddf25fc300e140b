# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda_loop`` node: the co-evolution loop as one process of a ``ros2 launch`` system.

It runs :class:`coda_loop.rounds.CoevolutionLoop` on the run folder of parameter ``run_dir``
(resuming it when it exists) and sends episodes to the ``sim_bridge`` workers on the domain (plus
``workers`` local processes, none by default). Scene generation, diagnosis and training run inside
this process; the ``memory`` node started next to it announces every write. Parameters: see
config/loop.yaml. The node exits when the last round has finished.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import rclpy
from rclpy.node import Node

from coda_loop.config import LoopConfig
from coda_loop.ros.graph import DISCOVERY_WAIT_S, refuse_second_loop
from coda_loop.rounds import CoevolutionLoop


class LoopNode(Node):
    """Holds the loop's parameters; the loop runs in :func:`main` with this node for the ROS workers."""

    def __init__(self) -> None:
        """Declare the parameters."""
        super().__init__("coda_loop")
        self.run_dir = Path(str(self.declare_parameter("run_dir", "runs/ros").value))
        self.fields = {
            "method": str(self.declare_parameter("method", "coda").value),
            "rounds": int(self.declare_parameter("rounds", 3).value),
            "budget": int(self.declare_parameter("budget", 32).value),
            "workers": int(self.declare_parameter("workers", 0).value),
            "seed": int(self.declare_parameter("seed", 0).value),
            "progress": False,
        }
        self.config_file = str(self.declare_parameter("config_file", "").value)
        self.wait_for_workers = float(self.declare_parameter("wait_for_workers_s", 30.0).value)
        self.discovery_wait = float(self.declare_parameter("discovery_wait_s", DISCOVERY_WAIT_S).value)

    def config(self) -> LoopConfig | None:
        """Return the config of a new run; None when ``run_dir`` holds a run (resumed with its own settings).

        With ``config_file`` the file's fields are used and the other parameters only fill in what it leaves out.
        """
        if (self.run_dir / "config.json").is_file():
            return None
        if self.config_file:
            import yaml

            text = Path(self.config_file).read_text() if Path(self.config_file).is_file() else ""
            given = yaml.safe_load(text) if text else None
            if not isinstance(given, dict):
                raise ValueError(f"config_file={self.config_file!r} is not a YAML/JSON mapping of LoopConfig fields")
            return LoopConfig.from_dict({**self.fields, **given})
        return LoopConfig(**self.fields)


def main(args: list[str] | None = None) -> None:
    """Run the loop to its end."""
    rclpy.init(args=args)
    node = LoopNode()
    try:
        if node.discovery_wait > 0:
            refuse_second_loop(node, node.discovery_wait)
        loop = CoevolutionLoop(node.run_dir, node.config(), node=node,
                               on_event=lambda r, step, out: node.get_logger().info(
                                   f"round {r} {step}: " + ("started" if out is None else json.dumps(out)[:300])))
    except (ValueError, RuntimeError) as error:
        node.get_logger().error(str(error))
        node.destroy_node()
        rclpy.try_shutdown()
        sys.exit(2)
    try:
        if loop.config.workers == 0:
            import time

            end = time.monotonic() + node.wait_for_workers
            while not loop.runner.remote_workers() and time.monotonic() < end:
                rclpy.spin_once(node, timeout_sec=0.5)
        summary = loop.run()
        node.get_logger().info(f"finished: {json.dumps(summary)}")
    except KeyboardInterrupt:
        pass
    finally:
        loop.close()
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
