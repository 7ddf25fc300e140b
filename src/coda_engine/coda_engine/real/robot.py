# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The robot file of a real arm: topic names, joint names, safety limits, frames and the sim-first gate.

One YAML file per arm (``config/robots/panda_fake.yaml`` for the stand-in arm, ``panda_example.yaml`` for a
Franka under ros2_control)::

    robot_id: panda_lab1
    joint_names: [fr3_joint1, ..., fr3_joint7]   # the driver's names, in the engine model's joint order
    finger_joints: [fr3_finger_joint1, fr3_finger_joint2]
    topics: {joint_trajectory: /fr3_arm_controller/joint_trajectory, ...}
    safety: {workspace_low: [0.25, -0.35, 0.01], ...}
    gate: {min_sim_success: 0.6}

Every key is optional except ``robot_id``, ``joint_names`` and ``finger_joints``; a missing key takes the
default of its dataclass field. :meth:`RobotConfig.load` names the file and the dotted field of any problem
(``panda.yaml: safety.joint_lower[3]=...``), unknown keys included. Pure module: no rclpy, no MuJoCo.
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import yaml

N_ARM_JOINTS = 7
"""Arm joints of the engine's kinematic model (the Panda)."""
N_FINGER_JOINTS = 2
"""Finger joints of its hand."""

ENGINE_ARM_JOINTS: tuple[str, ...] = tuple(f"panda_joint{i}" for i in range(1, N_ARM_JOINTS + 1))
"""The engine model's arm joint names (``coda_engine.sim.panda.ARM_JOINTS``, repeated here to stay MuJoCo-free)."""

# Joint position limits of the engine's Panda model (``jnt_range`` of ``coda_engine.sim.panda.base_model()``,
# the published Franka Panda limits rounded to 0.1 mrad inwards); a test checks they equal the model's.
PANDA_JOINT_LOWER: tuple[float, ...] = (-2.897, -1.7627, -2.897, -3.0717, -2.897, -0.0174, -2.897)
"""Lower joint position limits of the Panda, rad."""
PANDA_JOINT_UPPER: tuple[float, ...] = (2.897, 1.7627, 2.897, -0.0698, 2.897, 3.7524, 2.897)
"""Upper joint position limits of the Panda, rad."""
PANDA_MAX_JOINT_VELOCITY: tuple[float, ...] = (2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61)
"""Published joint velocity limits of the Panda, rad/s."""

