# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The stand-in arm: fault injection (pure), and ``fake_ros2_control_arm`` as a process driven over DDS."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from coda_engine.real.faults import COUNTERS, DelayLine, FaultConfig, FaultConfigError, FaultInjector
from coda_engine.sim import panda
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams


# ---------------------------------------------------------------- faults (no ROS)
@pytest.mark.parametrize(
    "field,value",
    [
        ("latency_s", -0.1),
        ("jitter_s", math.nan),
        ("joint_noise", 11.0),
        ("drop_rate", 1.5),
        ("reject_rate", -0.01),
        ("seed", -1),
        ("seed", 1.5),
    ],
)
def test_fault_config_rejects_bad_values_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(FaultConfigError, match=f"FaultConfig.{field}="):
        FaultConfig(**{field: value})


def test_fault_config_round_trips_and_names_unknown_fields() -> None:
    config = FaultConfig(latency_s=0.1, drop_rate=0.2, seed=4)
    assert FaultConfig.from_dict(config.to_dict()) == config
    with pytest.raises(FaultConfigError, match="latncy_s"):
        FaultConfig.from_dict({"latncy_s": 0.1})


def test_injector_draws_reproducible_faults_at_the_configured_rates() -> None:
    config = FaultConfig(latency_s=0.05, jitter_s=0.02, joint_noise=0.01, drop_rate=0.3, reject_rate=0.6, seed=7)
    a, b = FaultInjector(config), FaultInjector(config)
    n = 4000
    drops = [a.drop("states") for _ in range(n)]
    assert drops == [b.drop("states") for _ in range(n)]  # same seed, same faults
    assert abs(np.mean(drops) - 0.3) < 0.03
    assert abs(np.mean([a.reject() for _ in range(n)]) - 0.6) < 0.03
    delays = np.array([a.delay("commands") for _ in range(n)])
    assert delays.min() >= 0.05 and delays.max() <= 0.07 and abs(delays.mean() - 0.06) < 0.002
    q = np.zeros(9)
    noise = np.array([a.noisy(q) for _ in range(n)])
    assert abs(noise.std() - 0.01) < 0.001 and not q.any()
    counters = a.snapshot()
    assert set(COUNTERS) <= set(counters)
    assert counters["dropped_states"] == sum(drops) and counters["delayed_commands"] == n
    assert counters["noisy_states"] == n and counters["rejected"] > 0 and counters["dropped_commands"] == 0
    # no faults configured: nothing drawn, nothing counted
    clean = FaultInjector()
    assert not any(clean.drop() or clean.reject() for _ in range(100)) and clean.delay() == 0.0
    assert np.array_equal(clean.noisy(np.ones(3)), np.ones(3))
    assert not any(clean.snapshot().values())
    # a new seed re-seeds; the same seed keeps the stream and the counters
    a.configure(dataclass_replace(config, drop_rate=1.0))
    assert a.drop() and a.snapshot()["dropped_states"] == sum(drops) + 1
    c = FaultInjector(config)
    c.configure(dataclass_replace(config, seed=8))
    d = FaultInjector(dataclass_replace(config, seed=8))
    assert [c.drop() for _ in range(50)] == [d.drop() for _ in range(50)]


def dataclass_replace(config: FaultConfig, **changes: Any) -> FaultConfig:
    return FaultConfig.from_dict({**config.to_dict(), **changes})


