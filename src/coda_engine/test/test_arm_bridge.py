# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The ``arm_bridge`` node against ``fake_ros2_control_arm``, each its own process, over DDS.

The stand-in speaks only what a ros2_control Panda speaks (joint_states, a joint trajectory controller topic, a
gripper command topic, camera, perception), so these tests exercise the wire protocol a real arm uses.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coda_engine.sim import panda
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams

pytestmark = pytest.mark.ros

ROBOT_FILE = Path(__file__).resolve().parents[1] / "config" / "robots" / "panda_fake.yaml"
NS = "panda_fake_0"
QUIET_S = 2.0
"""``safety.estop_release_quiet_s`` of the robot file (its default)."""
HOME = np.array(panda.HOME_QPOS)


class Probe:
    """This test's side of the graph: the policy's and the operator's ends of the bridge, and the arm's state."""

    def __init__(self, node: Any) -> None:
        """Create the subscriptions, publishers and clients on ``node``."""
        from rclpy.action import ActionClient
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Bool
        from std_srvs.srv import Trigger

        from coda_msgs.action import RunEpisode
        from coda_msgs.msg import ArmCommand, SafetyEvent

        self.node = node
        self.q: np.ndarray | None = None
        self.stamped: list[tuple[float, np.ndarray]] = []
        """Every joint state received: (its header stamp, s; the seven arm joints)."""
        self.events: list[Any] = []
        node.create_subscription(JointState, f"/{NS}/joint_states", self._on_joints, 10)
        node.create_subscription(SafetyEvent, f"/{NS}/safety_events", self.events.append,
                                 QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                                            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.commands = node.create_publisher(ArmCommand, f"/{NS}/arm_command", 10)
        self.estop_topic = node.create_publisher(Bool, f"/{NS}/estop", 10)
        self.estop = node.create_client(Trigger, f"/{NS}/estop")
        self.reset = node.create_client(Trigger, f"/{NS}/reset_estop")
        self.episodes = ActionClient(node, RunEpisode, f"/{NS}/run_episode")

    def _on_joints(self, msg: Any) -> None:
        self.q = np.array(msg.position[:7])
        self.stamped.append((msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec, self.q))

    def spin(self, seconds: float, done: Any = None) -> bool:
        """Spin for ``seconds``, or until ``done()``; return ``done()`` (True without one)."""
        from coda_engine.ros.spin import spin_until

        if done is None:
            spin_until(self.node, lambda: False, seconds)
            return True
        return spin_until(self.node, done, seconds)

    def command(self, dx: float = 0.0, dy: float = 0.0, dz: float = 0.0, version: str = "expert",
                sha256: str = "") -> None:
        from coda_msgs.msg import ArmCommand

        msg = ArmCommand(policy_version=version, policy_sha256=sha256, gripper=1.0)  # open
        msg.delta.x, msg.delta.y, msg.delta.z = dx, dy, dz
        self.commands.publish(msg)

    def drive(self, seconds: float, until: str = "", **delta: float) -> None:
        """Publish the same command at 10 Hz for ``seconds``, or until a safety event of kind ``until`` arrives."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (until and any(e.kind == until for e in self.events)):
            self.command(**delta)
            self.spin(0.1)

    def call(self, client: Any) -> Any:
        from std_srvs.srv import Trigger

        assert self.spin(20.0, client.service_is_ready), f"{client.srv_name} not available"
        future = client.call_async(Trigger.Request())
        assert self.spin(10.0, future.done)
        return future.result()

    def start_episode(self, scene: Any, version: str = "expert", **fields: Any) -> Any:
        """Send a RunEpisode goal (``fields``: more goal fields); return the future of its result."""
        from coda_engine.ros.convert import dict_to_msg
        from coda_msgs.action import RunEpisode
        from coda_msgs.msg import SceneSpec

        assert self.spin(20.0, self.episodes.server_is_ready), "run_episode server not available"
        goal = RunEpisode.Goal(scene=dict_to_msg(SceneSpec, scene.to_dict()), policy_version=version,
                               record_keyframes=True, **fields)
        sent = self.episodes.send_goal_async(goal)
        assert self.spin(10.0, sent.done)
        return sent.result().get_result_async()

    def run_episode(self, scene: Any, version: str = "expert", timeout: float = 60.0, **fields: Any) -> Any:
        result = self.start_episode(scene, version, **fields)
        assert self.spin(timeout, result.done), "episode did not finish"
        return result.result().result

    def wait_for_event(self, kind: str, timeout: float = 5.0, detail: str = "") -> Any:
        """Return the first event of ``kind`` whose detail contains ``detail``.

        ``safety_events`` is transient-local: the probe also gets the events published before it subscribed, e.g.
        the bridge's start-up hold before its first joint state.
        """
        def match(event: Any) -> bool:
            return event.kind == kind and detail in event.detail

        assert self.spin(timeout, lambda: any(match(e) for e in self.events)), (
            f"no {kind} event naming {detail!r}; got {[(e.kind, e.detail) for e in self.events]}")
        return next(e for e in self.events if match(e))

    def holds(self, seconds: float = 1.0, **delta: float) -> float:
        """Largest joint motion (rad) over ``seconds`` while commands keep coming (they must not move the arm)."""
        self.spin(0.3)
        before = self.q.copy()
        self.drive(seconds, **(delta or {"dx": 0.03}))
        return float(np.max(np.abs(self.q - before)))


def start_arm(start_process: Any) -> Any:
    return start_process([sys.executable, "-m", "coda_engine.ros.fake_arm_node", "--ros-args", "-r", f"__ns:=/{NS}"])


def start_bridge(start_process: Any, robot: Path, checkpoint_root: Path | None = None) -> Any:
    cmd = [sys.executable, "-m", "coda_engine.ros.arm_bridge_node", "--ros-args", "-r", f"__ns:=/{NS}",
           "-p", f"robot_config:={robot}"]
    if checkpoint_root is not None:
        cmd += ["-p", f"checkpoint_root:={checkpoint_root}"]
    return start_process(cmd)


def test_a_renamed_and_remapped_bridge_takes_its_live_path_along(start_process: Any, rclpy_node: Any) -> None:
    """Command-line remappings of the bridge (its name, a topic) also apply to its live node (``<name>_live``)."""
    from coda_engine.ros.spin import spin_until

    start_process([sys.executable, "-m", "coda_engine.ros.arm_bridge_node", "--ros-args", "-r", f"__ns:=/{NS}",
                   "-r", "__node:=bridge_lab1", "-r", "joint_states:=franka/joint_states",
                   "-p", f"robot_config:={ROBOT_FILE}"])

    def subscribers(topic: str) -> list[tuple[str, str]]:
        return [(i.node_namespace, i.node_name) for i in rclpy_node.get_subscriptions_info_by_topic(f"/{NS}/{topic}")]

    live = (f"/{NS}", "bridge_lab1_live")
    assert spin_until(rclpy_node, lambda: subscribers("franka/joint_states") == [live], 30.0), (
        subscribers("franka/joint_states"))
    assert subscribers("joint_states") == []
    assert spin_until(rclpy_node, lambda: subscribers("arm_command") == [live], 10.0), subscribers("arm_command")
    names = rclpy_node.get_node_names_and_namespaces()
    assert names.count(("bridge_lab1", f"/{NS}")) == 1 and names.count(("bridge_lab1_live", f"/{NS}")) == 1, names


@pytest.mark.parametrize("kind,safety,delta", [
    ("max_step", {"max_step": 0.01}, {"dx": 0.03}),
    ("workspace", {"workspace_high": [0.85, 0.5, 0.2]}, {"dx": 0.01}),
    ("velocity_limit", {"max_joint_velocity": [0.05] * 7}, {"dy": 0.03}),
    ("joint_limit", {"joint_lower": [-0.05, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973],
                     "joint_upper": [0.05, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973]}, {"dy": 0.05}),
])
def test_each_safety_limit_triggers_and_the_arm_holds(stand_in_robot: Any, start_process: Any, rclpy_node: Any,
                                                      kind: str, safety: dict, delta: dict) -> None:
    start_arm(start_process)
    start_bridge(start_process, stand_in_robot(**safety))
    probe = Probe(rclpy_node)
    assert probe.spin(20.0, lambda: probe.q is not None and probe.commands.get_subscription_count() > 0)
    # joint_limit: a few commands first (joint 1 leaves its tight band). The others trip on their first command the
    # bridge acts on; commands keep coming meanwhile, because the bridge holds (ignores) any command that arrives
    # before its own first joint_states message, which may be after the probe's.
    probe.drive(5.0, until=kind, **delta)
    event = probe.wait_for_event(kind)
    assert event.holding and event.robot_id == NS and event.detail
    assert probe.holds(**delta) < 0.02  # later commands in the same direction are refused too
    assert sum(e.kind == kind for e in probe.events) == 1, "each refused command was reported again"


def test_watchdog_estop_and_silent_streams(tmp_path: Path, start_process: Any, rclpy_node: Any) -> None:
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters

    from coda_engine.ros.spin import call_spinning

    start_arm(start_process)
    start_bridge(start_process, ROBOT_FILE)
    probe = Probe(rclpy_node)
    assert probe.spin(20.0, lambda: probe.q is not None and probe.commands.get_subscription_count() > 0)
    start = probe.q.copy()
    probe.drive(1.0, dx=0.02)
    assert np.max(np.abs(probe.q - start)) > 0.02, "live commands did not move the arm"
    # the policy goes silent: the watchdog holds
    event = probe.wait_for_event("watchdog", timeout=3.0, detail="policy silent")
    assert event.holding
    # e-stop over the service: latched until reset, commands refused meanwhile
    assert probe.call(probe.estop).success
    assert probe.wait_for_event("estop").holding
    assert probe.holds() < 0.02
    response = probe.run_episode(generate_seeded("reach", 21, SceneParams()))
    assert not response.accepted and "e-stop" in response.error
    # one reset_estop right after the stop is refused: the stop signals must be quiet for a while first
    refused = probe.call(probe.reset)
    assert not refused.success and "must be quiet" in refused.message, refused.message
    assert probe.holds() < 0.02
    time.sleep(QUIET_S + 0.3)
    released = probe.call(probe.reset)
    assert released.success and "re-homing" in released.message, released.message
    # the bridge moves the arm home at reduced speed; commands are taken only when it is there
    assert probe.spin(20.0, lambda: np.max(np.abs(probe.q - HOME)) < 0.03), "the arm did not re-home"
    before = probe.q.copy()
    probe.drive(1.5, dx=-0.02)
    assert np.max(np.abs(probe.q - before)) > 0.02, "commands after the release and re-home did not move the arm"
    # e-stop over the topic latches the same way; a release waits for the topic to say false and stay quiet
    from std_msgs.msg import Bool

    probe.events.clear()
    probe.estop_topic.publish(Bool(data=True))
    probe.wait_for_event("estop")
    assert probe.holds() < 0.02
    time.sleep(QUIET_S + 0.3)
    refused = probe.call(probe.reset)
    assert not refused.success and "latest message is true" in refused.message, refused.message
    probe.estop_topic.publish(Bool(data=False))
    probe.spin(0.5)
    assert not probe.call(probe.reset).success  # quiet only since the false
    time.sleep(QUIET_S + 0.3)
    assert probe.call(probe.reset).success
    assert probe.spin(20.0, lambda: np.max(np.abs(probe.q - HOME)) < 0.03), "the arm did not re-home"
    # the arm's state stream goes silent (the driver drops every message): the watchdog holds
    client = rclpy_node.create_client(SetParameters, f"/{NS}/fake_ros2_control_arm/set_parameters")
    assert probe.spin(10.0, client.service_is_ready)
    probe.events.clear()
    probe.drive(0.5, dx=0.01)
    value = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=1.0)
    answer = call_spinning(rclpy_node, client, SetParameters.Request(parameters=[Parameter(name="drop_rate",
                                                                                         value=value)]))
    assert answer is not None and answer.results[0].successful
    probe.drive(1.5, dx=0.01)
    assert probe.wait_for_event("watchdog", detail="joint_states silent").holding


def test_operator_verdicts_over_ros_decide_episodes(stand_in_robot: Any, start_process: Any,
                                                    rclpy_node: Any) -> None:
    from std_srvs.srv import SetBool
    from trajectory_msgs.msg import JointTrajectory

    from coda_engine.sim.families import get_family

    start_arm(start_process)
    start_bridge(start_process, stand_in_robot(top={"success_check": "operator", "operator_timeout_s": 30.0}))
    probe = Probe(rclpy_node)
    sent: list[int] = []
    rclpy_node.create_subscription(JointTrajectory, f"/{NS}/joint_trajectory_controller/joint_trajectory",
                                   lambda msg: sent.append(1), 50)
    verdict = rclpy_node.create_client(SetBool, f"/{NS}/operator_verdict")
    assert probe.spin(20.0, verdict.service_is_ready), "operator_verdict not available"
    # No episode yet: refused, and it cannot count later. The first call after discovery can lose its answer (the
    # server not yet matched with the client's response reader); a refused verdict changes nothing, so it is sent
    # again until one answer comes (the later verdicts, which end episodes, are sent once).
    from coda_engine.ros.spin import call_spinning

    early = call_spinning(rclpy_node, verdict, SetBool.Request(data=True), timeout=20.0)
    assert early is not None, "operator_verdict did not answer"
    assert not early.success and "no episode is running" in early.message
    for seed, says in ((41, False), (42, True)):
        scene = generate_seeded("reach", seed, SceneParams())
        before = len(sent)
        pending = probe.start_episode(scene)
        # the operator speaks a few commands into the control loop (homing sends commands too)
        assert probe.spin(30.0, lambda n=before + 25: len(sent) >= n), "the bridge sent no commands"
        answer = verdict.call_async(SetBool.Request(data=says))
        assert probe.spin(10.0, answer.done) and answer.result().success
        assert probe.spin(30.0, pending.done), "the verdict did not end the episode"
        response = pending.result().result
        assert response.accepted, response.error
        result = response.result
        assert result.status == result.STATUS_COMPLETED, result.status_detail
        assert result.success is says, f"operator said {says}, result says {result.success}"
        assert 0 < result.length < get_family("reach").max_steps, "the verdict should end the episode early"


# ---------------------------------------------------------------- e-stop transitions on safety_events
TRANSITIONS = ("estop", "estop_release_refused", "estop_released", "rehoming", "home", "rehome_failed")
"""The e-stop's transitions (``coda_engine.real.safety.ESTOP_TRANSITIONS``)."""
TRANSITION_QUIET_S = 6.0
"""``safety.estop_release_quiet_s`` of the transition test: a reset_estop sent right after a stop signal is refused
unless this machine stalls between two of the probe's calls for longer than this."""


def drive_away_from_home(probe: Probe, distance: float = 0.1, timeout: float = 30.0) -> None:
    """Send live commands (10 Hz) until a joint is ``distance`` rad from home."""
    deadline = time.monotonic() + timeout
    while np.max(np.abs(probe.q - HOME)) < distance:
        assert time.monotonic() < deadline, f"live commands did not move the arm {distance} rad from home"
        probe.command(dx=0.02, dy=0.02)
        probe.spin(0.1)


def release_when_quiet(probe: Probe, timeout: float = 60.0) -> tuple[list[Any], Any]:
    """Call ``reset_estop`` until it releases, after each refusal waiting as long as its answer says is left.

    Returns the refused answers and the release's answer.
    """
    refused: list[Any] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = probe.call(probe.reset)
        if answer.success:
            return refused, answer
        refused.append(answer)
        left = re.search(r"\(([0-9.]+) s left\)", answer.message)
        probe.spin(float(left.group(1)) + 0.05 if left else 0.2)
    raise AssertionError(f"reset_estop did not release within {timeout} s: {[a.message for a in refused]}")


def stamp_s(event: Any) -> float:
    return event.header.stamp.sec + 1e-9 * event.header.stamp.nanosec


def peak_joint_speed(stamped: list[tuple[float, np.ndarray]], start: float, end: float,
                     window: float = 0.25) -> np.ndarray:
    """Per joint, the largest mean speed over ``window`` s of the states stamped between ``start`` and ``end``.

    From the states' own stamps (when the arm was there), not from when they arrived, so a loaded machine that
    delivers them late or in bursts changes nothing.
    """
    states = [(t, q) for t, q in stamped if start <= t <= end]
    peak = np.zeros(7)
    for i, (t0, q0) in enumerate(states):
        later = [(t, q) for t, q in states[i + 1:] if t - t0 >= window]
        if later:
            t1, q1 = later[0]
            peak = np.maximum(peak, np.abs(q1 - q0) / (t1 - t0))
    return peak


def transitions(events: list[Any]) -> list[str]:
    return [e.kind for e in events if e.kind in TRANSITIONS]


def test_each_estop_transition_is_published_in_order(stand_in_robot: Any, start_process: Any,
                                                     rclpy_node: Any) -> None:
    """Latch, refused releases, release, re-homing, home; then a re-home that fails (the arm's stream stops)."""
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    from std_msgs.msg import Bool

    from coda_engine.ros.spin import call_spinning

    start_arm(start_process)
    start_bridge(start_process, stand_in_robot(estop_release_quiet_s=TRANSITION_QUIET_S))
    probe = Probe(rclpy_node)
    assert probe.spin(20.0, lambda: probe.q is not None and probe.commands.get_subscription_count() > 0)
    drive_away_from_home(probe, distance=0.2)
    first = len(probe.events)
    # latched over the topic; a release while the topic still says stop is refused, and says so
    probe.estop_topic.publish(Bool(data=True))
    probe.wait_for_event("estop", timeout=20.0, detail="estop topic")
    answers = [probe.call(probe.reset)]
    assert not answers[0].success and "latest message is true" in answers[0].message, answers[0].message
    # the stop button comes up: refused until every stop signal was quiet long enough, with the time left
    probe.estop_topic.publish(Bool(data=False))
    while "latest message is true" in answers[-1].message:  # until the bridge has taken the false
        probe.spin(0.2)
        answers.append(probe.call(probe.reset))
    quiet = answers[-1]
    assert not quiet.success and "must be quiet for 6 s" in quiet.message and " s left)" in quiet.message, quiet.message
    refused, answer = release_when_quiet(probe)
    answers += refused
    assert answer.success and "re-homing" in answer.message and "latched (estop topic)" in answer.message
    probe.wait_for_event("home", timeout=60.0)
    assert probe.spin(10.0, lambda: np.max(np.abs(probe.q - HOME)) < 0.03), "the arm is not home"
    events = probe.events[first:]
    kinds = transitions(events)
    assert kinds == ["estop", *["estop_release_refused"] * len(answers), "estop_released", "rehoming", "home"], kinds
    # each refused call is its own event, saying what its answer said
    refusals = [e for e in events if e.kind == "estop_release_refused"]
    assert [e.detail for e in refusals] == [f"reset_estop refused: {a.message}" for a in answers]
    assert all(e.holding for e in refusals)
    (released,) = [e for e in events if e.kind == "estop_released"]
    assert "latched (estop topic)" in released.detail and "not known to the service" in released.detail
    assert not any(e.holding for e in events if e.kind in ("estop_released", "rehoming", "home"))
    assert all(e.robot_id == NS and e.episode_id == "" for e in events)
    # the re-home ran at reduced speed: rehome_speed_fraction (0.1) of each joint's velocity limit, where the move
    # home before an episode takes twice that (HOME_SPEED_FRACTION); a 25% margin for the stand-in's tracking
    from coda_engine.real.episode import HOME_SPEED_FRACTION
    from coda_engine.real.robot import RobotConfig

    robot = RobotConfig.load(ROBOT_FILE)  # the test's file changes only estop_release_quiet_s
    cap = robot.safety.rehome_speed_fraction * np.asarray(robot.safety.max_joint_velocity)
    assert robot.safety.rehome_speed_fraction * 1.25 < HOME_SPEED_FRACTION  # the check tells the two apart
    (rehoming,) = [e for e in events if e.kind == "rehoming"]
    (home,) = [e for e in events if e.kind == "home"]
    peak = peak_joint_speed(probe.stamped, stamp_s(rehoming), stamp_s(home))
    assert peak.max() > 0.25 * cap.max(), f"the arm hardly moved while re-homing: {peak}"
    assert (peak <= 1.25 * cap).all(), f"re-homed faster than rehome_speed_fraction allows: {peak} > {cap}"
    # commands are taken again; then a stop over the service, and the arm's joint stream goes silent (the stand-in
    # drops every message): the release is accepted, the re-home fails on the state watchdog, latched again
    drive_away_from_home(probe)
    second = len(probe.events)
    assert probe.call(probe.estop).success
    probe.wait_for_event("estop", timeout=20.0, detail="estop service called")
    client = rclpy_node.create_client(SetParameters, f"/{NS}/fake_ros2_control_arm/set_parameters")
    assert probe.spin(10.0, client.service_is_ready)
    value = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=1.0)
    answer = call_spinning(rclpy_node, client, SetParameters.Request(parameters=[Parameter(name="drop_rate",
                                                                                         value=value)]))
    assert answer is not None and answer.results[0].successful
    refused, answer = release_when_quiet(probe)
    assert answer.success and "latched (estop service called)" in answer.message, answer.message
    probe.wait_for_event("rehome_failed", timeout=60.0)
    assert probe.spin(20.0, lambda: transitions(probe.events[second:])[-1:] == ["estop"]), "not latched again"
    events = probe.events[second:]
    kinds = transitions(events)
    assert kinds == ["estop", *["estop_release_refused"] * len(refused), "estop_released", "rehoming",
                     "rehome_failed", "estop"], kinds
    at = [e.kind for e in events]
    watchdog = at.index("watchdog", at.index("rehoming"))  # what stopped the re-home, reported before the failure
    assert watchdog < at.index("rehome_failed") and "joint_states silent" in events[watchdog].detail
    failed = events[at.index("rehome_failed")]
    assert failed.holding and "re-home after the e-stop release failed" in failed.detail
    assert "joint_states silent" in failed.detail
    latched_again = events[-1]
    assert latched_again.kind == "estop" and "re-home after the release failed" in latched_again.detail
    # one arm's stamps strictly increase in the order the events came: (robot, stamp, kind) names each once
    stamps = [e.header.stamp.sec * 10**9 + e.header.stamp.nanosec for e in probe.events]
    assert stamps == sorted(set(stamps)), stamps