SUCCESS_CHECKS = ("perception", "operator")
"""Allowed values of :attr:`RobotConfig.success_check`."""

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it (fast, and it refuses deep nesting itself), else the Python one."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_TOPIC = re.compile(r"(/|~/)?[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*")
_FRAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel = 2
_BRIEF.maxlist = _BRIEF.maxtuple = _BRIEF.maxdict = _BRIEF.maxset = 7
_BRIEF.maxstring = _BRIEF.maxother = 80
_BRIEF.maxlong = 40
MAX_FILE_BYTES = 16 * 2**20
"""Largest configuration file read (robot, fleet and suite files are kilobytes to a few megabytes)."""


def brief(value: object) -> str:
    """Return ``repr(value)`` bounded in length and depth, for error messages.

    A value read from someone else's file may be a megabyte of text or an alias bomb (a few lines of YAML that stand
    for billions of shared items): a plain ``repr`` of it takes minutes and gigabytes.
    """
    return _BRIEF.repr(value)


def read_yaml(path: Path, what: str, error: type[ValueError]) -> Any:
    """Parse a YAML file ({} when empty); raise ``error`` naming the file when it cannot be read or parsed.

    Refused with ``error``: an unreadable or too large file, bytes that are not UTF-8 text (named by offset), YAML
    that does not parse, and nesting too deep to build.
    """
    try:
        with open(path, "rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror or exc})") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise error(f"{path}: the {what} is larger than {MAX_FILE_BYTES // 2**20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{raw[exc.start]:02x} at offset {exc.start}"
        raise error(f"{path}: the {what} is not UTF-8 text ({where})") from None
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)  # SAFE_LOADER is a safe loader
    except yaml.YAMLError as exc:
        text = " ".join(str(exc).split())
        raise error(f"{path}: not valid YAML ({text[:300]}{'...' if len(text) > 300 else ''})") from None
    except RecursionError:
        raise error(f"{path}: the {what} is nested too deeply") from None
    return {} if data is None else data


class RobotConfigError(ValueError):
    """A robot configuration that cannot be used; the message names the source and the dotted field."""


@dataclass(frozen=True)
class TopicNames:
    """Topics of the arm, relative to the bridge's namespace (absolute names start with ``/``)."""

    joint_states: str = "joint_states"
    """``sensor_msgs/JointState`` published by the arm (its arm and finger joints)."""
    joint_trajectory: str = "joint_trajectory_controller/joint_trajectory"
    """``trajectory_msgs/JointTrajectory`` for the arm's joint trajectory controller (the last point is the target)."""
    gripper_command: str = "gripper_controller/commands"
    """``std_msgs/Float64MultiArray`` ``[finger opening in m]`` for the gripper controller."""
    camera: str = "camera/image_raw"
    """``sensor_msgs/Image`` (rgb8) of the cell camera."""
    object_poses: str = "object_states"
    """``coda_msgs/ObjectStates`` from perception: object poses by name in the base frame."""
    scene_request: str = "scene_request"
    """``coda_msgs/SceneSpec`` the bridge publishes at the start of an episode (set this scene up)."""

    def __post_init__(self) -> None:
        """Check that every name is a valid ROS topic name."""
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, str) or not _TOPIC.fullmatch(value):
                raise RobotConfigError(
                    f"{f.name}={brief(value)} must be a ROS topic name like joint_states or /ns/topic")


@dataclass(frozen=True)
class SafetyConfig:
    """Limits of the safety layer (:class:`coda_engine.real.safety.SafetyLayer`), always on."""

    joint_lower: tuple[float, ...] = PANDA_JOINT_LOWER
    """Lower joint position limit of each arm joint (7, engine order), rad; commands below are refused."""
    joint_upper: tuple[float, ...] = PANDA_JOINT_UPPER
    """Upper joint position limit of each arm joint (7, engine order), rad."""
    max_joint_velocity: tuple[float, ...] = PANDA_MAX_JOINT_VELOCITY
    """Largest joint speed a command may ask for (step to the target x control rate), rad/s, one per arm joint."""
    workspace_low: tuple[float, float, float] = (0.15, -0.5, 0.0)
    """Lower corner of the box (base frame, m) the commanded tool point must stay inside."""
    workspace_high: tuple[float, float, float] = (0.85, 0.5, 0.6)
    """Upper corner of that box, m."""
    max_step: float = 0.1
    """Largest distance between the measured and the commanded tool point, m."""
    state_timeout_s: float = 0.5
    """Watchdog: a joint state older than this holds the arm, s."""
    policy_timeout_s: float = 1.0
    """Watchdog: no command from the policy for this long holds the arm, s."""
    max_tracking_error: float = 0.35
    """Largest joint error to the last command (rad) tolerated for longer than :attr:`tracking_timeout_s`."""
    tracking_timeout_s: float = 2.0
    """How long the arm may stay more than :attr:`max_tracking_error` away from its command before holding, s."""
    estop_release_quiet_s: float = 2.0
    """``reset_estop`` releases the e-stop only after no stop signal for this long (no ``estop`` call, no true on
    the ``estop`` topic, whose latest message must also be false), s."""
    rehome_speed_fraction: float = 0.1
    """After a release the arm moves home at this fraction of each joint's velocity limit before any other
    command is accepted (half the speed of the move home that starts every episode)."""

    def __post_init__(self) -> None:
        """Check lengths, finiteness, ordering and signs."""
        for name in ("joint_lower", "joint_upper", "max_joint_velocity"):
            _check_numbers(name, getattr(self, name), N_ARM_JOINTS)
        for i, (lo, hi) in enumerate(zip(self.joint_lower, self.joint_upper, strict=True)):
            if not lo < hi:
                raise RobotConfigError(f"joint_lower[{i}]={lo:g} must be below joint_upper[{i}]={hi:g} (rad)")
        for i, v in enumerate(self.max_joint_velocity):
            if not v > 0:
                raise RobotConfigError(f"max_joint_velocity[{i}]={v:g} must be > 0 rad/s")
        for name in ("workspace_low", "workspace_high"):
            _check_numbers(name, getattr(self, name), 3)
        for axis, lo, hi in zip("xyz", self.workspace_low, self.workspace_high, strict=True):
            if not lo < hi:
                raise RobotConfigError(f"workspace_low {axis}={lo:g} must be below workspace_high {axis}={hi:g} (m)")
        for name in ("max_step", "state_timeout_s", "policy_timeout_s", "max_tracking_error", "tracking_timeout_s",
                     "estop_release_quiet_s"):
            _check_positive(name, getattr(self, name))
        if not (isinstance(self.rehome_speed_fraction, (int, float)) and 0 < self.rehome_speed_fraction <= 1):
            raise RobotConfigError(f"rehome_speed_fraction={brief(self.rehome_speed_fraction)} must be in (0, 1]")


