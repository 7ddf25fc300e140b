# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""A live chain across packages, each node its own process over DDS: policy -> arm_bridge -> stand-in arm.

The ``policy`` node (coda_policy) reads the arm's robot file like the bridge does and commands the stand-in
(``fake_ros2_control_arm``) through the bridge's ``arm_command``: the sim-first gate, IK and the safety layer sit
between them. The policy network is a real checkpoint whose action head is set to a known constant, so the motion
the arm must make is known: a steady +y displacement with the gripper closing.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.ros

NS = "panda_live_0"
STEP_M = 0.01
"""The policy node's ``max_delta_m``: each command moves the tool point this far along +y."""
WAIT_S = 60.0
"""Deadline of a condition wait: only reached when what is awaited never comes (a generous bound, not a rate)."""


def constant_policy(folder: Path, action: list[float]) -> None:
    """Save a checkpoint whose tanh action mean is ``action`` for every observation, and its simulation evaluation."""
    import torch

    from coda_policy.checkpoint import save_checkpoint
    from coda_policy.config import PolicyConfig
    from coda_policy.sft import build_policy

    net = build_policy(PolicyConfig(d_model=32, num_heads=2, hidden_dim=64), 0).net.eval()
    head = net.actor[-1]
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.atanh(torch.tensor(action, dtype=torch.float32)))
    save_checkpoint(folder, net, folder.name)
    # the loop's evaluate step writes this file; the robot file below lets only versions at >= 50 % drive
    (folder / "evaluation.json").write_text(json.dumps({"version": folder.name, "per_split": {"id": 0.9}}))


