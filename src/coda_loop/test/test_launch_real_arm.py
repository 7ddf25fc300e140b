# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Launch test of one arm's bring-up with the stand-in: ``launch/coda_real_arm.launch.py use_fake:=true policy:=true``.

    launch_test src/coda_loop/test/test_launch_real_arm.py     # or: colcon test --packages-select coda_loop
    python -m pytest src/coda_loop/test/test_launch_real_arm.py

The launch file starts, in the namespace ``panda_fake_0`` of an isolated ROS domain, the ``arm_bridge`` with the
stand-in's robot file, the stand-in arm ``fake_ros2_control_arm`` (MuJoCo behind ros2_control topics) and a
``policy`` node that loads ``policy_version`` from ``checkpoint_root``. That version is a real checkpoint whose
action head is set to a known constant (+y, gripper closing), so the motion it must cause is known. While the
launch runs: the three nodes are in the graph with the launch file's parameters, the arm's topics, the bridge's
services and its episode action are there; an instruction makes the policy node drive the stand-in through the
bridge (+y, gripper closing, no safety event); one episode sent to the bridge's ``run_episode`` completes. Then
launch_testing stops the launch with SIGINT: each process exits 0 without a traceback, and launch_ros wrote no
temporary parameter file (the launch file gives its values on the command line). When the test process exits, the
test's folder in the temporary directory goes.

