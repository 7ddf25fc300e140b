# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda bench control --arm fake``: command latency through the ``arm_bridge`` to a ros2_control arm.

Starts ``fake_ros2_control_arm`` and ``arm_bridge`` (robot file ``config/robots/panda_fake.yaml``) as their own
processes in the namespace ``bench_arm``, and a bare rclpy relay (ArmCommand in, JointTrajectory out: no gate, no
kinematics, no safety) as the reference. This process plays the policy: it publishes ``arm_command`` (displacements
of a few millimetres around the home pose) one at a time and times the ``JointTrajectory`` that reaches the
controller topic (it subscribes to it like the arm does). Bridge and relay alternate command by command, so both
see the same machine load.

- ``command_latency_us_p50`` / ``_p99``: ArmCommand published -> its JointTrajectory received, through the bridge
  (sim-first gate, forward kinematics, IK, safety checks, both transports)
- ``relay_latency_us_p50`` / ``_p99``: the same path through the bare relay
- ``commands``, ``lost`` (no trajectory within 0.5 s), ``interventions`` (safety events during the run; 0 expected)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

NAMESPACE = "bench_arm"
RELAY_IN, RELAY_OUT = "bench_relay/arm_command", "bench_relay/joint_trajectory"
TIMEOUT_S = 0.5


def _robot_file() -> Path:
    from ament_index_python.packages import get_package_share_directory

    return Path(get_package_share_directory("coda_engine")) / "config" / "robots" / "panda_fake.yaml"


