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

from coda_engine.digests import file_sha256
from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams
from coda_msgs.msg import ArmCommand, ObjectState, ObjectStates, PolicyVersion
from coda_policy.checkpoint import MODEL_FILE, save_checkpoint
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


def _send(publisher: Any, msg: Any, timeout: float = 30.0) -> None:
    """Publish ``msg`` once ``publisher`` has matched a node's subscription.

    A volatile message sent before that is lost (discovery is slow on a loaded machine), and each topic is discovered
    on its own: commands flowing from the node prove nothing about its ``instruction`` subscription.
    """
    deadline = time.monotonic() + timeout
    while publisher.get_subscription_count() == 0:  # discovery runs on DDS threads: no spinning needed
        assert time.monotonic() < deadline, f"the node's {publisher.topic_name} subscription was never matched"
        time.sleep(0.05)
    publisher.publish(msg)


class _NodeLog:
    """The log lines the nodes publish on /rosout (what ``ros2 launch`` shows an operator): (logger name, text)."""

    def __init__(self, node: Any) -> None:
        from rcl_interfaces.msg import Log

        self.lines: list[tuple[str, str]] = []
        node.create_subscription(Log, "/rosout", lambda m: self.lines.append((m.name, m.msg)), 100)

    def find(self, *words: str, logger: str = "policy") -> str | None:
        """Return the first line of a logger ending in ``logger`` that contains every one of ``words``, or None."""
        return next((text for name, text in self.lines
                     if name.endswith(logger) and all(word in text for word in words)), None)


class _Cell:
    """The policy node's world from the test's side: feeds joint and object states, collects its commands."""

    def __init__(self, node: Any, arm: SimArm, feed: dict[str, bool]) -> None:
        import rclpy

        self.node, self.arm, self.feed = node, arm, feed
        self.commands: list[ArmCommand] = []
        node.create_subscription(ArmCommand, "arm_command", self.commands.append, 10)
        self.joints = node.create_publisher(JointState, "joint_states", 10)
        self.objects = node.create_publisher(ObjectStates, "object_states", 10)
        self.instruction = node.create_publisher(String, "instruction", 10)
        self.version = node.create_publisher(PolicyVersion, "policy_version", 10)
        self.log = _NodeLog(node)
        self.executor = rclpy.executors.SingleThreadedExecutor(context=node.context)
        self.executor.add_node(node)

    def publish_inputs(self) -> None:
        stamp = self.node.get_clock().now().to_msg()
        if self.feed.get("joints", True):
            js = JointState(name=list(SimArm.joint_names), position=[float(q) for q in self.arm.joint_positions()])
            if self.feed.get("nan", False):
                js.position[0] = math.nan
            js.header.stamp = stamp
            self.joints.publish(js)
        self.objects.publish(_object_states(self.arm, stamp))

    def run_until(self, done: Callable[[ArmCommand], bool], timeout: float = 40.0) -> ArmCommand:
        """Feed inputs every 50 ms and spin until a command satisfies ``done``; return it."""
        end = time.monotonic() + timeout
        last_feed = 0.0
        while time.monotonic() < end:
            if time.monotonic() - last_feed > 0.05:
                self.publish_inputs()
                last_feed = time.monotonic()
            self.executor.spin_once(timeout_sec=0.02)
            while self.commands:
                cmd = self.commands.pop(0)
                if done(cmd):
                    return cmd
        raise AssertionError("no matching arm_command within the timeout")

    def refused(self, *words: str, after: int = 10) -> tuple[str, set[str]]:
        """Feed inputs until the node logs a line with ``words``; return it and the versions of the next commands.

        The refusal is the log line (an event), not an absence of the version for some seconds; the ``after``
        commands that follow it show which version the node kept.
        """
        self.run_until(lambda c: self.log.find(*words) is not None)
        seen: list[str] = []
        self.run_until(lambda c: seen.append(c.policy_version) is None and len(seen) >= after)
        return self.log.find(*words) or "", set(seen)

    def close(self) -> None:
        self.executor.remove_node(self.node)