def test_delay_line_keeps_order_per_stream_and_never_blocks_the_caller() -> None:
    errors: list[BaseException] = []
    line = DelayLine(on_error=errors.append)
    seen: list[tuple[str, int, float]] = []
    lock = threading.Lock()

    def record(stream: str, i: int) -> None:
        with lock:
            seen.append((stream, i, time.monotonic()))

    try:
        start = time.monotonic()
        line.submit(0.0, lambda: record("now", 0))  # immediate, in this thread
        assert seen and seen[0][:2] == ("now", 0)
        line.submit(60.0, lambda: record("late", 0), stream="late")  # a submit that blocked would wait a minute
        rng = np.random.default_rng(0)
        for i in range(20):
            line.submit(0.1 + float(rng.uniform(0, 0.1)), lambda i=i: record("a", i), stream="a")  # jittered
            line.submit(0.05, lambda i=i: record("b", i), stream="b")
        line.submit(0.0, lambda: record("a", 99), stream="a")  # zero delay still waits for the earlier ones
        line.submit(0.01, lambda: 1 / 0)
        assert line.pending() and not any(s == "late" for s, _, _ in seen), "submit waited for its callback"
        deadline = time.monotonic() + 60.0  # a condition wait: all 41 callbacks of "a" and "b" ran, and the error
        while time.monotonic() < deadline and not (len([s for s, _, _ in seen if s in "ab"]) == 41 and errors):
            time.sleep(0.01)
        order = {s: [i for t, i, _ in seen if t == s] for s in ("a", "b")}
        assert order["a"] == [*range(20), 99] and order["b"] == list(range(20))
        first_a = min(t for s, _, t in seen if s == "a")
        assert first_a - start >= 0.1
        assert len(errors) == 1 and isinstance(errors[0], ZeroDivisionError)
    finally:
        line.close()
    line.submit(0.1, lambda: record("late", 0))  # after close: discarded, not queued for later
    assert line.pending() == 0 and not any(s == "late" for s, _, _ in seen)


# ---------------------------------------------------------------- the node over DDS
NS = "fake_t"
CUSTOM_ARM = [f"fr3_joint{i}" for i in range(1, 8)]
CUSTOM_FINGERS = ["fr3_finger_joint1", "fr3_finger_joint2"]


STATE_PERIOD_S = 1.0 / 50.0
"""The stand-in's joint_states period at its default ``state_rate_hz`` (50)."""
WAIT_S = 60.0
"""Deadline of a condition wait: only reached when what is awaited never comes (a generous bound, not a rate)."""


def stamp_s(msg: Any) -> float:
    """Return the header stamp of ``msg`` in seconds."""
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


