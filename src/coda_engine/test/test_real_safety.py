# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Safety layer, sim-first gate and robot files of real arms (pure: no ROS graph)."""

import copy
import dataclasses
import json
import math
import re
from pathlib import Path

import mujoco
import numpy as np
import pytest
import yaml

from coda_engine.real.robot import (
    ENGINE_ARM_JOINTS,
    PANDA_JOINT_LOWER,
    PANDA_JOINT_UPPER,
    GateConfig,
    JointOrder,
    RobotConfig,
    RobotConfigError,
    SafetyConfig,
    TopicNames,
    gripper_from_message,
    gripper_to_message,
)
from coda_engine.real.safety import KINDS, Intervention, SafetyLayer, gate_check
from coda_engine.sim import panda

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"
FAKE, EXAMPLE = ROBOTS / "panda_fake.yaml", ROBOTS / "panda_example.yaml"
RATE = 10.0
NOW = 100.0
Q = np.array(panda.HOME_QPOS)
TCP = np.array([0.45, 0.0, 0.3])


@pytest.fixture
def layer() -> SafetyLayer:
    return SafetyLayer(SafetyConfig(), RATE)


def command(layer: SafetyLayer, q_measured=Q, q_target=None, tcp_measured=TCP, tcp_target=None, now=NOW):
    q_target = Q + 0.05 if q_target is None else q_target
    tcp_target = TCP + np.array([0.03, -0.02, 0.01]) if tcp_target is None else tcp_target
    return layer.check_command(
        now,
        np.asarray(q_measured, float),
        np.asarray(q_target, float),
        np.asarray(tcp_measured, float),
        np.asarray(tcp_target, float),
    )


def with_value(base: np.ndarray, index: int, value: float) -> np.ndarray:
    out = np.array(base, dtype=float)
    out[index] = value
    return out


# ------------------------------------------------------------------------------------------ command checks
def test_valid_command_passes(layer):
    assert command(layer) is None
    # At the limits themselves (not beyond) the command still goes.
    cfg = layer.config
    q_edge = with_value(Q, 3, cfg.joint_upper[3])
    assert command(layer, q_measured=q_edge, q_target=q_edge) is None
    edge = np.array(cfg.workspace_high)
    assert command(layer, tcp_measured=edge - 0.01, tcp_target=edge) is None


NAN, INF = float("nan"), float("inf")
VIOLATIONS = {
    # name: (command arguments, kind, fragments the detail must contain)
    "step": (
        dict(tcp_target=TCP + np.array([0.0, 0.15, 0.0])),
        "max_step",
        ["0.150 m above max_step 0.100", "along y: +0.150"],
    ),
    "step_diagonal": (dict(tcp_target=TCP + np.array([0.07, -0.08, 0.03])), "max_step", ["0.110 m", "along y: -0.080"]),
    "workspace_z": (
        dict(tcp_measured=[0.45, 0.0, 0.58], tcp_target=[0.45, 0.0, 0.65]),
        "workspace",
        ["z=0.650 m above workspace high 0.600"],
    ),
    "workspace_x": (
        dict(tcp_measured=[0.18, 0.0, 0.3], tcp_target=[0.12, 0.0, 0.3]),
        "workspace",
        ["x=0.120 m below workspace low 0.150"],
    ),
    "workspace_two_axes": (
        dict(tcp_measured=[0.84, 0.49, 0.3], tcp_target=[0.86, 0.51, 0.3]),
        "workspace",
        ["x=0.860 m above", "y=0.510 m above workspace high 0.500"],
    ),
    "joint_upper": (
        dict(q_measured=with_value(Q, 3, -0.06), q_target=with_value(Q, 3, -0.05)),
        "joint_limit",
        ["panda_joint4: target -0.050 rad above upper limit -0.070"],
    ),
    "joint_lower": (
        dict(q_measured=with_value(Q, 5, -0.01), q_target=with_value(Q, 5, -0.05)),
        "joint_limit",
        ["panda_joint6: target -0.050 rad below lower limit -0.017"],
    ),
    "velocity": (
        dict(q_target=with_value(Q, 1, Q[1] + 0.3)),
        "velocity_limit",
        ["panda_joint2: 3.000 rad/s above velocity limit 2.175", "+0.300 rad at 10 Hz"],
    ),
    "velocity_wrist": (
        dict(q_target=with_value(Q, 6, Q[6] - 0.27)),
        "velocity_limit",
        ["panda_joint7: 2.700 rad/s above velocity limit 2.610"],
    ),
    "nan_tcp_target": (dict(tcp_target=with_value(TCP, 2, NAN)), "max_step", ["target tool point z=nan", "not finite"]),
    "inf_tcp_measured": (dict(tcp_measured=with_value(TCP, 0, INF)), "max_step", ["measured tool point x=inf"]),
    "nan_q_target": (
        dict(q_target=with_value(Q, 2, NAN)),
        "joint_limit",
        ["panda_joint3: target nan rad is not finite"],
    ),
    "nan_q_measured": (
        dict(q_measured=with_value(Q, 4, NAN)),
        "velocity_limit",
        ["panda_joint5: measured position nan rad is not finite"],
    ),
}