def test_policy_node_commands_holds_and_swaps(tmp_path, rclpy_node, start_process, tiny_policy_config):
    for seed, name in ((0, "v1"), (1, "v2")):  # trained at the node's rate; v10hz at the simulator's
        save_checkpoint(tmp_path / name, build_policy(tiny_policy_config, seed).net.eval(), name, control_hz=20.0)
    save_checkpoint(tmp_path / "v10hz", build_policy(tiny_policy_config, 2).net.eval(), "v10hz")
    start_process([sys.executable, "-m", "coda_policy.ros.policy_node", "--ros-args",
                   "-p", "control_rate_hz:=20.0", "-p", "max_input_age_s:=0.4", "-p", "family:=reach",
                   "-p", f"checkpoint_root:={tmp_path}", "-p", "initial_version:=v1",
                   "-p", "busy_poll_s:=0.01"])  # polls 10 ms of each 50 ms period: that path is exercised too
    arm = SimArm()
    arm.reset(generate("reach", np.random.default_rng(0), SceneParams()))
    feed = {"joints": True, "nan": False}
    cell = _Cell(rclpy_node, arm, feed)
    run_until, instr_pub, version_pub = cell.run_until, cell.instruction, cell.version

    first = run_until(lambda c: True)
    assert first.hold and first.hold_reason
    # The node commands (holds), so it subscribes; the instruction goes out once this side has matched it.
    _send(instr_pub, String(data="touch the red ball"))
    cmd = run_until(lambda c: not c.hold)
    assert cmd.policy_version == "v1"
    assert max(abs(cmd.delta.x), abs(cmd.delta.y), abs(cmd.delta.z)) <= 0.05 and -1.0 <= cmd.gripper <= 1.0
    feed["nan"] = True
    assert "non-finite" in run_until(lambda c: c.hold).hold_reason
    feed["nan"], feed["joints"] = False, False
    stale = run_until(lambda c: c.hold and "stale" in c.hold_reason)
    assert (stale.delta.x, stale.delta.y, stale.delta.z) == (0.0, 0.0, 0.0)
    feed["joints"] = True
    _send(version_pub, PolicyVersion(version_id="v2", checkpoint_uri=f"file://{tmp_path / 'v2'}",
                                     checkpoint_sha256="0" * 64))
    version_pub.publish(PolicyVersion(version_id="v2", checkpoint_uri="v2",
                                      checkpoint_sha256=file_sha256(tmp_path / "v2" / MODEL_FILE)))
    assert run_until(lambda c: c.policy_version == "v2" and not c.hold).policy_version == "v2"
    # A version trained at another rate is refused (logged); the node keeps commanding with v2.
    version_pub.publish(PolicyVersion(version_id="v10hz", checkpoint_uri="v10hz"))
    line, versions = cell.refused("v10hz", "not loaded")
    assert "trained at 10 Hz and cannot run at 20 Hz" in line, line
    assert versions == {"v2"}
    cell.close()


