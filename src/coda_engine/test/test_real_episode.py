# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Episodes on a real arm (coda_engine.real.episode) over an ArmIO backed by MuJoCo physics, without ROS.

``PhysicsIO`` plays the arm, its perception and an operator: commands set the position servos of a simulated
Panda, time is the simulation's (each sleep advances the physics by whole control periods), so the procedure
(set-up, home, control loop, safety, verdict) runs exactly as on a robot, only faster than real time.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from coda_engine.episodes import SOURCE_REAL, STATUS_ABORTED, STATUS_COMPLETED, STATUS_REJECTED, run_recorded_episode
from coda_engine.policies import resolve
from coda_engine.real.episode import (
    SCENE_REQUEST_REPEAT_S,
    ArmKinematics,
    JointReading,
    PoseReading,
    move_home,
    resize_nearest,
    run_real_episode,
)
from coda_engine.real.robot import RobotConfig
from coda_engine.real.safety import Intervention, SafetyLayer
from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import Scene, SceneParams

ROBOT_FILE = Path(__file__).resolve().parents[1] / "config" / "robots" / "panda_fake.yaml"


class PhysicsIO:
    """ArmIO over a SimArm with a simulated clock (see the module docstring)."""

    def __init__(self, arm: SimArm, rate: float = 10.0) -> None:
        """Drive ``arm``; time starts at 0 and advances ``1 / rate`` s per control step."""
        self.arm, self.period = arm, 1.0 / rate
        self.t = 0.0
        self.stamp = 0.0
        self.q_cmd: np.ndarray | None = None
        self.gripper = -1.0
        self.sent: list[np.ndarray] = []
        self.recorded: list[Intervention] = []
        self.state_alive = True
        self.perceive = True
        self.stop = ""
        self.verdict: bool | None = None
        self.set_up = True
        self.requests = 0
        self.lost_requests = 0  # this many first scene requests never reach the cell

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        while self.t + 1e-9 < t:
            if self.arm.scene is not None:
                q = self.q_cmd if self.q_cmd is not None else self.arm.joint_positions()[:7]
                self.arm.step_joint_targets(q, self.gripper)
            self.t += self.period
            if self.state_alive:
                self.stamp = self.t

    def joints(self) -> JointReading | None:
        if self.arm.scene is None:
            return None
        q = self.arm.joint_positions()
        return JointReading(self.stamp, q[:7].copy(), float(q[7] + q[8]))

    def objects(self) -> PoseReading | None:
        if self.arm.scene is None or not self.perceive:
            return PoseReading(self.t, {}) if self.perceive is False else None
        return PoseReading(self.t, {o.name: np.array(o.position) for o in self.arm.object_states()})

    def camera(self) -> np.ndarray | None:
        return self.arm.render(96, 96) if self.arm.scene is not None else None

    def send(self, q: np.ndarray, opening: float, duration: float) -> None:
        self.q_cmd = np.array(q, dtype=np.float64)
        self.gripper = 1.0 - 2.0 * opening / 0.08
        self.sent.append(self.q_cmd.copy())

    def request_scene(self, scene: Scene) -> None:
        self.requests += 1
        if self.set_up and self.requests > self.lost_requests:
            self.arm.reset(scene)

    def stop_reason(self) -> str:
        return self.stop

    def operator_verdict(self) -> bool | None:
        return self.verdict

    def record(self, intervention: Intervention) -> None:
        self.recorded.append(intervention)


@pytest.fixture(scope="module")
def arm() -> SimArm:
    arm = SimArm()
    yield arm
    arm.close()


@pytest.fixture(scope="module")
def kinematics() -> ArmKinematics:
    return ArmKinematics(10.0)


def robot_with(**changes: object) -> RobotConfig:
    robot = RobotConfig.load(ROBOT_FILE)
    safety = changes.pop("safety", None)
    if safety:
        robot = dataclasses.replace(robot, safety=dataclasses.replace(robot.safety, **safety))
    return dataclasses.replace(robot, **changes)


def episode(io: PhysicsIO, scene: Scene, kinematics: ArmKinematics, robot: RobotConfig | None = None,
            act: object = None, **kwargs: object) -> object:
    robot = robot or robot_with()
    if act is None:
        act = resolve("expert", scene, None)
    return run_real_episode(io, scene, act, robot=robot, safety=SafetyLayer(robot.safety, robot.control_rate_hz),
                            kinematics=kinematics, episode_id="real-1", policy_version="expert", **kwargs)