@pytest.mark.parametrize("name", list(VIOLATIONS))
def test_each_check_triggers(layer, name):
    args, kind, fragments = VIOLATIONS[name]
    got = command(layer, **args)
    assert isinstance(got, Intervention), name
    assert (got.kind, got.holding, got.stamp) == (kind, True, NOW)
    for fragment in fragments:
        assert fragment in got.detail, (fragment, got.detail)


def test_check_order_and_joint_names():
    layer = SafetyLayer(SafetyConfig(), RATE)
    # A command that violates every check is reported by the first one in the documented order.
    everything = dict(q_target=with_value(Q, 3, 1.0), tcp_target=[1.2, 0.0, 0.3])
    assert command(layer, **everything).kind == "max_step"
    assert command(layer, tcp_measured=[1.15, 0.0, 0.3], **everything).kind == "workspace"
    assert command(layer, q_target=with_value(Q, 3, 1.0)).kind == "joint_limit"
    layer.estop(NOW, "test")
    assert command(layer, **everything).kind == "estop"
    # Details use the driver's joint names when given.
    robot = RobotConfig.load(EXAMPLE)
    named = SafetyLayer(robot.safety, robot.control_rate_hz, joint_names=robot.joint_names)
    got = command(named, q_measured=with_value(Q, 5, 2.0), q_target=with_value(Q, 5, 2.0), tcp_target=TCP)
    assert got is None
    got = command(named, q_measured=with_value(Q, 3, -0.3), q_target=with_value(Q, 3, -0.24), tcp_target=TCP)
    assert got.kind == "joint_limit" and "fr3_joint4: target -0.240 rad above upper limit -0.252" in got.detail


def test_bad_shapes_and_rates_are_errors(layer):
    with pytest.raises(ValueError, match="q_target must have 7 values"):
        command(layer, q_target=np.zeros(6))
    with pytest.raises(ValueError, match="tcp_measured must have 3 values"):
        command(layer, tcp_measured=np.zeros(4))
    with pytest.raises(ValueError, match="control_rate_hz"):
        SafetyLayer(SafetyConfig(), 0.0)
    with pytest.raises(ValueError, match="joint_names must list 7"):
        SafetyLayer(SafetyConfig(), RATE, joint_names=("a", "b"))


# ------------------------------------------------------------------------------------------ e-stop
def _release(layer: SafetyLayer, now: float) -> None:
    """Release (after the quiet time) and finish the re-home: the arm takes commands again."""
    released, message = layer.release(now)
    assert released, message
    layer.rehomed()


def test_estop_latches_until_released(layer):
    assert not layer.latched and layer.latch_reason == ""
    assert layer.release(NOW) == (False, "e-stop was not latched")
    iv = layer.estop(NOW, "button on the teach pendant")
    assert (iv.kind, iv.holding, iv.stamp) == ("estop", True, NOW) and "teach pendant" in iv.detail
    assert layer.latched and layer.latch_reason == "button on the teach pendant"
    for t in range(20):  # every command is refused, however harmless, for as long as it is latched
        got = command(layer, q_target=Q, tcp_target=TCP, now=NOW + t)
        assert got.kind == "estop" and got.stamp == NOW + t and "button on the teach pendant" in got.detail
    layer.estop(NOW + 30, "second press")
    assert layer.latch_reason == "button on the teach pendant"  # the first reason stays
    _release(layer, NOW + 30 + layer.config.estop_release_quiet_s)
    assert layer.release(NOW + 60) == (False, "e-stop was not latched")
    assert not layer.latched and command(layer, now=NOW + 60) is None