@dataclass(frozen=True)
class GateConfig:
    """The sim-first gate: which policy versions may drive this arm."""

    min_sim_success: float = 0.5
    """Success rate on the held-out ``id`` suite in simulation a trained version needs (0..1)."""
    allow_expert: bool = False
    """Let the demonstrators (the scripted and the state expert, acting on perceived state) drive this arm."""

    def __post_init__(self) -> None:
        """Check the threshold's range and the flag's type."""
        value = self.min_sim_success
        if not _is_number(value) or not 0.0 <= value <= 1.0:
            raise RobotConfigError(f"min_sim_success={brief(value)} must be a number in [0, 1]")
        if not isinstance(self.allow_expert, bool):
            raise RobotConfigError(f"allow_expert={brief(self.allow_expert)} must be true or false")


@dataclass(frozen=True)
class RobotConfig:
    """Everything the bridge of one real arm needs to know about it."""

    robot_id: str
    """Name of the arm (its episodes' ``robot_id``; letters, digits, ``_``)."""
    joint_names: tuple[str, ...]
    """The driver's 7 arm joint names, in the engine model's order (``panda_joint1`` .. ``panda_joint7``)."""
    finger_joints: tuple[str, ...]
    """The driver's 2 finger joint names (the opening is their sum)."""
    base_frame: str = "base"
    """Frame of the object poses and of the workspace box (the arm's base)."""
    camera_frame: str = "camera"
    """Frame of the cell camera."""
    control_rate_hz: float = 10.0
    """Policy / command rate, Hz (the policy was trained at 10 Hz)."""
    max_finger_opening: float = 0.08
    """Finger opening of a fully open gripper, m."""
    success_check: str = "perception"
    """``perception`` (the family's success predicate on perceived poses) or ``operator`` (a person's verdict)."""
    operator_timeout_s: float = 60.0
    """How long an ``operator`` episode waits for the verdict after its last step, s."""
    scene_setup_timeout_s: float = 30.0
    """How long to wait for perception to report every object of the requested scene, s."""
    home_timeout_s: float = 10.0
    """How long moving to the home posture may take, s."""
    topics: TopicNames = field(default_factory=TopicNames)
    """Topic names of the arm's ROS interface."""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    """Limits of the safety layer."""
    gate: GateConfig = field(default_factory=GateConfig)
    """The sim-first gate."""

    def __post_init__(self) -> None:
        """Check names, counts, rates and timeouts."""
        if not isinstance(self.robot_id, str) or not _NAME.fullmatch(self.robot_id):
            raise RobotConfigError(f"robot_id={brief(self.robot_id)} must be a name (letters, digits, _)")
        for name, count in (("joint_names", N_ARM_JOINTS), ("finger_joints", N_FINGER_JOINTS)):
            names = getattr(self, name)
            if not isinstance(names, tuple) or len(names) != count:
                raise RobotConfigError(f"{name}={_show(names)} must list {count} joint names")
            for i, joint in enumerate(names):
                if not isinstance(joint, str) or not joint.strip():
                    raise RobotConfigError(f"{name}[{i}]={brief(joint)} must be a non-empty joint name")
        every = (*self.joint_names, *self.finger_joints)
        twice = sorted({j for j in every if every.count(j) > 1})
        if twice:
            raise RobotConfigError(f"joint_names/finger_joints name {twice} more than once")
        for name in ("base_frame", "camera_frame"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _FRAME.fullmatch(value):
                raise RobotConfigError(f"{name}={brief(value)} must be a tf frame id like base or fr3_link0")
        for name in (
            "control_rate_hz",
            "max_finger_opening",
            "operator_timeout_s",
            "scene_setup_timeout_s",
            "home_timeout_s",
        ):
            _check_positive(name, getattr(self, name))
        if self.success_check not in SUCCESS_CHECKS:
            raise RobotConfigError(f"success_check={brief(self.success_check)} must be one of {list(SUCCESS_CHECKS)}")
        for name, kind in (("topics", TopicNames), ("safety", SafetyConfig), ("gate", GateConfig)):
            if not isinstance(getattr(self, name), kind):
                raise RobotConfigError(f"{name} must be a {kind.__name__}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "robot config") -> RobotConfig:
        """Validate parsed YAML; :class:`RobotConfigError` names ``source`` and the dotted field of any problem."""
        if not isinstance(data, Mapping):
            raise RobotConfigError(f"{source}: expected a mapping with robot_id, joint_names, finger_joints, ...")
        sections = {"topics": TopicNames, "safety": SafetyConfig, "gate": GateConfig}
        values = _fields(cls, data, source, "", exclude=set(sections))
        for name, kind in sections.items():
            if name in data:
                values[name] = _section(kind, data[name], source, name)
        for required in ("robot_id", "joint_names", "finger_joints"):
            if required not in values:
                raise RobotConfigError(f"{source}: {required} is missing")
        try:
            return cls(**values)
        except RobotConfigError as exc:
            raise RobotConfigError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: Path) -> RobotConfig:
        """Read a robot YAML file; :class:`RobotConfigError` names the file and the field of any problem."""
        return cls.from_dict(read_yaml(Path(path), "robot file", RobotConfigError), str(path))

    def opening(self, gripper: float) -> float:
        """Finger opening (m) for a policy gripper command in [-1, 1] (-1 open, +1 closed), as in simulation."""
        return self.max_finger_opening * 0.5 * (1.0 - min(max(float(gripper), -1.0), 1.0))

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as it would be written in a robot file (``from_dict(to_dict())`` gives it back)."""
        return _plain(self)


def gripper_to_message(gripper: float) -> float:
    """Return ``coda_msgs/ArmCommand.gripper`` (< 0 closes) for a policy gripper command (+1 closes, as in sim)."""
    return -float(gripper)


def gripper_from_message(gripper: float) -> float:
    """Return the policy gripper command (+1 closes) of an ``ArmCommand.gripper`` (< 0 closes), the inverse."""
    return -float(gripper)


class JointOrder:
    """Picks a fixed list of joints out of ``sensor_msgs/JointState`` messages, whatever order the driver uses.

    ``pick(names, positions)`` returns the positions of :attr:`wanted`, in that order. The index is cached for the
    last name list (drivers repeat theirs), so a 50 Hz stream costs one tuple comparison per message.
    """

    def __init__(self, wanted: Sequence[str]) -> None:
        """``wanted``: the joints to read, in the order they are returned (e.g. arm joints 1..7 then fingers)."""
        self.wanted = tuple(wanted)
        self._names: tuple[str, ...] = ()
        self._index = np.zeros(0, dtype=np.int64)

    def indices(self, names: Sequence[str]) -> np.ndarray:
        """Index into ``names`` of each wanted joint; :class:`KeyError` listing the wanted joints ``names`` lacks."""
        key = tuple(names)
        if key != self._names:
            where = {name: i for i, name in enumerate(key)}  # a repeated name: the last one counts
            missing = [n for n in self.wanted if n not in where]
            if missing:
                raise KeyError(f"joint_states lacks {missing}")
            self._names, self._index = key, np.array([where[n] for n in self.wanted], dtype=np.int64)
        return self._index

    def pick(self, names: Sequence[str], positions: Any) -> np.ndarray:
        """Positions of the wanted joints; :class:`ValueError` on a name/position count mismatch, else as above."""
        if len(names) != len(positions):
            raise ValueError(f"joint_states has {len(names)} names but {len(positions)} positions")
        return np.asarray(positions, dtype=np.float64)[self.indices(names)]


# ---------------------------------------------------------------------------------------------- helpers
def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _show(value: object) -> str:
    return brief(list(value)) if isinstance(value, tuple) else brief(value)


def _check_numbers(name: str, values: object, count: int) -> None:
    if not isinstance(values, tuple) or len(values) != count:
        raise RobotConfigError(f"{name}={_show(values)} must list {count} numbers")
    for i, v in enumerate(values):
        if not _is_number(v):
            raise RobotConfigError(f"{name}[{i}]={brief(v)} must be a finite number")


def _check_positive(name: str, value: object) -> None:
    if not _is_number(value) or not value > 0:  # type: ignore[operator]
        raise RobotConfigError(f"{name}={brief(value)} must be a finite number > 0")


def _convert(value: Any, annotation: str, where: str) -> Any:
    """Turn a YAML value into the field's type (lists -> tuples, ints -> floats); name ``where`` on a type error."""
    if annotation == "str":
        if not isinstance(value, str):
            raise RobotConfigError(f"{where}={brief(value)} must be a string")
        return value
    if annotation == "bool":
        if not isinstance(value, bool):
            raise RobotConfigError(f"{where}={brief(value)} must be true or false")
        return value
    if annotation == "float":
        return _number(value, where)
    if annotation.startswith("tuple[str"):
        if not isinstance(value, list):
            raise RobotConfigError(f"{where}={brief(value)} must be a list of names")
        return tuple(_convert(v, "str", f"{where}[{i}]") for i, v in enumerate(value))
    if annotation.startswith("tuple[float"):
        if not isinstance(value, list):
            raise RobotConfigError(f"{where}={brief(value)} must be a list of numbers")
        return tuple(_number(v, f"{where}[{i}]") for i, v in enumerate(value))
    raise AssertionError(f"no conversion for {annotation}")  # a new field type without a rule here


def _number(value: Any, where: str) -> float:
    if isinstance(value, str):
        hint = " (YAML reads 1e-3 as text: write 1.0e-3)" if re.fullmatch(r"[-+]?\d+e[-+]?\d+", value) else ""
        raise RobotConfigError(f"{where}={brief(value)} must be a number{hint}")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise RobotConfigError(f"{where}={brief(value)} must be a number")
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        raise RobotConfigError(f"{where}={brief(value)} must be a finite number") from None


def _fields(
    kind: type, data: Mapping[str, Any], source: str, prefix: str, exclude: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Convert the keys of ``data`` that are fields of ``kind``; unknown keys are an error."""
    known = {f.name: f for f in fields(kind)}
    unknown = sorted(brief(k) if not isinstance(k, str) else k[:80] for k in data if k not in known)
    if unknown:
        keys = ", ".join(prefix + k for k in unknown)
        raise RobotConfigError(f"{source}: unknown key(s) {keys} (known: {', '.join(sorted(known))})")
    return {
        name: _convert(value, str(known[name].type), f"{source}: {prefix}{name}")
        for name, value in data.items()
        if name not in exclude
    }


def _section(kind: type, data: Any, source: str, name: str) -> Any:
    if not isinstance(data, Mapping):
        raise RobotConfigError(f"{source}: {name} must be a mapping of {kind.__name__} fields, got {brief(data)}")
    values = _fields(kind, data, source, f"{name}.")
    try:
        return kind(**values)
    except RobotConfigError as exc:
        raise RobotConfigError(f"{source}: {name}.{exc}") from None


def _plain(obj: Any) -> Any:
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple):
        return [_plain(v) for v in obj]
    return obj