def test_policy_node_refuses_a_bad_robot_file(ros_domain: int, tmp_path) -> None:
    import subprocess

    robot = tmp_path / "robot.yaml"
    robot.write_text("robot_id: lab_arm\njoint_names: [a, b, c]\nfinger_joints: [f1, f2]\n")
    done = subprocess.run([sys.executable, "-m", "coda_policy.ros.policy_node", "--ros-args",
                           "-p", f"robot_config:={robot}"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert str(robot) in done.stderr and "joint_names" in done.stderr, done.stderr[-2000:]


def test_policy_node_fetches_the_versions_this_machine_lacks(tmp_path, rclpy_node, start_process, tiny_policy_config):
    """A live policy beside a robot without the run's disk: versions come from the run's get_checkpoint service."""
    from coda_engine.ros.checkpoints import CheckpointServer

    run = tmp_path / "run" / "checkpoints"  # the loop's machine
    digests = {}
    for seed, name in ((0, "v1"), (1, "v2")):
        save_checkpoint(run / name, build_policy(tiny_policy_config, seed).net.eval(), name, control_hz=20.0)
        digests[name] = file_sha256(run / name / MODEL_FILE)
    server = CheckpointServer(rclpy_node, run)
    cache = tmp_path / "robot-cache"
    start_process([sys.executable, "-m", "coda_policy.ros.policy_node", "--ros-args",
                   "-p", "control_rate_hz:=20.0", "-p", "family:=reach", "-p", "initial_version:=v1",
                   "-p", f"checkpoint_service:={server.name}", "-p", f"checkpoint_cache:={cache}"])
    arm = SimArm()
    arm.reset(generate("reach", np.random.default_rng(0), SceneParams()))
    cell = _Cell(rclpy_node, arm, {})
    cell.run_until(lambda c: True)
    _send(cell.instruction, String(data="touch the red ball"))
    first = cell.run_until(lambda c: not c.hold)
    assert (first.policy_version, first.policy_sha256) == ("v1", digests["v1"])  # initial_version, fetched
    _send(cell.version, PolicyVersion(version_id="v2", checkpoint_uri="file:///on/the/loop/machine/v2",
                                      checkpoint_sha256=digests["v2"]))
    assert cell.run_until(lambda c: c.policy_version == "v2" and not c.hold).policy_sha256 == digests["v2"]
    # a version the run cannot give (no such model): logged, and the node keeps commanding with v2
    cell.version.publish(PolicyVersion(version_id="v3", checkpoint_uri="file:///on/the/loop/machine/v3",
                                       checkpoint_sha256="0" * 64))
    line, versions = cell.refused("'v3'", "not loaded")
    assert versions == {"v2"}, line
    cell.close()
    assert server.sent == {"v1": 1, "v2": 1}
    for name, digest in digests.items():
        assert file_sha256(cache / digest[:16] / name / MODEL_FILE) == digest


class _TwoPaths:
    """Feeds the same observations to a policy node per control path (namespaces ``/<path>``); pairs the answers."""

    def __init__(self, node: Any, paths: tuple[str, ...]) -> None:
        import rclpy

        self.node, self.paths = node, paths
        self.answers: dict[str, dict[int, ArmCommand]] = {p: {} for p in paths}
        self.pubs: dict[str, dict[str, Any]] = {}
        for p in paths:
            self.pubs[p] = {
                "joints": node.create_publisher(JointState, f"/{p}/joint_states", 10),
                "objects": node.create_publisher(ObjectStates, f"/{p}/object_states", 10),
                "instruction": node.create_publisher(String, f"/{p}/instruction", 10),
                "version": node.create_publisher(PolicyVersion, f"/{p}/policy_version", 10),
            }
            node.create_subscription(ArmCommand, f"/{p}/arm_command",
                                     lambda msg, p=p: self.answers[p].setdefault(self._key(msg.header.stamp), msg), 100)
        self.log = _NodeLog(node)
        self.executor = rclpy.executors.SingleThreadedExecutor(context=node.context)
        self.executor.add_node(node)
        self._used: set[int] = set()

    @staticmethod
    def _key(stamp: Any) -> int:
        return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)

    def spin(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)

    def publish(self, what: str, msg: Any, matched: bool = True) -> None:
        """Publish ``msg`` on topic ``what`` of every node; with ``matched`` as :func:`_send` does (sent once)."""
        for p in self.paths:
            if matched:
                _send(self.pubs[p][what], msg)
            else:
                self.pubs[p][what].publish(msg)

    def joints(self, names: list[str], positions: list[float], age: float = 0.0, answer: bool = True,
               timeout: float = 30.0) -> dict[str, ArmCommand] | int:
        """Send one joint state (stamped ``age`` s ago) to every node; return each node's command for it.

        AssertionError when a command does not come within ``timeout`` s. With ``answer`` False (a state the nodes
        must ignore): wait until every node logs that it ignored a joint state, and return the state's stamp key
        (:meth:`unanswered` checks at the end that no command answered it).
        """
        key = time.time_ns() - int(age * 1e9)
        while key in self._used:  # every stamp names one observation
            key += 1
        self._used.add(key)
        msg = JointState(name=names, position=positions)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(key, 1_000_000_000)
        self.publish("joints", msg, matched=False)  # probes repeat it until they are answered
        if not answer:
            end = time.monotonic() + timeout
            while not all(self.log.find("joint_states ignored", logger=f"{p}.policy") for p in self.paths):
                assert time.monotonic() < end, f"a node did not log the ignored joint state: {self.log.lines[-5:]}"
                self.executor.spin_once(timeout_sec=0.01)
            return key
        end = time.monotonic() + timeout
        while not all(key in self.answers[p] for p in self.paths):
            assert time.monotonic() < end, f"no arm_command for the joint state stamped {key}"
            self.executor.spin_once(timeout_sec=0.01)
        return {p: self.answers[p][key] for p in self.paths}

    def probe_until(self, names: list[str], positions: list[float], done: Callable[[ArmCommand], bool],
                    timeout: float = 60.0) -> None:
        """Send stale joint states (held, so the task state stays as it is) until every node's answer is ``done``."""
        end = time.monotonic() + timeout
        answers: dict[str, ArmCommand] = {}
        while True:
            try:
                answers = self.joints(names, positions, age=120.0, timeout=1.0)
            except AssertionError:  # not matched yet, or still starting
                answers = {}
            if answers and all(done(a) for a in answers.values()):
                return
            assert time.monotonic() < end, {p: a.hold_reason for p, a in answers.items()}
            self.spin(0.1)


def _command(msg: ArmCommand) -> tuple:
    """Return an ArmCommand as comparable values (the age in a stale reason depends on when it was read)."""
    import re

    reason = re.sub(r"stale: \d+\.\d{3} s old", "stale: _ s old", msg.hold_reason)
    return (msg.hold, reason, msg.stage, msg.policy_version, msg.policy_sha256)


def test_cpp_and_python_paths_command_alike_over_dds(tmp_path, rclpy_node, start_process, tiny_policy_config):
    """The same recorded observations through a node per control path: the same commands, holds and reasons."""
    for seed, name in ((0, "v1"), (1, "v2")):
        save_checkpoint(tmp_path / name, build_policy(tiny_policy_config, seed).net.eval(), name)
    paths = ("cpp", "python")
    for path in paths:
        start_process([sys.executable, "-m", "coda_policy.ros.policy_node", "--ros-args", "-r", f"__ns:=/{path}",
                       "-p", f"control_path:={path}", "-p", "trigger:=joint_states", "-p", "family:=pick_place",
                       "-p", "max_delta_m:=0.005", "-p", "max_input_age_s:=60.0",
                       "-p", f"checkpoint_root:={tmp_path}", "-p", "initial_version:=v1"])
    rng = np.random.default_rng(5)
    arm = SimArm()
    arm.reset(generate("pick_place", rng, SceneParams(num_distractors=(2, 2))))
    names = list(SimArm.joint_names)
    home = [float(q) for q in arm.joint_positions()]
    cell = _TwoPaths(rclpy_node, paths)
    # both nodes up, v1 loaded; then the scene's objects and the instruction, each confirmed by held answers
    cell.probe_until(names, home, lambda c: c.hold_reason == "no instruction" and c.policy_version == "v1")
    cell.publish("objects", _object_states(arm, rclpy_node.get_clock().now().to_msg()))
    cell.publish("instruction", String(data="put the red cube in the bin"))
    cell.probe_until(names, home, lambda c: "joint_states stale" in c.hold_reason)
    pairs = []
    for k in range(40):
        arm.step(np.concatenate([rng.uniform(-0.02, 0.02, 3), rng.uniform(-1, 1, 1)]))
        q = [float(x) for x in arm.joint_positions()]
        if k == 12:
            q[1] = math.nan  # holds twice: this observation and the next one's velocity
        if k == 18:
            pairs.append(cell.joints(names, q, age=90.0))  # stale
        if k == 24:  # a new version mid-stream, taken by both before the next observation
            digest = file_sha256(tmp_path / "v2" / MODEL_FILE)
            cell.publish("version", PolicyVersion(version_id="v2", checkpoint_uri="v2", checkpoint_sha256=digest))
            cell.probe_until(names, q, lambda c: c.policy_version == "v2")
        if k == 30:
            ignored = cell.joints(names[:-1], q[:-1], answer=False)  # a finger missing: ignored by both, no command
        if k == 33:  # the driver's own order
            order = list(reversed(range(len(names))))
            pairs.append(cell.joints([names[i] for i in order], [q[i] for i in order]))
        else:
            pairs.append(cell.joints(names, q))
    # the ignored state: logged by both (above), and answered by neither though the ones after it were
    assert all(ignored not in cell.answers[p] for p in paths)
    for i, pair in enumerate(pairs):
        cpp, python = pair["cpp"], pair["python"]
        assert _command(cpp) == _command(python), f"observation {i}: {_command(cpp)} != {_command(python)}"
        for axis in "xyz":
            assert abs(getattr(cpp.delta, axis) - getattr(python.delta, axis)) <= 1e-6, f"observation {i}"
        assert abs(cpp.gripper - python.gripper) <= 1e-6, f"observation {i}"
    reasons = [pair["cpp"].hold_reason for pair in pairs]
    assert reasons.count("non-finite input in the observation") == 2
    assert sum("joint_states stale" in r for r in reasons) == 1
    ran = [pair["cpp"] for pair in pairs if not pair["cpp"].hold]
    assert len(ran) >= 35 and {c.policy_version for c in ran} == {"v1", "v2"}
    assert any(max(abs(c.delta.x), abs(c.delta.y), abs(c.delta.z)) == pytest.approx(0.005) for c in ran)


@pytest.mark.parametrize("gap_s", [0.05, 0.5])
def test_policy_node_stops_cleanly_on_ctrl_c_and_the_signal_launch_sends_after_it(tmp_path, rclpy_node,
                                                                                  tiny_policy_config, gap_s):
    """Ctrl-C in the terminal of ``ros2 launch``, then ``ros2 launch``'s own SIGINT: exit 0, no traceback.

    The node has a version and an instruction (its text model loaded, its objects frozen out of the collector)
    when the signals come.
    """
    import signal
    import subprocess

    from coda_engine.ros.spin import spin_until

    save_checkpoint(tmp_path / "v1", build_policy(tiny_policy_config, 0).net.eval(), "v1")
    log = tmp_path / "node.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "coda_policy.ros.policy_node", "--ros-args",
                                 "-p", f"checkpoint_root:={tmp_path}", "-p", "initial_version:=v1"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        instruction = rclpy_node.create_publisher(String, "instruction", 10)
        deadline = time.monotonic() + 120
        while "instruction: 'touch the red ball'" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-3000:]
            instruction.publish(String(data="touch the red ball"))
            spin_until(rclpy_node, lambda: False, 0.5)
        proc.send_signal(signal.SIGINT)
        time.sleep(gap_s)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