def test_release_needs_quiet_signals_and_a_rehome(layer):
    quiet = layer.config.estop_release_quiet_s
    layer.estop(NOW, "estop service called")
    assert layer.latched_since == NOW
    released, message = layer.release(NOW + quiet / 4)  # a single call right after the stop: refused
    assert not released and f"must be quiet for {quiet:g} s" in message and layer.latched
    assert f"({quiet * 3 / 4:.2f} s left)" in message, message  # the answer says how long is left
    # the topic says stop and keeps saying it: every true restarts the quiet time, a latest true refuses outright
    assert layer.estop_signal(NOW + 1.0, True).kind == "estop"
    assert layer.estop_signal(NOW + 1.5, True).kind == "estop"
    released, message = layer.release(NOW + 100.0)
    assert not released and "latest message is true" in message
    assert layer.estop_signal(NOW + 100.0, False) is None and layer.latched  # false alone releases nothing
    released, message = layer.release(NOW + 100.0 + quiet / 2)  # quiet only since the false that ended the stop
    assert not released and "must be quiet" in message
    released, message = layer.release(NOW + 100.0 + quiet)
    assert released and "re-homing" in message and not layer.latched and layer.rehoming
    # how long it held, counted from the first latch (later stop signals do not move it), and why it latched
    assert f"released after {100.0 + quiet:.3f} s latched (estop service called)" in message, message
    assert layer.latched_since is None
    assert layer.release(NOW + 150.0) == (False, "e-stop was not latched (released already: the arm is re-homing)")
    # released, not home: only the re-home moves may go
    got = command(layer, q_target=Q, tcp_target=TCP, now=NOW + 200)
    assert got.kind == "estop" and "re-homing after the e-stop release" in got.detail
    assert layer.check_command(NOW + 200, Q, Q, TCP, TCP, rehome=True) is None
    layer.rehomed()
    assert not layer.rehoming and command(layer, q_target=Q, tcp_target=TCP, now=NOW + 200) is None
    # a stop during the re-home ends it: latched again, and the next release starts over
    layer.estop(NOW + 300, "again")
    _release(layer, NOW + 300 + quiet)
    layer.estop(NOW + 400, "during re-home")
    assert layer.latched and not layer.rehoming


# ------------------------------------------------------------------------------------------ watchdogs
def test_watchdog_state_stream(layer):
    got = layer.check_watchdog(NOW, None, None)
    assert got.kind == "watchdog" and "no joint state" in got.detail and got.holding
    assert layer.check_watchdog(NOW, NOW - 0.5, None) is None  # exactly at the limit: alive
    got = layer.check_watchdog(NOW, NOW - 0.6, None)
    assert got.kind == "watchdog" and "joint_states silent for 0.600 s (limit 0.500 s)" in got.detail
    got = layer.check_watchdog(NOW, NAN, None)
    assert got.kind == "watchdog" and "joint_states" in got.detail


def test_watchdog_policy_stream(layer):
    assert layer.check_watchdog(NOW, NOW - 0.1, NOW - 0.9) is None
    got = layer.check_watchdog(NOW, NOW - 0.1, NOW - 1.25)
    assert got.kind == "watchdog" and "policy silent for 1.250 s (limit 1.000 s)" in got.detail
    assert layer.check_watchdog(NOW, NOW - 0.1, None) is None  # no policy stream expected
    # A silent state stream is reported first: it is the one the hold itself depends on.
    assert "joint_states" in layer.check_watchdog(NOW, NOW - 2.0, NOW - 2.0).detail


def test_tracking_timeout(layer):
    off = with_value(Q, 1, Q[1] + 0.5)  # panda_joint2 0.5 rad from its command, limit 0.35 rad for 2 s
    times = NOW + np.arange(0, 3.0, 0.1)
    results = [layer.check_tracking(t, Q, off) for t in times]
    first = next(i for i, r in enumerate(results) if r is not None)
    assert math.isclose(times[first] - NOW, 2.0, abs_tol=1e-9)
    got = results[first]
    assert got.kind == "watchdog" and got.holding
    assert "panda_joint2 is 0.500 rad from its command (limit 0.350 rad) for 2.00 s" in got.detail
    assert all(r is not None for r in results[first:])
    # Back on track: the timer starts again from zero.
    assert layer.check_tracking(NOW + 3.0, Q, Q + 0.1) is None
    assert layer.check_tracking(NOW + 3.1, Q, off) is None
    assert layer.check_tracking(NOW + 5.0, Q, off) is None
    assert layer.check_tracking(NOW + 5.1, Q, off) is not None
    # A gap longer than the timeout between calls is not "continuously": start again.
    assert layer.check_tracking(NOW + 20.0, Q, off) is None
    # A release (after an e-stop) forgets the running timer too.
    layer.check_tracking(NOW + 21.0, Q, off)
    layer.estop(NOW + 21.0, "test")
    assert layer.release(NOW + 21.0 + layer.config.estop_release_quiet_s)[0]
    assert layer.check_tracking(NOW + 23.5, Q, off) is None