@pytest.mark.parametrize("family,seed", [("reach", 1), ("pick_place", 2), ("push", 3), ("stack", 4)])
def test_expert_on_perceived_state_matches_the_simulated_episode(arm: SimArm, kinematics: ArmKinematics,
                                                                 family: str, seed: int) -> None:
    """Same physics, same action space and IK, perception instead of privileged state: the same episode."""
    scene = generate_seeded(family, seed, SceneParams())
    sim = run_recorded_episode(SimArm(), scene, resolve("expert", scene, None), episode_id="sim-1",
                               policy_version="expert", robot_id="sim")
    io = PhysicsIO(arm)
    real = episode(io, scene, kinematics)
    assert real.status == STATUS_COMPLETED, real.status_detail
    assert real.source == SOURCE_REAL and real.to_result_dict()["source"] == SOURCE_REAL
    assert real.success == sim.success and sim.success, (real.success, sim.success)
    assert abs(real.steps - sim.steps) <= 1
    assert real.stage_reached == sim.stage_reached == real.num_stages
    assert io.recorded == []
    assert all(sample["objects"] == [] for sample in real.samples)  # no privileged state in real results
    assert real.samples[-1]["step"] == real.steps
    assert real.keyframe_steps[0] == 0 and real.keyframe_steps[-1] == real.steps
    assert all(frame.shape == (64, 64, 3) and frame.dtype == np.uint8 for frame in real.keyframes)


def test_workspace_violation_holds_and_aborts(arm: SimArm, kinematics: ArmKinematics) -> None:
    scene = generate_seeded("reach", 5, SceneParams())
    io = PhysicsIO(arm)
    # The home tool point is 0.364 m high; a box up to 0.38 m holds it, and a policy moving up leaves it at once.
    robot = robot_with(safety={"workspace_high": (0.85, 0.5, 0.38)})
    result = episode(io, scene, kinematics, robot, act=lambda obs, state: np.array([0.0, 0.0, 0.05, -1.0]))
    assert result.status == STATUS_ABORTED
    assert result.status_detail.startswith("workspace:") and "z" in result.status_detail, result.status_detail
    assert [iv.kind for iv in io.recorded] == ["workspace"] and io.recorded[0].holding
    assert result.steps == 0
    measured = arm.joint_positions()[:7]
    np.testing.assert_allclose(io.sent[-1], measured, atol=1e-3)  # the last command holds the measured position


def test_silent_state_stream_triggers_the_watchdog(arm: SimArm, kinematics: ArmKinematics) -> None:
    scene = generate_seeded("pick_place", 6, SceneParams())
    io = PhysicsIO(arm)
    calls = []

    def act(obs: np.ndarray, state: object) -> np.ndarray:
        calls.append(1)
        if len(calls) == 5:
            io.state_alive = False  # the driver stops publishing joint_states
        return expert(obs, state)

    expert = resolve("expert", scene, None)
    result = episode(io, scene, kinematics, act=act)
    assert result.status == STATUS_ABORTED and result.status_detail.startswith("watchdog:"), result.status_detail
    assert io.recorded[-1].kind == "watchdog"
    assert 5 <= result.steps <= 5 + 10 * 1.0 + 2  # stopped within the state timeout (1 s at 10 Hz)


def test_slow_policy_triggers_the_watchdog(arm: SimArm, kinematics: ArmKinematics) -> None:
    scene = generate_seeded("reach", 7, SceneParams())
    io = PhysicsIO(arm)
    robot = robot_with()
    expert = resolve("expert", scene, None)

    def act(obs: np.ndarray, state: object) -> np.ndarray:
        io.t += robot.safety.policy_timeout_s + 0.5  # the policy answers too late
        return expert(obs, state)

    result = episode(io, scene, kinematics, robot, act=act)
    assert result.status == STATUS_ABORTED and "watchdog" in result.status_detail
    assert result.steps == 0 and io.recorded[-1].kind == "watchdog"


