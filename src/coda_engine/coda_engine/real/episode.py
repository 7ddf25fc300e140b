# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""One episode on a real arm: the policy acts on perceived state, every command passes the safety layer.

:func:`run_real_episode` is what an ``arm_bridge`` runs for a ``RunEpisode`` goal. It talks to the arm only
through :class:`ArmIO` (the node implements it over ROS topics; tests can implement it over anything that
moves), so the whole procedure is testable without ROS:

1. **Scene set-up**: ask for the scene (``request_scene``: an operator or a reset mechanism arranges it; asked
   again every ``SCENE_REQUEST_REPEAT_S``) and wait until perception reports every object of the scene
   (``scene_setup_timeout_s``; else REJECTED).
2. **Home**: move to the home posture in small joint-space steps, each checked by the safety layer.
3. **Control loop** at ``control_rate_hz``: joint state -> forward kinematics (tool point, finger opening) +
   perceived object positions -> the engine's observation (same layout and stage tracking as simulation) ->
   policy action -> :class:`~coda_engine.sim.arm.EndEffectorCommander` (the simulated arm's action space and IK)
   -> safety checks -> joint trajectory + gripper command. Any intervention (limits, workspace, step size, a
   silent state stream or policy, the arm not following, e-stop) holds the measured position, is reported through
   ``record`` and ends the episode ABORTED with the intervention as the reason.
4. **Verdict**: success from the family's success predicate on perceived poses (``success_check: perception``)
   or from an operator (``operator``: a verdict may end the episode early; after the step limit the episode waits
   ``operator_timeout_s`` for one).

Results carry ``source = SOURCE_REAL`` and no privileged object states. Pure module: no rclpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from coda_engine.episodes import (
    SOURCE_REAL,
    STATUS_ABORTED,
    STATUS_COMPLETED,
    STATUS_REJECTED,
    ProgressFn,
    RecordedEpisode,
    RecordingConfig,
    trajectory_sample,
)
from coda_engine.real.robot import RobotConfig
from coda_engine.real.safety import Intervention, SafetyLayer
from coda_engine.sim import panda, stages
from coda_engine.sim.arm import ArmConfig, DlsIk, EndEffectorCommander
from coda_engine.sim.expert import ActionFn
from coda_engine.sim.families import WorldState, get_family
from coda_engine.sim.layout import LAYOUT, observation_template
from coda_engine.sim.scene import Scene

HOME_TOLERANCE = 0.03
"""Largest joint error (rad) at which the arm counts as home."""
HOME_SPEED_FRACTION = 0.2
"""Joint speed of the move home as a fraction of each joint's velocity limit."""
SCENE_REQUEST_REPEAT_S = 2.0
"""While the scene is not perceived, the request is sent again this often, s (set-ups must be idempotent)."""


@dataclass(frozen=True)
class JointReading:
    """The arm's latest joint state, in the engine model's joint order."""

    stamp: float
    """Time it was received, s (the :meth:`ArmIO.now` clock)."""
    q: np.ndarray
    """(7,) arm joint positions, rad."""
    opening: float
    """Finger opening (sum of both fingers), m."""


@dataclass(frozen=True)
class PoseReading:
    """The latest perception output."""

    stamp: float
    """Time it was received, s (the :meth:`ArmIO.now` clock)."""
    positions: dict[str, np.ndarray]
    """Position (3,) of every perceived object by name, base frame, m."""


class ArmIO(Protocol):
    """What an episode on a real arm reads from and sends to the arm (see the module docstring)."""

    def now(self) -> float:
        """Monotonic time, s."""

    def sleep_until(self, t: float) -> None:
        """Return at time ``t`` (at once when it has passed)."""

    def joints(self) -> JointReading | None:
        """Latest joint state, or None before the first one."""

    def objects(self) -> PoseReading | None:
        """Latest perceived object poses, or None before the first."""

    def camera(self) -> np.ndarray | None:
        """Latest camera frame (H, W, 3) uint8, or None without a camera."""

    def send(self, q: np.ndarray, opening: float, duration: float) -> None:
        """Command arm joints ``q`` (7, rad, engine order) reached after ``duration`` s and finger ``opening`` (m)."""

    def request_scene(self, scene: Scene) -> None:
        """Ask for ``scene`` to be set up in the cell."""

    def stop_reason(self) -> str:
        """Non-empty when the episode must stop now (goal cancelled, ...)."""

    def operator_verdict(self) -> bool | None:
        """Return an operator's success verdict given since the episode started, or None."""

    def record(self, intervention: Intervention) -> None:
        """Report a safety intervention (published and stored in memory by the caller)."""


class ArmKinematics:
    """The robot's kinematic model (the engine's Panda, no objects): forward kinematics and the action space's IK."""

    def __init__(self, control_hz: float) -> None:
        """Compile the model once; the action space is the simulated arm's (``ArmConfig`` at ``control_hz``)."""
        self.config = ArmConfig(control_hz=control_hz)
        self.ik = DlsIk(panda.base_model(), self.config)
        self.commander = EndEffectorCommander(self.ik, self.config)
        self.home = np.array(panda.HOME_QPOS, dtype=np.float64)

    def tcp(self, q: np.ndarray) -> np.ndarray:
        """Return the tool centre point at arm joints ``q``, m."""
        return self.ik.forward(np.asarray(q, dtype=np.float64))


class _Episode:
    """State of one running episode (kept together so every exit path builds the same result)."""

    def __init__(self, io: ArmIO, scene: Scene, robot: RobotConfig, safety: SafetyLayer, kin: ArmKinematics,
                 recording: RecordingConfig) -> None:
        self.io, self.scene, self.robot, self.safety, self.kin, self.rec = io, scene, robot, safety, kin, recording
        self.family = get_family(scene.family)
        self.program = stages.compile_program(self.family.program, LAYOUT)
        self.template, self.slots = observation_template(scene)
        self.rate = robot.control_rate_hz
        self.samples: list[dict] = []
        self.frames: list[np.ndarray] = []
        self.frame_steps: list[int] = []
        self.step = 0
        self.stage = 0
        self.stage_reached = 0
        self.phi = 0.0
        self.prev_tcp: np.ndarray | None = None
        self.last_action: np.ndarray | None = None
        self.opening_cmd = robot.max_finger_opening

    # ------------------------------------------------------------ perception
    def observe(self, joints: JointReading, poses: PoseReading) -> tuple[np.ndarray, np.ndarray]:
        """Return the observation of this tick (advances the stage) and the tool point."""
        tcp = self.kin.tcp(joints.q)
        obs = self.template.copy()
        obs[0:3] = tcp
        obs[3:6] = 0.0 if self.prev_tcp is None else (tcp - self.prev_tcp) * self.rate
        obs[6] = joints.opening
        for base, name in self.slots:
            obs[base:base + 3] = poses.positions[name]
        column = LAYOUT["stage_index"][0]
        obs[column] = self.stage
        phi, self.stage = self.program.evaluate(obs, self.stage)
        self.phi = float(phi)
        obs[column] = self.stage
        self.stage_reached = max(self.stage_reached, self.stage)
        self.prev_tcp = tcp
        return obs, tcp

    def world_state(self, tcp: np.ndarray, joints: JointReading, poses: PoseReading) -> WorldState:
        """Return the perceived counterpart of the simulator's privileged state."""
        scene = self.scene
        goal = scene.goal
        return WorldState(
            ee_pos=tcp,
            gripper=joints.opening,
            target=scene.target,
            target_pos=poses.positions[scene.target_object],
            goal=goal,
            goal_pos=poses.positions[goal.name] if goal is not None else None,
            positions=dict(poses.positions),
        )

    def keyframe(self) -> None:
        """Take a camera frame (resized to the keyframe size) at the current step."""
        if not self.rec.keyframes:
            return
        frame = self.io.camera()
        if frame is not None:
            self.frames.append(resize_nearest(frame, self.rec.keyframe_size))
            self.frame_steps.append(self.step)

    def sample(self, tcp: np.ndarray, opening: float, action: np.ndarray | None) -> None:
        """Append a trajectory sample for the current step."""
        self.samples.append(trajectory_sample(self.step, self.rate, tcp, opening, action, self.stage, self.phi, []))

    # ------------------------------------------------------------ safety
    def hold(self, joints: JointReading | None) -> None:
        """Command the measured position (nothing to hold without a joint state)."""
        if joints is not None:
            self.io.send(joints.q, self.opening_cmd, 1.0 / self.rate)

    def intervene(self, intervention: Intervention, joints: JointReading | None) -> str:
        """Hold, report, and return the reason the episode ends."""
        self.hold(joints)
        self.io.record(intervention)
        return f"{intervention.kind}: {intervention.detail}"

    def fresh_inputs(self) -> tuple[JointReading | None, PoseReading | None, str]:
        """Latest joint state and poses, or the reason (after an intervention) they cannot be used."""
        io, now = self.io, self.io.now()
        joints, poses = io.joints(), io.objects()
        watchdog = self.safety.check_watchdog(now, joints.stamp if joints else None, None)
        if watchdog is not None:
            return joints, poses, self.intervene(watchdog, joints)
        limit = 2 * self.robot.safety.state_timeout_s
        if poses is None or now - poses.stamp > limit:
            age = "never received" if poses is None else f"silent for {now - poses.stamp:.2f} s"
            iv = Intervention("watchdog", f"object poses {age} (limit {limit:.2f} s)", now)
            return joints, poses, self.intervene(iv, joints)
        missing = [name for _, name in self.slots if name not in poses.positions]
        if missing:
            iv = Intervention("watchdog", f"perception lost {missing}", now)
            return joints, poses, self.intervene(iv, joints)
        return joints, poses, ""

    # ------------------------------------------------------------ phases
    def set_up_scene(self) -> str:
        """Request the scene, wait for perception to report its objects (and a joint state after that).

        Returns '' or why the scene was not set up.
        """
        io = self.io
        requested = last_request = io.now()
        io.request_scene(self.scene)
        names = sorted(o.name for o in self.scene.objects)
        deadline = requested + self.robot.scene_setup_timeout_s
        while True:
            if io.now() - last_request >= SCENE_REQUEST_REPEAT_S:
                io.request_scene(self.scene)  # a request lost on the way (no one listening yet) is asked again
                last_request = io.now()
            reason = io.stop_reason()
            if reason:
                return reason
            poses, joints = io.objects(), io.joints()
            if (poses is not None and poses.stamp > requested and all(n in poses.positions for n in names)
                    and joints is not None and joints.stamp >= poses.stamp):
                return ""  # the scene is perceived and the arm reports its state after it
            if io.now() > deadline:
                seen = sorted(poses.positions) if poses is not None else []
                return (f"scene {self.scene.scene_id} not set up within {self.robot.scene_setup_timeout_s:g} s: "
                        f"perception reports {seen}, the scene needs {names}")
            io.sleep_until(io.now() + 0.05)

    def go_home(self) -> str:
        """Move to the home posture in joint steps the safety layer checks; '' or why it failed."""
        joints = self.io.joints()
        if joints is None:
            iv = self.safety.check_watchdog(self.io.now(), None, None)
            return self.intervene(iv or Intervention("watchdog", "no joint_states received", self.io.now()), None)
        return move_home(self.io, self.kin, self.safety, self.robot, self.opening_cmd, self.fresh_joints,
                         self.intervene)

    def fresh_joints(self) -> tuple[JointReading, str]:
        """Latest joint state, or the reason (after a watchdog intervention or a stop) it cannot be used."""
        io = self.io
        reason = io.stop_reason()
        joints = io.joints()
        if reason:
            self.hold(joints)
            return joints, reason
        watchdog = self.safety.check_watchdog(io.now(), joints.stamp if joints else None, None)
        if watchdog is not None:
            return joints, self.intervene(watchdog, joints)
        assert joints is not None
        return joints, ""


def move_home(io: ArmIO, kin: ArmKinematics, safety: SafetyLayer, robot: RobotConfig, opening: float,
              fresh: Callable[[], tuple[JointReading | None, str]],
              intervene: Callable[[Intervention, JointReading | None], str],
              speed_fraction: float = HOME_SPEED_FRACTION, rehome: bool = False) -> str:
    """Move to the home posture in joint steps the safety layer checks; '' when home, else why not.

    Each command is one bounded step (``speed_fraction`` of each joint's velocity limit) from the *measured*
    joints towards home, so an arm that lags behind (a loaded driver, a slow controller) is never commanded
    further than one step away from where it is. ``fresh()`` gives the latest joint state or why it cannot be
    used; ``intervene(iv, joints)`` holds, reports and returns the reason to stop. ``rehome``: the moves after an
    e-stop release (:meth:`SafetyLayer.check_command` lets only them through until the arm is home).
    """
    rate = robot.control_rate_hz
    per_tick = speed_fraction * np.asarray(robot.safety.max_joint_velocity) / rate
    deadline = io.now() + robot.home_timeout_s
    while True:
        joints, reason = fresh()
        if reason or joints is None:
            return reason or "no joint state"
        error = float(np.max(np.abs(joints.q - kin.home)))
        if error < HOME_TOLERANCE:
            kin.commander.reset(kin.tcp(joints.q), joints.q)
            return ""
        if io.now() > deadline:
            iv = Intervention("watchdog", f"home posture not reached within {robot.home_timeout_s:g} s "
                                          f"(joint error {error:.3f} rad)", io.now())
            return intervene(iv, joints)
        q = joints.q + np.clip(kin.home - joints.q, -per_tick, per_tick)
        iv = safety.check_command(io.now(), joints.q, q, kin.tcp(joints.q), kin.tcp(q), rehome=rehome)
        if iv is not None:
            return intervene(iv, joints)
        io.send(q, opening, 1.0 / rate)
        # The next step a whole period after this one: a loop that fell behind (a loaded machine) does not catch
        # up with steps in a burst, which would move the arm faster than speed_fraction of its limits.
        io.sleep_until(io.now() + 1.0 / rate)


def resize_nearest(frame: np.ndarray, size: int) -> np.ndarray:
    """Square ``size`` x ``size`` RGB copy of ``frame`` by nearest-neighbour sampling (centre crop to square)."""
    h, w = frame.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    rows = top + (np.arange(size) * side) // size
    cols = left + (np.arange(size) * side) // size
    return np.ascontiguousarray(frame[rows][:, cols, :3], dtype=np.uint8)


def run_real_episode(
    io: ArmIO,
    scene: Scene,
    act: ActionFn,
    *,
    robot: RobotConfig,
    safety: SafetyLayer,
    kinematics: ArmKinematics,
    episode_id: str,
    policy_version: str,
    max_steps: int = 0,
    recording: RecordingConfig | None = None,
    progress: ProgressFn | None = None,
) -> RecordedEpisode:
    """Run ``act`` on the arm behind ``io`` in ``scene`` (see the module docstring)."""
    scene.validate()
    rec = recording or RecordingConfig(privileged_objects=False)
    ep = _Episode(io, scene, robot, safety, kinematics, rec)
    limit = max_steps or ep.family.max_steps
    operator = robot.success_check == "operator"
    success = False
    status, detail = STATUS_COMPLETED, ""

    reason = ep.set_up_scene()
    if reason:
        status, detail = STATUS_REJECTED, reason
    else:
        reason = ep.go_home()
        if reason:
            status, detail = STATUS_ABORTED, f"moving home: {reason}"
    if status == STATUS_COMPLETED:
        joints, poses, reason = ep.fresh_inputs()
        if reason:
            status, detail = STATUS_ABORTED, reason
    if status == STATUS_COMPLETED:
        period = 1.0 / ep.rate
        obs, tcp = ep.observe(joints, poses)
        ep.sample(tcp, joints.opening, None)
        ep.keyframe()
        state = ep.world_state(tcp, joints, poses)
        success = False if operator else bool(ep.family.success(state))
        tick = io.now()
        while ep.step < limit and not (success and rec.stop_on_success):
            stop = io.stop_reason()
            if stop:
                ep.hold(joints)
                status, detail = STATUS_ABORTED, f"stopped after {ep.step} steps: {stop}"
                break
            asked = io.now()
            action = np.asarray(act(obs, state), dtype=np.float64).reshape(-1)
            now = io.now()
            silent = safety.check_watchdog(now, joints.stamp, asked)
            if silent is not None:
                status, detail = STATUS_ABORTED, ep.intervene(silent, joints)
                break
            if action.shape != (4,) or not np.all(np.isfinite(action)):
                status, detail = STATUS_ABORTED, f"policy output {action.tolist()} is not 4 finite numbers"
                ep.hold(joints)
                break
            tcp_now = tcp
            q_target = kinematics.commander.command(action[:3], tcp_now, joints.q)
            check = (safety.check_command(now, joints.q, q_target, tcp_now, kinematics.commander.tcp_target)
                     or safety.check_tracking(now, joints.q, q_target))
            if check is not None:
                status, detail = STATUS_ABORTED, ep.intervene(check, joints)
                break
            ep.opening_cmd = robot.opening(action[3])
            io.send(q_target, ep.opening_cmd, period)
            tick += period
            io.sleep_until(tick)
            joints, poses, reason = ep.fresh_inputs()
            if reason:
                status, detail = STATUS_ABORTED, reason
                break
            previous_stage = ep.stage
            obs, tcp = ep.observe(joints, poses)
            ep.step += 1
            ep.last_action = action
            state = ep.world_state(tcp, joints, poses)
            if operator:
                verdict = io.operator_verdict()
                success = bool(verdict) if verdict is not None else False
                if verdict is not None:
                    ep.sample(tcp, joints.opening, action)
                    break
            else:
                success = bool(ep.family.success(state))
            if ep.step % rec.sample_every == 0:
                ep.sample(tcp, joints.opening, action)
            if ep.stage != previous_stage:
                ep.keyframe()
            if progress is not None:
                progress(ep.step, ep.stage, ep.phi)
        ep.hold(io.joints())
        if ep.samples and ep.samples[-1]["step"] != ep.step:
            ep.sample(tcp, joints.opening if joints is not None else 0.0, ep.last_action)
        if ep.frame_steps and ep.frame_steps[-1] != ep.step:
            ep.keyframe()
        if operator and status == STATUS_COMPLETED and io.operator_verdict() is None:
            deadline = io.now() + robot.operator_timeout_s
            while io.operator_verdict() is None and io.now() < deadline and not io.stop_reason():
                io.sleep_until(io.now() + 0.1)
            verdict = io.operator_verdict()
            if verdict is None:
                status, detail = STATUS_ABORTED, f"no operator verdict within {robot.operator_timeout_s:g} s"
            success = bool(verdict)
        elif operator and status == STATUS_COMPLETED:
            success = bool(io.operator_verdict())
    return RecordedEpisode(
        episode_id=episode_id,
        scene=scene,
        policy_version=policy_version,
        robot_id=robot.robot_id,
        success=bool(success) and status == STATUS_COMPLETED,
        steps=ep.step,
        stage_reached=int(ep.stage_reached),
        num_stages=int(ep.program.num_stages),
        control_rate_hz=float(ep.rate),
        samples=ep.samples,
        keyframes=ep.frames,
        keyframe_steps=ep.frame_steps,
        status=status,
        status_detail=detail,
        source=SOURCE_REAL,
    )