def test_tracking_non_finite(layer):
    got = layer.check_tracking(NOW, with_value(Q, 6, NAN), Q)
    assert got.kind == "watchdog" and "measured panda_joint7 = nan rad is not finite" in got.detail
    got = layer.check_tracking(NOW, Q, with_value(Q, 0, INF))
    assert got.kind == "watchdog" and "commanded panda_joint1 = inf" in got.detail


# ------------------------------------------------------------------------------------------ interventions
def test_intervention_matches_safety_event():
    from coda_msgs.msg import SafetyEvent

    constants = {getattr(SafetyEvent, n) for n in dir(SafetyEvent) if n.startswith("KIND_")}
    assert set(KINDS) == constants
    event = Intervention("workspace", "x too far", 3.0, holding=False).to_event("panda_fake_0", "ep-1")
    assert set(event) == set(SafetyEvent.get_fields_and_field_types()) - {"header"}
    assert event == {
        "robot_id": "panda_fake_0",
        "kind": "workspace",
        "detail": "x too far",
        "episode_id": "ep-1",
        "holding": False,
    }
    SafetyEvent(**event)  # the message accepts the fields as they are
    with pytest.raises(ValueError, match="not one of"):
        Intervention("collision", "?", 0.0)


# ------------------------------------------------------------------------------------------ sim-first gate
def write_eval(folder: Path, content) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "evaluation.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return folder


def test_gate_expert_and_missing_evaluation(tmp_path):
    assert gate_check("expert", None, GateConfig(allow_expert=True)) == ""
    assert "allow_expert is false" in gate_check("expert", None, GateConfig())
    assert gate_check("state_expert", None, GateConfig(allow_expert=True)) == ""  # a demonstrator: no checkpoint
    assert "demonstrator 'state_expert' may not drive" in gate_check("state_expert", None, GateConfig())
    assert "empty policy version" in gate_check("", tmp_path, GateConfig(min_sim_success=0.0))
    assert "no checkpoint folder" in gate_check("r001", None, GateConfig(min_sim_success=0.0))
    (tmp_path / "r001").mkdir()
    reason = gate_check("r001", tmp_path / "r001", GateConfig(min_sim_success=0.0))
    assert "no simulation evaluation" in reason and "evaluation.json" in reason


@pytest.mark.parametrize(
    ("rate", "threshold", "allowed"),
    [(0.45, 0.5, False), (0.5, 0.5, True), (0.9, 0.5, True), (0.0, 0.0, True), (0.59, 0.6, False), (1.0, 1.0, True)],
)
def test_gate_threshold(tmp_path, rate, threshold, allowed):
    folder = write_eval(tmp_path / "r003", {"version": "r003", "per_split": {"id": rate, "ood_pose": 0.1}})
    reason = gate_check("r003", folder, GateConfig(min_sim_success=threshold))
    assert (reason == "") is allowed
    if not allowed:
        assert f"success {rate:.1%}" in reason and f"below the gate {threshold:.1%}" in reason


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "no per_split.id"),
        ({"per_split": {"ood_pose": 0.9}}, "no per_split.id"),
        ({"per_split": {"id": "high"}}, "is not a success rate"),
        ({"per_split": {"id": 1.7}}, "is not a success rate"),
        ({"per_split": {"id": True}}, "is not a success rate"),
        ({"version": "r009", "per_split": {"id": 0.9}}, "evaluates version 'r009'"),
    ],
)
def test_gate_refuses_bad_files(tmp_path, content, fragment):
    folder = write_eval(tmp_path / "r004", content)
    reason = gate_check("r004", folder, GateConfig(min_sim_success=0.0))
    assert fragment in reason and "r004" in reason


