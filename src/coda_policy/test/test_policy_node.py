# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The ``policy`` node as a real process over DDS: holds, commands, NaN/stale inputs, version swaps."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams
from coda_msgs.msg import ArmCommand, ObjectState, ObjectStates, PolicyVersion
from coda_policy.checkpoint import MODEL_FILE, save_checkpoint
from coda_policy.control import sha256_file
from coda_policy.sft import build_policy

pytestmark = pytest.mark.ros


def _object_states(arm: SimArm, stamp: Any) -> ObjectStates:
    msg = ObjectStates()
    msg.header.stamp = stamp
    for o in arm.object_states():
        s = ObjectState(name=o.name, shape=o.shape, role=o.role, color_name=o.color_name, visible=True)
        s.rgba.r, s.rgba.g, s.rgba.b, s.rgba.a = (float(c) for c in o.rgba)
        s.size.x, s.size.y, s.size.z = (float(c) for c in o.size)
        s.pose.position.x, s.pose.position.y, s.pose.position.z = (float(c) for c in o.position)
        msg.objects.append(s)
    return msg


def test_policy_node_commands_holds_and_swaps(tmp_path, rclpy_node, start_process, tiny_policy_config):
    import rclpy

    for seed, name in ((0, "v1"), (1, "v2")):
        save_checkpoint(tmp_path / name, build_policy(tiny_policy_config, seed).net.eval(), name)
    start_process([sys.executable, "-m", "coda_policy.ros.policy_node", "--ros-args",
                   "-p", "control_rate_hz:=20.0", "-p", "max_input_age_s:=0.4", "-p", "family:=reach",
                   "-p", f"checkpoint_root:={tmp_path}", "-p", "initial_version:=v1",
                   "-p", "busy_poll_s:=0.01"])  # polls 10 ms of each 50 ms period: that path is exercised too
    arm = SimArm()
    arm.reset(generate("reach", np.random.default_rng(0), SceneParams()))
    commands: list[ArmCommand] = []
    rclpy_node.create_subscription(ArmCommand, "arm_command", commands.append, 10)
    joints_pub = rclpy_node.create_publisher(JointState, "joint_states", 10)
    objects_pub = rclpy_node.create_publisher(ObjectStates, "object_states", 10)
    instr_pub = rclpy_node.create_publisher(String, "instruction", 10)
    version_pub = rclpy_node.create_publisher(PolicyVersion, "policy_version", 10)
    executor = rclpy.executors.SingleThreadedExecutor(context=rclpy_node.context)
    executor.add_node(rclpy_node)
    feed = {"joints": True, "nan": False}

    def publish_inputs() -> None:
        stamp = rclpy_node.get_clock().now().to_msg()
        if feed["joints"]:
            js = JointState(name=list(SimArm.joint_names), position=[float(q) for q in arm.joint_positions()])
            if feed["nan"]:
                js.position[0] = math.nan
            js.header.stamp = stamp
            joints_pub.publish(js)
        objects_pub.publish(_object_states(arm, stamp))

    def run_until(done: Callable[[ArmCommand], bool], timeout: float = 40.0) -> ArmCommand:
        end = time.monotonic() + timeout
        last_feed = 0.0
        while time.monotonic() < end:
            if time.monotonic() - last_feed > 0.05:
                publish_inputs()
                last_feed = time.monotonic()
            executor.spin_once(timeout_sec=0.02)
            while commands:
                cmd = commands.pop(0)
                if done(cmd):
                    return cmd
        raise AssertionError("no matching arm_command within the timeout")

    first = run_until(lambda c: True)
    assert first.hold and first.hold_reason
    instr_pub.publish(String(data="touch the red ball"))
    cmd = run_until(lambda c: not c.hold)
    assert cmd.policy_version == "v1"
    assert max(abs(cmd.delta.x), abs(cmd.delta.y), abs(cmd.delta.z)) <= 0.05 and -1.0 <= cmd.gripper <= 1.0
    feed["nan"] = True
    assert "non-finite" in run_until(lambda c: c.hold).hold_reason
    feed["nan"], feed["joints"] = False, False
    stale = run_until(lambda c: c.hold and "stale" in c.hold_reason)
    assert (stale.delta.x, stale.delta.y, stale.delta.z) == (0.0, 0.0, 0.0)
    feed["joints"] = True
    version_pub.publish(PolicyVersion(version_id="v2", checkpoint_uri=f"file://{tmp_path / 'v2'}",
                                      checkpoint_sha256="0" * 64))
    version_pub.publish(PolicyVersion(version_id="v2", checkpoint_uri="v2",
                                      checkpoint_sha256=sha256_file(tmp_path / "v2" / MODEL_FILE)))
    assert run_until(lambda c: c.policy_version == "v2" and not c.hold).policy_version == "v2"
    executor.remove_node(rclpy_node)


def test_policy_node_refuses_a_bad_robot_file(ros_domain: int, tmp_path) -> None:
    import subprocess

    robot = tmp_path / "robot.yaml"
    robot.write_text("robot_id: lab_arm\njoint_names: [a, b, c]\nfinger_joints: [f1, f2]\n")
    done = subprocess.run([sys.executable, "-m", "coda_policy.ros.policy_node", "--ros-args",
                           "-p", f"robot_config:={robot}"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert str(robot) in done.stderr and "joint_names" in done.stderr, done.stderr[-2000:]