class Probe:
    """The driver's client side: joint states, perception, camera, ~/faults, the node's log in; commands out."""

    def __init__(self, node: Any) -> None:
        """Subscribe and create publishers on ``node``."""
        from rcl_interfaces.msg import Log
        from rcl_interfaces.srv import SetParameters
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import Float64MultiArray, String
        from trajectory_msgs.msg import JointTrajectory

        from coda_msgs.msg import ObjectStates, SceneSpec

        self.node = node
        self.states: list[tuple[float, Any]] = []
        self.objects: list[Any] = []
        self.images: list[Any] = []
        self.faults: list[dict] = []
        self.states_at_faults: list[int] = []
        """For each ~/faults message, the number of joint states received before it."""
        self.log: list[str] = []
        """The stand-in's log lines (from /rosout)."""
        node.create_subscription(JointState, f"/{NS}/joint_states", self._on_state, 100)
        node.create_subscription(ObjectStates, f"/{NS}/object_states", self.objects.append, 10)
        node.create_subscription(Image, f"/{NS}/camera/image_raw", self.images.append, 2)
        node.create_subscription(String, f"/{NS}/fake_ros2_control_arm/faults", self._on_faults, 10)
        node.create_subscription(
            Log, "/rosout", lambda m: self.log.append(m.msg) if m.name.endswith("fake_ros2_control_arm") else None, 100
        )
        self.trajectory = node.create_publisher(
            JointTrajectory, f"/{NS}/joint_trajectory_controller/joint_trajectory", 10
        )
        self.gripper = node.create_publisher(Float64MultiArray, f"/{NS}/gripper_controller/commands", 10)
        self.scene = node.create_publisher(SceneSpec, f"/{NS}/scene_request", 2)
        self.parameters = node.create_client(SetParameters, f"/{NS}/fake_ros2_control_arm/set_parameters")

    def _on_state(self, msg: Any) -> None:
        self.states.append((time.time(), msg))

    def _on_faults(self, msg: Any) -> None:
        self.states_at_faults.append(len(self.states))
        self.faults.append(json.loads(msg.data))

    def spin(self, seconds: float, done: Any = None) -> bool:
        from coda_engine.ros.spin import spin_until

        if done is None:
            spin_until(self.node, lambda: False, seconds)
            return True
        return spin_until(self.node, done, seconds)

    @property
    def q(self) -> np.ndarray:
        return np.array(self.states[-1][1].position)

    def next_states(self, count: int) -> list[Any]:
        """Return the next ``count`` joint states (a condition wait: until they arrived)."""
        before = len(self.states)
        assert self.spin(WAIT_S, lambda: len(self.states) >= before + count), f"fewer than {count} joint states"
        return [m for _, m in self.states[before:before + count]]

    def period(self, count: int = 60) -> float:
        """Return the median spacing of the stamps of the next ``count`` joint states: the stand-in's period.

        The stamps are the node's measurement times, so this probe's delivery delays and its own share of the CPU do
        not enter; a loaded machine that makes some ticks late moves a few spacings (a late tick lengthens one and
        shortens the next) but not the median. A stand-in publishing at 5 Hz gives 0.2 s, one at 100 Hz 0.01 s: both
        fall far outside the 10 % band around 1/50 s the tests allow.
        """
        stamps = np.array([stamp_s(m) for m in self.next_states(count)])
        return float(np.median(np.diff(stamps)))

    def window(self, faults: int = 3) -> tuple[dict, dict, int]:
        """Counters of the next ~/faults message and of the ``faults``-th after it; joint states received between.

        The node counts each measured joint state as published or dropped; the number received here between the
        two ~/faults messages is what went out on the wire (to a few messages: the two topics are delivered
        independently).
        """
        start = len(self.faults)
        assert self.spin(WAIT_S, lambda: len(self.faults) > start + faults), "no ~/faults status"
        first, last = start, start + faults
        received = self.states_at_faults[last] - self.states_at_faults[first]
        return self.faults[first]["counters"], self.faults[last]["counters"], received

    def settled(self) -> np.ndarray:
        """Wait until the arm is still (joint velocities below 1 mrad/s); return its arm joint positions."""
        still = lambda: bool(np.max(np.abs(self.states[-1][1].velocity[:7])) < 1e-3)  # noqa: E731
        assert self.spin(WAIT_S, still), f"the arm keeps moving: {self.states[-1][1].velocity[:7]}"
        return self.q[:7]

    def counted(self, key: str, value: int) -> dict:
        """Wait until a ~/faults message has counter ``key`` at ``value``; return its counters."""
        done = lambda: bool(self.faults) and self.faults[-1]["counters"][key] >= value  # noqa: E731
        assert self.spin(WAIT_S, done), f"{key} stayed at {self.faults[-1]['counters'][key] if self.faults else '?'}"
        counters = self.faults[-1]["counters"]
        assert counters[key] == value, (key, counters[key], value)
        return counters

    def logged(self, text: str) -> str:
        """Wait until the stand-in logs a line containing ``text``; return it."""
        assert self.spin(WAIT_S, lambda: any(text in line for line in self.log)), f"no log line with {text!r}"
        return next(line for line in self.log if text in line)

    def send(self, names: list[str], *points: list[float]) -> None:
        from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

        self.trajectory.publish(
            JointTrajectory(joint_names=names, points=[JointTrajectoryPoint(positions=p) for p in points])
        )

    def motion_delay(self, names: list[str], joint: int = 0, step: float = 0.2) -> tuple[float, float]:
        """Send joint ``joint`` by ``step``; return (s until a joint state shows it moving, final error rad)."""
        start = self.settled()
        target = start.copy()
        target[joint] += step
        sent = time.time()
        count = len(self.states)
        self.send(names, target.tolist())
        moved = lambda: any(abs(m.position[joint] - start[joint]) > 0.01 for _, m in self.states[count:])  # noqa: E731
        assert self.spin(WAIT_S, moved), "the command never moved the arm"
        delay = next(t for t, m in self.states[count:] if abs(m.position[joint] - start[joint]) > 0.01) - sent
        self.spin(WAIT_S, lambda: abs(self.q[joint] - target[joint]) < 0.01)
        return delay, float(abs(self.q[joint] - target[joint]))

    def set(self, **values: Any) -> Any:
        """Set parameters on the node; return the results."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        from coda_engine.ros.spin import call_spinning

        assert self.spin(WAIT_S, self.parameters.service_is_ready), "set_parameters not available"
        request = SetParameters.Request(
            parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in values.items()]
        )
        answer = call_spinning(self.node, self.parameters, request)
        assert answer is not None, "set_parameters did not answer"
        return answer.results

    def counters(self) -> dict:
        """Counters of the next ~/faults message."""
        count = len(self.faults)
        assert self.spin(WAIT_S, lambda: len(self.faults) > count), "no ~/faults status"
        return self.faults[-1]["counters"]


def start_arm(start_process: Any, *params: str) -> Any:
    args = [arg for p in params for arg in ("-p", p)]
    return start_process(
        [sys.executable, "-m", "coda_engine.ros.fake_arm_node", "--ros-args", "-r", f"__ns:=/{NS}", *args]
    )


@pytest.mark.ros
def test_fake_arm_speaks_the_ros2_control_wire_protocol(rclpy_node: Any, start_process: Any) -> None:
    from coda_engine.ros.convert import dict_to_msg
    from coda_engine.ros.fake_arm_node import CHUNK_HZ
    from coda_engine.ros.images import msg_to_image
    from coda_msgs.msg import SceneSpec

    proc = start_arm(start_process, "initial_family:=reach", "initial_seed:=3")
    probe = Probe(rclpy_node)
    assert probe.spin(WAIT_S, lambda: len(probe.states) > 5 and probe.objects and probe.images), "no output"
    period = probe.period()
    print(f"\njoint_states every {period * 1000:.1f} ms by their stamps (configured 50 Hz: 20 ms)")
    assert STATE_PERIOD_S * 0.9 <= period <= STATE_PERIOD_S * 1.1
    names = list(probe.states[-1][1].name)
    assert names == [*panda.ARM_JOINTS, *panda.FINGER_JOINTS]
    assert np.allclose(probe.q[:7], panda.HOME_QPOS, atol=0.02)
    initial = generate_seeded("reach", 3, SceneParams())
    assert [o.name for o in probe.objects[-1].objects] == [o.name for o in initial.objects]
    assert probe.objects[-1].scene_id == initial.scene_id and probe.objects[-1].header.frame_id == "base"
    frame = msg_to_image(probe.images[-1])
    assert frame.shape == (64, 64, 3) and frame.std() > 1.0
    # the physics keeps pace with the wall clock: between two ~/faults messages, simulated plus skipped time is the
    # wall time the node advanced over (to a control chunk; a stalled CPU makes the arm skip, never fall behind)
    probe.counters()
    first, wall0 = probe.faults[-1], time.monotonic()
    probe.spin(2.0)
    probe.counters()
    last, wall1 = probe.faults[-1], time.monotonic()
    sim, skip, wall = (last[k] - first[k] for k in ("sim_time_s", "skipped_s", "wall_time_s"))
    print(f"simulated {sim:.2f} s (skipped {skip:.2f} s) in {wall:.2f} s of the node's wall clock")
    assert abs(sim + skip - wall) <= 1.0 / CHUNK_HZ + 0.005, (sim, skip, wall)
    assert wall > 1.5 and abs(wall - (wall1 - wall0)) < 1.0  # the node's clock is the wall clock the probe sees

    # a trajectory (all 7 joints, two points): the last point is the target, reached in real time
    start = probe.q[:7]
    target = start + np.array([0.25, 0.1, 0.0, 0.1, 0.0, -0.1, 0.2])
    sent = time.monotonic()
    probe.send(list(panda.ARM_JOINTS), (start + 0.5 * (target - start)).tolist(), target.tolist())
    assert probe.spin(WAIT_S, lambda: np.max(np.abs(probe.q[:7] - target)) < 0.01), f"{probe.q[:7]} vs {target}"
    print(f"7-joint move of up to 0.25 rad settled within 0.01 rad in {time.monotonic() - sent:.2f} s")
    delay, error = probe.motion_delay(list(panda.ARM_JOINTS))
    print(f"command-to-motion delay {delay * 1000:.0f} ms (no faults)")
    assert error < 0.01  # the delay is printed, not bounded: it is the machine's load as much as the arm's

    # bad trajectories are rejected, the arm stays, the node keeps running
    here = probe.settled()
    invalid = probe.counters()["invalid_commands"]
    joint1 = ["panda_joint1"]
    probe.send(["elbow"], [0.1])
    probe.send(joint1, [math.nan])
    probe.send(joint1, [9.0])
    probe.send(joint1)  # no points
    probe.send(["panda_joint1", "panda_joint2"], [0.1])  # length mismatch
    probe.gripper.publish(_grip(0.5))  # opening outside 0..0.08 m
    probe.counted("invalid_commands", invalid + 6)  # all six handled; an accepted one would now be moving the arm
    probe.next_states(10)
    assert np.max(np.abs(probe.q[:7] - here)) < 0.005, "a rejected command moved the arm"
    assert proc.poll() is None

    # the gripper closes on an opening command (no object between the fingers)
    probe.gripper.publish(_grip(0.0))
    assert probe.spin(WAIT_S, lambda: probe.q[7] + probe.q[8] < 0.005), f"fingers at {probe.q[7:]}"

    # scene_request: the scene's objects appear on perception, the arm keeps its posture
    scene = generate_seeded("pick_place", 12, SceneParams())
    posture = probe.q[:7]
    probe.scene.publish(dict_to_msg(SceneSpec, scene.to_dict()))
    assert probe.spin(WAIT_S, lambda: probe.objects[-1].scene_id == scene.scene_id), "scene not set up"
    assert [o.name for o in probe.objects[-1].objects] == [o.name for o in scene.objects]
    reported = {o.name: o.pose.position for o in probe.objects[-1].objects}
    for obj in scene.objects:
        p = reported[obj.name]
        assert np.allclose([p.x, p.y, p.z], obj.position, atol=0.02), obj.name
    probe.next_states(25)
    assert np.max(np.abs(probe.q[:7] - posture)) < 0.02, "loading a scene moved the arm"
    # a bad scene is refused; the loaded one stays
    broken = dict_to_msg(SceneSpec, scene.to_dict())
    broken.family, broken.scene_id = "juggle", "broken"
    probe.scene.publish(broken)
    assert "juggle" in probe.logged("scene_request 'broken' rejected")
    count = len(probe.objects)
    assert probe.spin(WAIT_S, lambda: len(probe.objects) > count + 2), "perception stopped"
    assert probe.objects[-1].scene_id == scene.scene_id and proc.poll() is None
    assert STATE_PERIOD_S * 0.9 <= probe.period() <= STATE_PERIOD_S * 1.1


def _grip(opening: float) -> Any:
    from std_msgs.msg import Float64MultiArray

    return Float64MultiArray(data=[opening])


@pytest.mark.ros
def test_fake_arm_injects_faults_set_at_runtime(rclpy_node: Any, start_process: Any) -> None:
    proc = start_arm(
        start_process,
        f"joint_names:=[{','.join(CUSTOM_ARM)}]",
        f"finger_joint_names:=[{','.join(CUSTOM_FINGERS)}]",
        "camera_rate_hz:=0.0",
        "perception_rate_hz:=5.0",
    )
    probe = Probe(rclpy_node)
    assert probe.spin(WAIT_S, lambda: len(probe.states) > 5), "no joint states"
    assert list(probe.states[-1][1].name) == CUSTOM_ARM + CUSTOM_FINGERS
    probe.send(["panda_joint1"], [0.1])  # the engine's names are unknown to this driver
    # baseline: the quicker of two moves (the first command after start-up may meet a machine still busy)
    delay0 = min(probe.motion_delay(CUSTOM_ARM, joint=1, step=step)[0] for step in (-0.2, 0.2))

    # clean baseline: every measured state goes out and arrives, a still arm reports still positions
    probe.settled()
    before, after, received = probe.window()
    ticks0 = sum(after[k] - before[k] for k in ("published_states", "dropped_states"))
    assert after["dropped_states"] == before["dropped_states"] and abs(received - ticks0) <= max(5, 0.1 * ticks0)
    still = np.array([m.position for m in probe.next_states(50)])
    assert still[:, :7].std(axis=0).max() < 1e-4

    # noise and drops: about half the measured states are dropped, the rest arrive (counted per measured state, so
    # the figure does not depend on how many states a loaded machine measured per second)
    assert all(r.successful for r in probe.set(joint_noise=0.01, drop_rate=0.5))
    before, after, received = probe.window()
    dropped, published = (after[k] - before[k] for k in ("dropped_states", "published_states"))
    noisy = np.array([m.position for m in probe.next_states(40)])
    noise = float(noisy[:, :7].std(axis=0).mean())
    print(
        f"\n{received} states received, {published} published, {dropped} dropped at drop_rate 0.5 (before: {ticks0} "
        f"measured and sent, none dropped); joint noise std {noise:.4f} rad (set 0.01)"
    )
    assert dropped + published > 40 and 0.3 < dropped / (dropped + published) < 0.7
    assert abs(received - published) <= max(5, 0.1 * published), "what the node counts as sent is not what arrives"
    assert 0.006 < noise < 0.014
    counters = probe.counters()
    assert counters["dropped_states"] > 20 and counters["noisy_states"] > 20
    assert all(r.successful for r in probe.set(joint_noise=0.0, drop_rate=0.0))

    # latency: state age and command-to-motion delay grow
    assert all(r.successful for r in probe.set(latency_s=0.3))
    assert probe.spin(WAIT_S, lambda: probe.faults[-1]["faults"]["latency_s"] == 0.3)
    delay1, error = probe.motion_delay(CUSTOM_ARM)
    age = np.mean([t - stamp_s(m) for t, m in probe.states[-20:]])
    print(
        f"command-to-motion delay {delay0 * 1000:.0f} ms without latency, {delay1 * 1000:.0f} ms with latency_s 0.3"
        f"; joint_states age {age * 1000:.0f} ms"
    )
    # 0.3 s on the command and 0.3 s on the state: at least 0.6 s in all (lower bounds only: a busy machine adds
    # more, and subtracting the baseline delay would let a slow baseline fail the test)
    assert delay1 > 0.55 and error < 0.01
    assert age > 0.28
    assert all(r.successful for r in probe.set(latency_s=0.0))

    # the controller rejects every trajectory: nothing executes, every one is counted
    assert all(r.successful for r in probe.set(reject_rate=1.0))
    assert probe.spin(WAIT_S, lambda: probe.faults[-1]["faults"]["reject_rate"] == 1.0)
    before = probe.counters()
    here = probe.settled()
    for _ in range(5):
        probe.send(CUSTOM_ARM, (here + 0.2).tolist())
    after = probe.counted("rejected", before["rejected"] + 5)  # all five handled
    probe.next_states(10)
    assert np.max(np.abs(probe.q[:7] - here)) < 0.005, "a rejected trajectory moved the arm"
    assert after["applied_commands"] == before["applied_commands"]
    assert probe.faults[-1]["faults"]["reject_rate"] == 1.0

    # bad settings and read-only parameters are refused with the reason; the node keeps running
    bad = probe.set(drop_rate=1.5)
    assert not bad[0].successful and "drop_rate" in bad[0].reason
    assert not probe.set(state_rate_hz=10.0)[0].successful
    assert probe.faults[-1]["faults"]["drop_rate"] == 0.0
    assert proc.poll() is None and STATE_PERIOD_S * 0.9 <= probe.period() <= STATE_PERIOD_S * 1.1


@pytest.mark.ros
@pytest.mark.parametrize(
    "param,expected",
    [
        ("joint_names:=[a,b,c]", "joint_names"),
        ("drop_rate:=2.0", "FaultConfig.drop_rate"),
        ("state_rate_hz:=0.0", "state_rate_hz"),
    ],
)
def test_fake_arm_refuses_bad_start_up_parameters(ros_domain: int, param: str, expected: str) -> None:
    cmd = [sys.executable, "-m", "coda_engine.ros.fake_arm_node", "--ros-args", "-r", f"__ns:=/{NS}", "-p", param]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert expected in done.stderr, done.stderr[-2000:]