# ------------------------------------------------------------------------------------------ robot files
def test_shipped_robot_files_load():
    fake, example = RobotConfig.load(FAKE), RobotConfig.load(EXAMPLE)
    assert fake.robot_id == "panda_fake_0"
    assert fake.joint_names == panda.ARM_JOINTS and fake.finger_joints == panda.FINGER_JOINTS
    assert fake.gate == GateConfig(min_sim_success=0.0, allow_expert=True)
    # the stand-in shares CPUs with the tests: a looser state watchdog than the default, otherwise the defaults
    assert fake.topics == TopicNames() and fake.safety == dataclasses.replace(SafetyConfig(), state_timeout_s=1.0)
    assert example.joint_names == tuple(f"fr3_joint{i}" for i in range(1, 8))
    assert example.gate.min_sim_success == 0.6 and not example.gate.allow_expert
    assert example.topics.joint_trajectory == "/fr3_arm_controller/joint_trajectory"
    # The example is more conservative than the stand-in on every limit.
    s, d = example.safety, fake.safety
    assert all(
        lo >= dlo and hi <= dhi
        for lo, hi, dlo, dhi in zip(s.workspace_low, s.workspace_high, d.workspace_low, d.workspace_high, strict=True)
    )
    assert all(v <= dv for v, dv in zip(s.max_joint_velocity, d.max_joint_velocity, strict=True))
    # The home posture is inside both files' joint limits.
    for robot in (fake, example):
        assert all(lo < q < hi for q, lo, hi in zip(Q, robot.safety.joint_lower, robot.safety.joint_upper, strict=True))
    for cfg in (fake, example):
        data = cfg.to_dict()
        assert RobotConfig.from_dict(yaml.safe_load(yaml.safe_dump(data))) == cfg


def test_joint_order_reads_any_driver_order():
    order = JointOrder(("a", "b", "c"))
    assert order.pick(["c", "x", "a", "b"], [3.0, 9.0, 1.0, 2.0]).tolist() == [1.0, 2.0, 3.0]
    first = order.indices(["c", "x", "a", "b"])
    assert order.indices(("c", "x", "a", "b")) is first  # the same list again: the cached index
    assert order.pick(["b", "a", "c"], [2.0, 1.0, 3.0]).tolist() == [1.0, 2.0, 3.0]  # a new order is re-indexed
    with pytest.raises(KeyError, match=r"lacks \['b'\]"):
        order.pick(["a", "c"], [1.0, 3.0])
    with pytest.raises(ValueError, match="3 names but 2 positions"):
        order.pick(["a", "b", "c"], [1.0, 2.0])


def test_gripper_sign_between_policy_and_message():
    fake = RobotConfig.load(FAKE)
    # the policy closes with +1; ArmCommand closes with < 0; the bridge turns the message back into an opening
    assert gripper_to_message(1.0) == -1.0 and gripper_from_message(gripper_to_message(0.3)) == pytest.approx(0.3)
    assert fake.opening(gripper_from_message(-1.0)) == 0.0
    assert fake.opening(gripper_from_message(1.0)) == pytest.approx(fake.max_finger_opening)


@pytest.mark.parametrize("path", [FAKE, EXAMPLE], ids=["fake", "example"])
def test_shipped_robot_files_comment_every_key(path):
    for line in path.read_text().splitlines():
        if re.match(r"\s*\w+:", line):
            assert "#" in line, line


def test_default_limits_are_the_engine_model():
    model = panda.base_model()
    assert panda.ARM_JOINTS == ENGINE_ARM_JOINTS
    ranges = np.array(
        [model.jnt_range[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)] for n in panda.ARM_JOINTS]
    )
    np.testing.assert_allclose(ranges[:, 0], PANDA_JOINT_LOWER, atol=1e-6)
    np.testing.assert_allclose(ranges[:, 1], PANDA_JOINT_UPPER, atol=1e-6)
    assert SafetyConfig().max_joint_velocity == (2.175,) * 4 + (2.61,) * 3