def test_policy_node_drives_the_stand_in_through_the_bridge(tmp_path: Path, stand_in_robot: Any, start_process: Any,
                                                            rclpy_node: Any) -> None:
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from coda_engine.ros.spin import spin_until
    from coda_msgs.msg import ArmCommand, SafetyEvent
    from coda_policy.control import PandaKinematics

    # the state watchdog is tested in test_arm_bridge; here a stall of the stand-in's joint stream (it shares two
    # cores with three other processes) must not pre-empt the policy watchdog this test is about
    robot_path = stand_in_robot(top={"robot_id": NS, "gate": {"min_sim_success": 0.5, "allow_expert": False}},
                                state_timeout_s=3.0)
    root = tmp_path / "checkpoints"
    # policy convention: dx, dy, dz in units of max delta, gripper +1 closes
    constant_policy(root / "v-const", [0.0, 0.9, 0.0, 0.9])

    python = sys.executable
    start_process([python, "-m", "coda_engine.ros.fake_arm_node", "--ros-args", "-r", f"__ns:=/{NS}"])
    start_process([python, "-m", "coda_engine.ros.arm_bridge_node", "--ros-args", "-r", f"__ns:=/{NS}",
                   "-p", f"robot_config:={robot_path}", "-p", f"checkpoint_root:={root}"])
    policy = start_process([python, "-m", "coda_policy.ros.policy_node", "--ros-args", "-r", f"__ns:=/{NS}",
                            "-p", f"robot_config:={robot_path}", "-p", f"checkpoint_root:={root}",
                            "-p", "initial_version:=v-const", "-p", f"max_delta_m:={STEP_M}"])

    kinematics = PandaKinematics()
    state: dict[str, Any] = {}
    commands: list[ArmCommand] = []
    events: list[SafetyEvent] = []

    def on_joints(msg: JointState) -> None:
        state["tcp"], state["opening"] = kinematics.forward(msg.name, msg.position)
        state["q"], state["speed"] = np.array(msg.position[:7]), float(np.max(np.abs(msg.velocity[:7])))
        state["count"] = state.get("count", 0) + 1

    def live() -> list[ArmCommand]:
        return [c for c in commands if not c.hold]

    rclpy_node.create_subscription(JointState, f"/{NS}/joint_states", on_joints, 10)
    rclpy_node.create_subscription(ArmCommand, f"/{NS}/arm_command", commands.append, 50)
    rclpy_node.create_subscription(SafetyEvent, f"/{NS}/safety_events", events.append,
                                   QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                                              durability=DurabilityPolicy.TRANSIENT_LOCAL))
    instruction = rclpy_node.create_publisher(String, f"/{NS}/instruction", 10)

    def moving() -> bool:
        return any(not c.hold for c in commands)

    # the node holds until it has a version, an instruction (MiniLM loads on first use) and fresh inputs
    assert spin_until(rclpy_node, lambda: "tcp" in state and instruction.get_subscription_count() > 0, 30.0)
    for _ in range(120):
        instruction.publish(String(data="touch the red cube"))
        if spin_until(rclpy_node, moving, 1.0):
            break
    assert moving(), f"the policy node only held: {[c.hold_reason for c in commands[-3:]]}"
    first = next(c for c in commands if not c.hold)
    assert first.policy_version == "v-const" and first.gripper < 0  # on the wire: < 0 closes
    assert first.delta.y == pytest.approx(STEP_M, rel=1e-3) and first.delta.x == first.delta.z == 0.0
    assert state["opening"] > 0.07, "the stand-in starts with the gripper open"

    # the chain moves the arm the way the policy says: +y at STEP_M per command, x and z held, gripper closing.
    # Counted per command, not per second of wall clock: 15 live commands, whose observation stamps are 1/10 s apart
    # (the node's 10 Hz, by the stand-in's clock; a node at 5 Hz gives 0.2 s), then the arm covers at least half of
    # their 15 steps (a condition: a chain that loses commands never gets there) and at most 1.5 times what was sent.
    start, sent_before = state["tcp"].copy(), len(live())
    assert spin_until(rclpy_node, lambda: len(live()) >= sent_before + 15, WAIT_S), "the live commands stopped"
    stamps = [c.header.stamp.sec + 1e-9 * c.header.stamp.nanosec for c in live()[sent_before:sent_before + 15]]
    spacing = float(np.median(np.diff(stamps)))
    assert 0.09 <= spacing <= 0.11, f"live commands {spacing:.3f} s apart by their stamps (10 Hz: 0.1 s)"
    assert spin_until(rclpy_node, lambda: state["tcp"][1] - start[1] > 0.5 * 15 * STEP_M, WAIT_S), (
        f"moved {state['tcp'] - start} after 15 commands of {STEP_M} m along +y")
    moved, sent = state["tcp"] - start, len(live()) - sent_before
    assert moved[1] < 1.5 * sent * STEP_M + 0.02, f"moved {moved}, {sent} commands"
    assert math.hypot(moved[0], moved[2]) < 0.02, f"x/z drifted: {moved}"
    assert state["opening"] < 0.02, f"the gripper did not close: opening {state['opening']:.3f} m"
    assert events == [], [(e.kind, e.detail) for e in events]

    # the policy dies: the bridge's watchdog holds the arm and reports it once
    policy.kill()
    assert spin_until(rclpy_node, lambda: any(e.kind == "watchdog" for e in events), WAIT_S), "no watchdog event"
    event = next(e for e in events if e.kind == "watchdog")
    assert event.holding and "polic" in event.detail and event.robot_id == NS, event.detail
    # held: the arm comes to rest (a bridge that kept driving never lets it), then stays over 25 more joint states
    assert spin_until(rclpy_node, lambda: state["speed"] < 1e-3, WAIT_S), "the arm kept moving after the policy died"
    held, count = state["q"].copy(), state["count"]
    assert spin_until(rclpy_node, lambda: state["count"] >= count + 25, WAIT_S), "the joint states stopped"
    assert float(np.max(np.abs(state["q"] - held))) < 0.01, "the arm kept moving after the policy died"
    assert [e.kind for e in events] == ["watchdog"]