Needs ``launch``, ``launch_ros`` and ``launch_testing`` (a ROS 2 install); elsewhere ``conftest.py`` leaves this
file out of the collection and says so in the test summary.
"""

from __future__ import annotations

import json
import math
import os
import time
import unittest
from pathlib import Path
from typing import Any

import launch_testing
import launch_testing.asserts
import numpy as np
import pytest
import rclpy
from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription, RegisterEventHandler, SetEnvironmentVariable
from launch.event_handlers import OnProcessStart
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch_testing_ros import WaitForTopics
from rcl_interfaces.srv import GetParameters
from rclpy.action import ActionClient
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String

from coda_engine.ros.spin import call_resending
from coda_msgs.action import RunEpisode
from coda_msgs.msg import ArmCommand, ObjectStates, SafetyEvent, SceneSpec

REPO = Path(__file__).resolve().parents[3]
LAUNCH_FILE = REPO / "launch" / "coda_real_arm.launch.py"
NS = "/panda_fake_0"
VERSION = "v-const"
ACTION = [0.0, 0.2, 0.0, 0.9]
"""The constant policy's action: dx, dy, dz in units of the node's max_delta_m (0.05 m), gripper (+1 closes)."""
STEP_M = 0.2 * 0.05
"""How far each live command moves the tool point along +y, m."""

def _load_support() -> Any:
    """Return ``launch_support.py`` of this folder (``launch_test`` loads test files by path, not as a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("coda_launch_support", Path(__file__).with_name("launch_support.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_support = _load_support()
reserve_domain, scratch_folder = _support.reserve_domain, _support.scratch_folder
note_parameter_files, parameter_files = _support.note_parameter_files, _support.parameter_files


def constant_policy(folder: Path) -> None:
    """Save policy version ``folder.name`` whose tanh action mean is ``ACTION`` everywhere, with its evaluation."""
    import torch

    from coda_policy.checkpoint import save_checkpoint
    from coda_policy.config import PolicyConfig
    from coda_policy.sft import build_policy

    net = build_policy(PolicyConfig(d_model=32, num_heads=2, hidden_dim=64), 0).net.eval()
    head = net.actor[-1]
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.atanh(torch.tensor(ACTION, dtype=torch.float32)))
    save_checkpoint(folder, net, folder.name)
    (folder / "evaluation.json").write_text(json.dumps({"version": folder.name, "per_split": {"id": 0.9}}))


@pytest.mark.launch_test
@pytest.mark.ros
@pytest.mark.slow
def generate_test_description() -> tuple[LaunchDescription, dict[str, Any]]:
    domain = str(reserve_domain())
    os.environ["ROS_DOMAIN_ID"] = domain  # this test process too
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    root = scratch_folder("coda-launch-arm-") / "checkpoints"
    constant_policy(root / VERSION)
    return LaunchDescription([
        SetEnvironmentVariable("ROS_DOMAIN_ID", domain),
        SetEnvironmentVariable("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST"),
        SetEnvironmentVariable("PYTHONUNBUFFERED", "1"),
        RegisterEventHandler(OnProcessStart(on_start=note_parameter_files)),
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(str(LAUNCH_FILE)),
            launch_arguments={"use_fake": "true", "policy": "true", "checkpoint_root": str(root),
                              "policy_version": VERSION, "family": "reach"}.items(),
        ),
        launch_testing.actions.ReadyToTest(),
    ]), {"checkpoint_root": root}


class Probe:
    """The test's side of the graph: the arm's state, the commands, the safety events."""

    def __init__(self, node: Node) -> None:
        """Create the subscriptions, the instruction publisher and the episode client on ``node``."""
        from coda_policy.control import PandaKinematics

        self.node = node
        self.kinematics = PandaKinematics()
        self.tcp: np.ndarray | None = None
        self.opening = math.nan
        self.commands: list[ArmCommand] = []
        self.events: list[SafetyEvent] = []
        node.create_subscription(JointState, f"{NS}/joint_states", self.on_joints, 10)
        node.create_subscription(ArmCommand, f"{NS}/arm_command", self.commands.append, 50)
        node.create_subscription(SafetyEvent, f"{NS}/safety_events", self.events.append,
                                 QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                                            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.instruction = node.create_publisher(String, f"{NS}/instruction", 10)
        self.episodes = ActionClient(node, RunEpisode, f"{NS}/run_episode")
        self.executor = SingleThreadedExecutor(context=node.context)
        self.executor.add_node(node)

    def on_joints(self, msg: JointState) -> None:
        self.tcp, self.opening = self.kinematics.forward(msg.name, msg.position)

    def spin(self, done: Any, timeout: float) -> bool:
        """Spin until ``done()`` or ``timeout`` seconds; return ``done()``."""
        end = time.monotonic() + timeout
        while not done() and time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.05)
        return bool(done())

    def parameters(self, fqn: str, names: list[str]) -> dict[str, Any]:
        """Return the values of ``names`` on the node ``fqn`` (its get_parameters service)."""
        from rclpy.parameter import parameter_value_to_python

        client = self.node.create_client(GetParameters, f"{fqn}/get_parameters")
        assert client.wait_for_service(timeout_sec=30.0), f"{fqn}/get_parameters did not appear"
        answer = call_resending(client, GetParameters.Request(names=names), 30.0,
                                lambda seconds: self.executor.spin_once(timeout_sec=seconds))
        assert answer is not None, f"{fqn}/get_parameters did not answer"
        values = answer.values
        return {name: parameter_value_to_python(value) for name, value in zip(names, values, strict=True)}


class TestRealArmBringUp(unittest.TestCase):
    """While the launch runs (methods run in name order)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.context = Context()
        rclpy.init(context=cls.context, domain_id=int(os.environ["ROS_DOMAIN_ID"]))
        cls.probe = Probe(rclpy.create_node("launch_test_probe", context=cls.context))

    @classmethod
    def tearDownClass(cls) -> None:
        cls.probe.executor.shutdown()
        cls.probe.node.destroy_node()
        rclpy.shutdown(context=cls.context)

    def test_1_nodes_come_up_with_their_parameters(self, checkpoint_root: Path) -> None:
        node = self.probe.node
        expected = {(name, NS) for name in ("arm_bridge", "fake_ros2_control_arm", "policy")}
        assert self.probe.spin(lambda: expected <= set(node.get_node_names_and_namespaces()), 120.0), (
            node.get_node_names_and_namespaces())
        bridge = self.probe.parameters(f"{NS}/arm_bridge", ["robot_config", "checkpoint_root"])
        assert bridge["robot_config"].endswith("/config/robots/panda_fake.yaml"), bridge
        assert bridge["checkpoint_root"] == str(checkpoint_root)
        policy = self.probe.parameters(f"{NS}/policy", ["robot_config", "initial_version", "family", "checkpoint_root"])
        assert policy == {"robot_config": bridge["robot_config"], "initial_version": VERSION, "family": "reach",
                          "checkpoint_root": str(checkpoint_root)}
        arm = self.probe.parameters(f"{NS}/fake_ros2_control_arm", ["state_rate_hz", "camera_rate_hz"])
        assert arm == {"state_rate_hz": 50.0, "camera_rate_hz": 5.0}  # from coda_engine's config/fake_arm.yaml

    def test_2_topics_services_and_the_episode_action_are_there(self) -> None:
        node = self.probe.node
        topics_wanted = {f"{NS}/{t}" for t in ("joint_states", "object_states", "camera/image_raw", "arm_command",
                                               "instruction", "safety_events",
                                               "joint_trajectory_controller/joint_trajectory",
                                               "gripper_controller/commands")}
        services_wanted = {f"{NS}/{s}" for s in ("estop", "reset_estop", "operator_verdict",
                                                 "run_episode/_action/send_goal")}

        def present() -> bool:
            topics = {name for name, _ in node.get_topic_names_and_types()}
            services = {name for name, _ in node.get_service_names_and_types()}
            return topics_wanted <= topics and services_wanted <= services

        assert self.probe.spin(present, 30.0), (node.get_topic_names_and_types(), node.get_service_names_and_types())
        # the stand-in streams its state, perception and camera; the policy node commands (holding: no instruction)
        streams = [(f"{NS}/joint_states", JointState), (f"{NS}/object_states", ObjectStates),
                   (f"{NS}/camera/image_raw", Image), (f"{NS}/arm_command", ArmCommand)]
        waiter = WaitForTopics(streams, timeout=30.0)
        try:
            assert waiter.wait(), f"no messages on {waiter.topics_not_received()}"
            joints = waiter.received_messages(f"{NS}/joint_states")[-1]
            assert list(joints.name) == [*(f"panda_joint{i}" for i in range(1, 8)),
                                         "hand_panda_finger_joint1", "hand_panda_finger_joint2"], joints.name
            image = waiter.received_messages(f"{NS}/camera/image_raw")[-1]
            assert (image.width, image.height, image.encoding) == (64, 64, "rgb8")
            command = waiter.received_messages(f"{NS}/arm_command")[-1]
            assert command.hold and command.policy_version == VERSION, (command.hold_reason, command.policy_version)
        finally:
            waiter.shutdown()

    def test_3_the_policy_node_drives_the_stand_in_through_the_bridge(self) -> None:
        probe = self.probe
        assert probe.spin(lambda: probe.tcp is not None and probe.instruction.get_subscription_count() > 0, 30.0)

        def moving() -> bool:
            return any(not c.hold for c in probe.commands)

        # the node holds until it has an instruction (its text model loads on first use)
        for _ in range(120):
            probe.instruction.publish(String(data="touch the red cube"))
            if probe.spin(moving, 1.0):
                break
        assert moving(), f"the policy node only held: {[c.hold_reason for c in probe.commands[-3:]]}"
        first = next(c for c in probe.commands if not c.hold)
        assert first.policy_version == VERSION and first.gripper < 0  # on the wire: < 0 closes
        assert first.delta.y == pytest.approx(STEP_M, rel=1e-3) and first.delta.x == first.delta.z == 0.0
        start, sent_before = probe.tcp.copy(), len(probe.commands)
        probe.spin(lambda: False, 2.5)
        moved = probe.tcp - start
        sent = sum(not c.hold for c in probe.commands[sent_before:])
        assert sent >= 10, f"only {sent} live commands in 2.5 s at 10 Hz"
        assert 0.4 * sent * STEP_M < moved[1] < 1.5 * sent * STEP_M + 0.02, f"moved {moved}, {sent} commands"
        assert math.hypot(moved[0], moved[2]) < 0.02, f"x/z drifted: {moved}"
        assert probe.opening < 0.02, f"the gripper did not close: opening {probe.opening:.3f} m"
        assert probe.events == [], [(e.kind, e.detail) for e in probe.events]

    def test_4_one_episode_completes_on_the_bridge(self) -> None:
        from coda_engine.episodes import STATUS_COMPLETED
        from coda_engine.ros.convert import dict_to_msg
        from coda_engine.sim.generator import generate_seeded

        probe = self.probe
        assert probe.spin(probe.episodes.server_is_ready, 30.0), "run_episode is not served"
        scene = generate_seeded("reach", 5)
        goal = RunEpisode.Goal(scene=dict_to_msg(SceneSpec, scene.to_dict()), policy_version="expert",
                               record_keyframes=True)
        sent = probe.episodes.send_goal_async(goal)
        assert probe.spin(sent.done, 30.0) and sent.result().accepted, "the goal was not accepted"
        done = sent.result().get_result_async()
        assert probe.spin(done.done, 180.0), "the episode did not finish"
        answer = done.result().result
        result = answer.result
        assert answer.accepted, answer.error
        assert result.status == STATUS_COMPLETED, result.status_detail
        assert result.source == result.SOURCE_REAL and result.robot_id == "panda_fake_0"
        assert result.scene_id == scene.scene_id and result.length > 0 and result.keyframes
        assert result.success, f"the expert did not reach the cube on the stand-in: {result.status_detail}"


def output_of(proc_output: Any, name: str) -> str:
    """Return everything the process ``name`` (``policy``, not ``policy-3``) wrote, stdout and stderr."""
    return "".join(io.text.decode(errors="replace") for io in proc_output if io.process_name.startswith(f"{name}-"))


@launch_testing.post_shutdown_test()
class TestRealArmShutdown(unittest.TestCase):
    """After launch_testing stopped the launch with SIGINT."""

    def test_every_process_exits_zero_without_a_traceback(self, proc_info: Any, proc_output: Any) -> None:
        names = proc_info.process_names()
        for name in ("arm_bridge", "fake_ros2_control_arm", "policy"):
            assert any(n.startswith(f"{name}-") for n in names), names
            assert "Traceback" not in output_of(proc_output, name), output_of(proc_output, name)[-3000:]
        launch_testing.asserts.assertExitCodes(proc_info)

    def test_the_launch_wrote_no_parameter_files(self, proc_info: Any) -> None:
        """coda_real_arm.launch.py gives its values on the command line: launch_ros wrote no temporary YAML file."""
        commands = [info.cmd for info in proc_info]
        assert len(commands) == 3, commands
        assert [path for cmd in commands for path in parameter_files(cmd)] == [], commands