def _set(data: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if keys[-1].endswith("]"):
        name, index = keys[-1][:-1].split("[")
        node[name][int(index)] = value
    else:
        node[keys[-1]] = value


BAD_FIELDS = [
    # (dotted key, value or DELETE, fragment the error must contain)
    ("colour", "red", "unknown key(s) colour"),
    ("safety.max_stpe", 0.1, "unknown key(s) safety.max_stpe"),
    ("topics.camra", "x", "unknown key(s) topics.camra"),
    ("gate.threshold", 0.5, "unknown key(s) gate.threshold"),
    ("robot_id", "panda-1", "robot_id='panda-1'"),
    ("robot_id", None, "robot_id is missing"),
    ("joint_names", ["a", "b", "c", "d", "e", "f"], "joint_names=['a', 'b', 'c', 'd', 'e', 'f'] must list 7"),
    ("joint_names", "panda_joint1", "joint_names='panda_joint1' must be a list"),
    ("joint_names[2]", "panda_joint1", "name ['panda_joint1'] more than once"),
    ("joint_names[2]", 3, "joint_names[2]=3 must be a string"),
    ("finger_joints", ["f1"], "finger_joints=['f1'] must list 2"),
    ("base_frame", "", "base_frame=''"),
    ("control_rate_hz", 0, "control_rate_hz=0.0 must be a finite number > 0"),
    ("control_rate_hz", "fast", "control_rate_hz='fast' must be a number"),
    ("home_timeout_s", -1, "home_timeout_s=-1.0"),
    ("success_check", "camera", "success_check='camera' must be one of"),
    ("topics", "joint_states", "topics must be a mapping"),
    ("topics.camera", "camera image", "topics.camera='camera image' must be a ROS topic name"),
    ("topics.joint_states", 5, "topics.joint_states=5 must be a string"),
    ("safety.joint_lower", [-1.0] * 6, "safety.joint_lower=[-1.0, -1.0, -1.0, -1.0, -1.0, -1.0] must list 7"),
    ("safety.joint_lower[3]", "low", "safety.joint_lower[3]='low' must be a number"),
    ("safety.joint_lower[2]", 3.0, "safety.joint_lower[2]=3 must be below joint_upper[2]=2.897"),
    ("safety.joint_upper[0]", float("nan"), "safety.joint_upper[0]=nan must be a finite number"),
    ("safety.max_joint_velocity[0]", 0, "safety.max_joint_velocity[0]=0 must be > 0"),
    ("safety.workspace_low", [0.9, -0.5, 0.0], "safety.workspace_low x=0.9 must be below workspace_high x=0.85"),
    ("safety.workspace_high", [0.85, 0.5], "safety.workspace_high=[0.85, 0.5] must list 3"),
    ("safety.max_step", "1e-3", "write 1.0e-3"),
    ("safety.max_step", 0, "safety.max_step=0.0 must be a finite number > 0"),
    ("safety.state_timeout_s", -0.5, "safety.state_timeout_s=-0.5"),
    ("safety.policy_timeout_s", 0, "safety.policy_timeout_s=0.0"),
    ("safety.max_tracking_error", True, "safety.max_tracking_error=True must be a number"),
    ("safety.tracking_timeout_s", float("inf"), "safety.tracking_timeout_s=inf"),
    ("gate.min_sim_success", 1.5, "gate.min_sim_success=1.5 must be a number in [0, 1]"),
    ("gate.allow_expert", "yes", "gate.allow_expert='yes' must be true or false"),
]


@pytest.mark.parametrize(("dotted", "value", "fragment"), BAD_FIELDS, ids=[f"{d}={v!r}" for d, v, _ in BAD_FIELDS])
def test_bad_field_is_named(tmp_path, dotted, value, fragment):
    data = copy.deepcopy(yaml.safe_load(FAKE.read_text()))
    if value is None:
        del data[dotted]
    else:
        _set(data, dotted, value)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RobotConfigError) as info:
        RobotConfig.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert fragment in message, message


def test_unreadable_robot_files(tmp_path):
    with pytest.raises(RobotConfigError, match="cannot read the robot file"):
        RobotConfig.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("robot_id: [unclosed\n")
    with pytest.raises(RobotConfigError, match="not valid YAML"):
        RobotConfig.load(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(RobotConfigError, match="expected a mapping"):
        RobotConfig.load(bad)


def test_direct_construction_is_validated():
    with pytest.raises(RobotConfigError, match="max_step"):
        SafetyConfig(max_step=-1.0)
    robot = RobotConfig.load(FAKE)
    with pytest.raises(RobotConfigError, match="workspace_low z"):
        dataclasses.replace(robot.safety, workspace_low=(0.15, -0.5, 0.7))
    with pytest.raises(RobotConfigError, match="success_check"):
        dataclasses.replace(robot, success_check="vision")
    assert dataclasses.replace(robot.safety, max_step=0.05).max_step == 0.05
