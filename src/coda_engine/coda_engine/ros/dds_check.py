# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Two-process check that every coda_msgs type crosses DDS intact.

One process publishes a fully populated sample of every concrete message type (messages,
service requests/responses, action goals/results/feedback) on its own topic; a second process
subscribes to all of them, compares each received message with the expected sample, and
acknowledges. Only rclpy and the built coda_msgs are used.

    python -m coda_engine.ros.dds_check            # runs both processes, prints a JSON report
    python -m coda_engine.ros.dds_check receive    # one side only (for use across machines)
    python -m coda_engine.ros.dds_check publish
    python -m coda_engine.ros.dds_check receive --ros-args -r __node:=checker   # ROS arguments go to rclpy

Arguments after ``--ros-args`` (what ``ros2 launch`` adds: node name remapping, parameter files) are handed to
``rclpy.init``; the other arguments are this command's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

TOPIC_PREFIX = "coda_check"


@dataclass
class CheckReport:
    """Outcome of one two-process exchange."""

    types_expected: int = 0  # number of message types published
    types_received: int = 0  # number received by the other process
    mismatched: list[str] = field(default_factory=list)  # types that arrived with different content
    missing: list[str] = field(default_factory=list)  # types that never arrived
    seconds: float = 0.0  # wall time of the exchange, discovery included
    domain_id: int = 0  # ROS_DOMAIN_ID used

    @property
    def ok(self) -> bool:
        """True when every type arrived intact."""
        return self.types_expected > 0 and not self.mismatched and not self.missing


def _topic(type_key: str) -> str:
    return f"{TOPIC_PREFIX}/" + type_key.replace("/", "_").lower()


def _qos():  # noqa: ANN202 - rclpy type imported lazily
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def publish(timeout: float, ros_args: list[str] | None = None) -> int:
    """Publish every sample (latched) until the receiver acknowledges; return an exit code.

    ``ros_args``: the process's command line with its ROS arguments (``--ros-args ...``), for ``rclpy.init``.
    """
    import rclpy
    from std_msgs.msg import String

    from coda_engine.ros.interface_samples import all_message_types, sample_message

    rclpy.init(args=ros_args)
    node = rclpy.create_node("coda_check_publisher")
    acked: list[str] = []
    node.create_subscription(String, f"{TOPIC_PREFIX}/ack", lambda m: acked.append(m.data), _qos())
    publishers = []
    for key, msg_type in all_message_types().items():
        pub = node.create_publisher(msg_type, _topic(key), _qos())
        pub.publish(sample_message(msg_type))
        publishers.append(pub)
    deadline = time.monotonic() + timeout
    while not acked and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.shutdown()
    return 0 if acked else 1


def receive(timeout: float, ros_args: list[str] | None = None) -> CheckReport:
    """Subscribe to every sample topic, compare what arrives, acknowledge, and report (``ros_args``: as publish)."""
    import rclpy
    from std_msgs.msg import String

    from coda_engine.ros.interface_samples import all_message_types, sample_message

    start = time.monotonic()
    rclpy.init(args=ros_args)
    node = rclpy.create_node("coda_check_receiver")
    types = all_message_types()
    received: dict[str, bool] = {}
    for key, msg_type in types.items():
        expected = sample_message(msg_type)

        def on_message(msg: object, key: str = key, expected: object = expected) -> None:
            received[key] = msg == expected

        node.create_subscription(msg_type, _topic(key), on_message, _qos())
    ack = node.create_publisher(String, f"{TOPIC_PREFIX}/ack", _qos())
    deadline = time.monotonic() + timeout
    while len(received) < len(types) and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    ack.publish(String(data="done"))
    # Give the acknowledgement time to reach the publisher before leaving the graph.
    end_ack = time.monotonic() + 0.5
    while time.monotonic() < end_ack:
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.shutdown()
    return CheckReport(
        types_expected=len(types),
        types_received=len(received),
        mismatched=sorted(k for k, ok in received.items() if not ok),
        missing=sorted(set(types) - set(received)),
        seconds=round(time.monotonic() - start, 3),
        domain_id=int(os.environ.get("ROS_DOMAIN_ID", "0")),
    )


def run_two_processes(timeout: float = 60.0, domain_id: int | None = None) -> CheckReport:
    """Start a publisher process and a receiver process on one ROS domain; return the report."""
    env = dict(os.environ)
    if domain_id is not None:
        env["ROS_DOMAIN_ID"] = str(domain_id)
    cmd = [sys.executable, "-m", "coda_engine.ros.dds_check"]
    receiver = subprocess.Popen(
        [*cmd, "receive", "--timeout", str(timeout)], env=env, stdout=subprocess.PIPE, text=True
    )
    publisher = subprocess.Popen([*cmd, "publish", "--timeout", str(timeout)], env=env, stdout=subprocess.DEVNULL)
    out, _ = receiver.communicate(timeout=timeout + 30)
    publisher.wait(timeout=timeout + 30)
    lines = out.strip().splitlines()
    if receiver.returncode not in (0, 1) or not lines:
        raise RuntimeError(f"dds_check receiver exited with {receiver.returncode} and printed no report")
    data = json.loads(lines[-1])
    return CheckReport(**data)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    from rclpy.utilities import remove_ros_args

    full = list(sys.argv if argv is None else [sys.argv[0], *argv])
    parser = argparse.ArgumentParser(prog="python -m coda_engine.ros.dds_check", description=__doc__.split("\n")[0])
    parser.add_argument("role", nargs="?", choices=["both", "publish", "receive"], default="both")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the other side")
    args = parser.parse_args(remove_ros_args(full)[1:])
    if args.role == "publish":
        return publish(args.timeout, full)
    report = receive(args.timeout, full) if args.role == "receive" else run_two_processes(args.timeout)
    print(json.dumps(asdict(report)), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