def test_estop_mid_episode_latches(arm: SimArm, kinematics: ArmKinematics) -> None:
    scene = generate_seeded("push", 8, SceneParams())
    io = PhysicsIO(arm)
    robot = robot_with()
    safety = SafetyLayer(robot.safety, robot.control_rate_hz)
    expert = resolve("expert", scene, None)
    steps = []

    def act(obs: np.ndarray, state: object) -> np.ndarray:
        steps.append(1)
        if len(steps) == 3:
            safety.estop(io.now(), "operator pressed the button")
        return expert(obs, state)

    result = run_real_episode(io, scene, act, robot=robot, safety=safety, kinematics=kinematics,
                              episode_id="real-2", policy_version="expert")
    assert result.status == STATUS_ABORTED and result.status_detail.startswith("estop:"), result.status_detail
    assert result.steps == 2 and safety.latched
    again = run_real_episode(PhysicsIO(arm), scene, expert, robot=robot, safety=safety, kinematics=kinematics,
                             episode_id="real-3", policy_version="expert")
    assert again.status != STATUS_COMPLETED  # still latched
    # releasing takes a quiet time, then the arm moves home at reduced speed before anything else may go
    assert not safety.release(io.now())[0]
    released, message = safety.release(io.now() + robot.safety.estop_release_quiet_s + 0.1)
    assert released and safety.rehoming, message
    blocked = run_real_episode(PhysicsIO(arm), scene, expert, robot=robot, safety=safety, kinematics=kinematics,
                               episode_id="real-4", policy_version="expert")
    assert blocked.status == STATUS_ABORTED and "re-homing" in blocked.status_detail, blocked.status_detail
    home_io = PhysicsIO(arm)
    home_io.q_cmd = kinematics.home + np.array([0.3, -0.2, 0.0, 0.25, 0.0, 0.2, 0.0])  # away from home (3 s)
    home_io.sleep_until(3.0)
    home_io.sent.clear()
    start = home_io.joints().q.copy()
    assert np.max(np.abs(start - kinematics.home)) > 0.15
    fraction = robot.safety.rehome_speed_fraction
    reason = move_home(home_io, kinematics, safety, robot, robot.max_finger_opening, lambda: (home_io.joints(), ""),
                       lambda iv, joints: iv.detail, speed_fraction=fraction, rehome=True)
    assert reason == "" and np.max(np.abs(home_io.joints().q - kinematics.home)) < 0.03
    steps = np.abs(np.diff(np.array([start, *home_io.sent]), axis=0))  # every command one bounded step
    assert len(home_io.sent) > 1
    assert np.all(steps <= fraction * np.asarray(robot.safety.max_joint_velocity) / robot.control_rate_hz + 0.05)
    safety.rehomed()
    assert not safety.rehoming and not safety.latched


def test_scene_never_set_up_is_rejected_naming_the_objects(arm: SimArm, kinematics: ArmKinematics) -> None:
    scene = generate_seeded("stack", 9, SceneParams())
    io = PhysicsIO(arm)
    io.set_up, io.perceive = False, False
    result = episode(io, scene, kinematics, robot_with(scene_setup_timeout_s=2.0))
    assert result.status == STATUS_REJECTED
    assert "not set up within 2 s" in result.status_detail and scene.target_object in result.status_detail
    assert result.steps == 0 and io.sent == []


def test_a_lost_scene_request_is_sent_again(arm: SimArm, kinematics: ArmKinematics) -> None:
    scene = generate_seeded("reach", 12, SceneParams())
    names = {o.name for o in scene.objects}
    others = (generate_seeded("push", seed, SceneParams()) for seed in range(100))
    before = next(other for other in others if not names & {o.name for o in other.objects})
    arm.reset(before)  # the cell holds other objects until a request gets through
    io = PhysicsIO(arm)
    io.lost_requests = 2  # e.g. published before the cell's subscriber had matched
    result = episode(io, scene, kinematics, robot_with(scene_setup_timeout_s=10.0))
    assert result.status == STATUS_COMPLETED and result.success, result.status_detail
    assert io.requests == 3 and io.t >= 2 * SCENE_REQUEST_REPEAT_S


def test_operator_verdict_decides_success(arm: SimArm, kinematics: ArmKinematics) -> None:
    scene = generate_seeded("reach", 10, SceneParams())
    io = PhysicsIO(arm)
    expert = resolve("expert", scene, None)
    steps = []

    def act(obs: np.ndarray, state: object) -> np.ndarray:
        steps.append(1)
        if len(steps) == 4:
            io.verdict = False  # the operator judges the episode failed, whatever perception says
        return expert(obs, state)

    result = episode(io, scene, kinematics, robot_with(success_check="operator"), act=act)
    assert result.status == STATUS_COMPLETED and not result.success and result.steps == 4

    io = PhysicsIO(arm)
    result = episode(io, scene, kinematics, robot_with(success_check="operator", operator_timeout_s=1.0), max_steps=3)
    assert result.status == STATUS_ABORTED and "no operator verdict within 1 s" in result.status_detail


def test_resize_nearest_crops_and_scales() -> None:
    frame = np.zeros((120, 160, 3), dtype=np.uint8)
    frame[:, 20:140] = 200  # the centre square
    out = resize_nearest(frame, 64)
    assert out.shape == (64, 64, 3) and out.dtype == np.uint8 and (out == 200).all()