def relay_main() -> int:
    """Run the reference: turn every ArmCommand into a JointTrajectory without any checks or kinematics."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from coda_engine.ros.spin import shutdown_context
    from coda_msgs.msg import ArmCommand

    stop = threading.Event()
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    node = rclpy.create_node("coda_bench_arm_relay")
    publisher = node.create_publisher(JointTrajectory, RELAY_OUT, 10)

    def relay(msg: ArmCommand) -> None:
        out = JointTrajectory()
        out.joint_names = [f"joint{i}" for i in range(7)]
        out.points = [JointTrajectoryPoint(positions=[msg.delta.x, msg.delta.y, msg.delta.z, 0.0, 0.0, 0.0, 0.0])]
        publisher.publish(out)

    node.create_subscription(ArmCommand, RELAY_IN, relay, 10)
    try:
        while not stop.is_set() and rclpy.ok():
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        node.destroy_node()
        shutdown_context()
    return 0


def _percentiles(samples_ns: list[int]) -> tuple[float, float]:
    import numpy as np

    if not samples_ns:
        return float("nan"), float("nan")
    values = np.asarray(samples_ns, dtype=np.float64) / 1000.0
    return round(float(np.percentile(values, 50)), 1), round(float(np.percentile(values, 99)), 1)


def measure(commands: int, rate_hz: float, startup_timeout: float) -> dict[str, Any]:
    """Start the arm, the bridge and the relay; time ``commands`` commands through each; return the figures."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory

    from coda_msgs.msg import ArmCommand, SafetyEvent

    work = Path(tempfile.mkdtemp(prefix="coda-bench-arm-"))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    ns = ["--ros-args", "-r", f"__ns:=/{NAMESPACE}"]
    cmds = {
        "fake_arm": [sys.executable, "-m", "coda_engine.ros.fake_arm_node", *ns],
        "arm_bridge": [sys.executable, "-m", "coda_engine.ros.arm_bridge_node", *ns, "-p",
                       f"robot_config:={_robot_file()}"],
        "relay": [sys.executable, "-m", "coda_engine.ros.bench_arm", "--relay"],
    }
    procs: dict[str, subprocess.Popen] = {}
    rclpy.init()
    node = rclpy.create_node("coda_bench_arm_probe")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    arrivals: dict[str, list[int]] = {"bridge": [], "relay": []}
    joint_states: list[int] = []
    events: list[str] = []
    node.create_subscription(JointTrajectory, f"/{NAMESPACE}/joint_trajectory_controller/joint_trajectory",
                             lambda _: arrivals["bridge"].append(time.perf_counter_ns()), 10)
    node.create_subscription(JointTrajectory, RELAY_OUT, lambda _: arrivals["relay"].append(time.perf_counter_ns()), 10)
    node.create_subscription(JointState, f"/{NAMESPACE}/joint_states", lambda _: joint_states.append(1), 10)
    node.create_subscription(SafetyEvent, f"/{NAMESPACE}/safety_events", lambda m: events.append(m.kind),
                             QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                                        durability=DurabilityPolicy.TRANSIENT_LOCAL))
    to_bridge = node.create_publisher(ArmCommand, f"/{NAMESPACE}/arm_command", 10)
    to_relay = node.create_publisher(ArmCommand, RELAY_IN, 10)

    def spin_for(seconds: float, done: Any = None) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if done is not None and done():
                return True
            executor.spin_once(timeout_sec=0.005)
        return done() if done is not None else True

    def one(publisher: Any, key: str, k: int) -> int | None:
        msg = ArmCommand(policy_version="expert", gripper=1.0)  # open
        msg.delta.x = 0.004 if k % 2 == 0 else -0.004
        msg.header.stamp = node.get_clock().now().to_msg()
        seen = len(arrivals[key])
        sent = time.perf_counter_ns()
        publisher.publish(msg)
        if not spin_for(TIMEOUT_S, lambda: len(arrivals[key]) > seen):
            return None
        return arrivals[key][seen] - sent

    try:
        for name, cmd in cmds.items():
            with (work / f"{name}.log").open("w") as out:
                procs[name] = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        ready = spin_for(startup_timeout, lambda: len(joint_states) > 20 and to_bridge.get_subscription_count() > 0
                         and to_relay.get_subscription_count() > 0 and node.count_publishers(RELAY_OUT) > 0)
        if not ready:
            logs = {n: (work / f"{n}.log").read_text()[-1500:] for n in cmds}
            raise RuntimeError(f"the stand-in arm, bridge or relay did not come up within {startup_timeout:g} s: "
                               f"{logs}")
        for k in range(20):  # warm-up: the bridge's first command sets its reference pose
            one(to_bridge, "bridge", k)
            one(to_relay, "relay", k)
        bridge, relay, lost = [], [], 0
        period = 1.0 / rate_hz
        for k in range(commands):
            start = time.monotonic()
            for publisher, key, out in ((to_bridge, "bridge", bridge), (to_relay, "relay", relay)):
                latency = one(publisher, key, k)
                if latency is None:
                    lost += 1
                else:
                    out.append(latency)
            spin_for(max(period - (time.monotonic() - start), 0.0))
        spin_for(0.3)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        shutil.rmtree(work, ignore_errors=True)
    b50, b99 = _percentiles(bridge)
    r50, r99 = _percentiles(relay)
    return {"command_latency_us_p50": b50, "command_latency_us_p99": b99, "relay_latency_us_p50": r50,
            "relay_latency_us_p99": r99, "commands": len(bridge), "lost": lost, "interventions": len(events),
            "intervention_kinds": sorted(set(events)), "rate_hz": rate_hz}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``coda bench control --arm fake``)."""
    parser = argparse.ArgumentParser(prog="coda bench control --arm fake", description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=500, help="commands timed through the bridge (and the relay)")
    parser.add_argument("--rate", type=float, default=10.0, help="command rate, Hz (the arm's control rate)")
    parser.add_argument("--startup-timeout", type=float, default=60.0, help="longest wait for the processes, s")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--relay", action="store_true", help=argparse.SUPPRESS)  # the reference process
    args = parser.parse_args(argv)
    if args.relay:
        return relay_main()
    if args.commands < 1 or not 0.5 <= args.rate <= 200:
        parser.error("--commands must be >= 1 and --rate in [0.5, 200] Hz")
    try:
        result = measure(args.commands, args.rate, args.startup_timeout)
    except RuntimeError as exc:
        sys.stderr.write(f"coda bench control --arm fake: error: {exc}\n")
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:26s} {value}")
    return 0 if result["commands"] else 1


if __name__ == "__main__":
    sys.exit(main())
