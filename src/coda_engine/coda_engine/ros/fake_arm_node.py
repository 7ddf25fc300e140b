# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``fake_ros2_control_arm`` node: the engine's MuJoCo Panda behind a ros2_control arm's topics, and nothing more.

A stand-in for real hardware (``ros2 run coda_engine fake_ros2_control_arm --ros-args -r __ns:=/panda_fake_0``).
Under the node's namespace:

- ``joint_states`` (sensor_msgs/JointState): published at ``state_rate_hz``; the 7 arm joints and 2 finger joints
  under the configured names, stamped when measured
- ``joint_trajectory_controller/joint_trajectory`` (trajectory_msgs/JointTrajectory): the last point is the
  position target of the arm's servos; bad trajectories are rejected with a log line naming the problem
- ``gripper_controller/commands`` (std_msgs/Float64MultiArray): ``[finger opening, m in 0..0.08]``
- ``camera/image_raw`` (sensor_msgs/Image, rgb8): the scene camera at ``camera_rate_hz``
- ``object_states`` (coda_msgs/ObjectStates): "perception": the scene's objects, base frame, at ``perception_rate_hz``
- ``scene_request`` (coda_msgs/SceneSpec): loads that scene's objects; the arm keeps its joint positions
- ``~/faults`` (std_msgs/String): JSON of the fault settings and counters, 1 Hz

The physics runs in real time on one dedicated thread that owns the simulated arm (MuJoCo's GL context belongs to
the thread that made it): it ticks at ``state_rate_hz``, each tick advancing the physics by the wall time elapsed (in
whole 10 ms chunks) and publishing the joint state, and, at their own rates, the objects and a camera frame; scene
loads are handed to it between ticks. Faults (:mod:`coda_engine.real.faults`) are drawn per message: latency and
jitter (a delay line, never blocking the physics), joint noise, dropped joint states and commands, trajectories the
controller rejects. The fault parameters can be changed at runtime (``ros2 param set``); all others are read-only.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import mujoco
import numpy as np
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from coda_engine.real.faults import DelayLine, FaultConfig, FaultConfigError, FaultInjector
from coda_engine.ros.convert import ConversionError, dict_to_msg, msg_to_dict
from coda_engine.ros.images import image_to_msg
from coda_engine.ros.sim_bridge_node import MAX_FINGER_OPENING, CommandError, joint_targets_from_trajectory
from coda_engine.ros.spin import run_node
from coda_engine.sim import panda
from coda_engine.sim.arm import ArmConfig, SimArm
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.model import scene_model
from coda_engine.sim.scene import Scene, SceneParams
from coda_msgs.msg import ObjectStates, SceneSpec

CHUNK_HZ = 100.0
"""The physics advances in chunks of 1 / CHUNK_HZ s (``SimArm.step_joint_targets`` at this control rate)."""
MAX_CATCH_UP_S = 0.25
"""When the physics is further behind the wall clock than this (a slow scene load, a stalled CPU), the gap is
skipped rather than simulated in a burst; the skipped time is reported on ``~/faults``."""
FAULT_PARAMETERS = ("latency_s", "jitter_s", "joint_noise", "drop_rate", "reject_rate", "seed")
"""Parameters that can be set at runtime: the fields of :class:`FaultConfig`."""


class PhysicsThread:
    """One thread that owns the simulated arm: a tick every ``period`` seconds, and jobs handed to it in between."""

    def __init__(self, period: float, on_error: Callable[[BaseException], None]) -> None:
        """Start the thread; it runs only jobs until :attr:`tick` is set."""
        self.period = period
        self.tick: Callable[[], None] | None = None
        """Called every ``period`` s on the thread (exceptions go to ``on_error``; the thread keeps running)."""
        self._on_error = on_error
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="physics", daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the thread (before its next tick) and return the result."""
        if not self._thread.is_alive():
            raise RuntimeError("the physics thread has stopped")
        future: Future = Future()
        self._jobs.put((future, fn, args, kwargs))
        return future.result()

    def stop(self, last: Callable[[], None] | None = None) -> None:
        """Run ``last()`` on the thread, then end it."""
        if self._thread.is_alive():
            if last is not None:
                self.call(last)
            self._jobs.put(None)
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        next_tick = time.monotonic() + self.period
        while True:
            wait = next_tick - time.monotonic()
            try:
                job = self._jobs.get(timeout=wait) if wait > 0 else False  # a due tick goes first
            except queue.Empty:
                job = False
            if job is None:
                return
            if job:
                future, fn, args, kwargs = job
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # handed to the caller
                    future.set_exception(exc)
                continue
            now = time.monotonic()
            next_tick = max(next_tick + self.period, now + 0.5 * self.period)
            if self.tick is not None:
                try:
                    self.tick()
                except Exception as exc:  # reported; the arm keeps running
                    self._on_error(exc)


class FakeArmNode(Node):
    """The MuJoCo Panda posing as a ros2_control arm, with injectable link and controller faults."""

    def __init__(self) -> None:
        """Declare and check parameters, load the initial scene, create the interfaces."""
        super().__init__("fake_ros2_control_arm")

        def param(name: str, default: object, description: str, read_only: bool = True) -> Any:
            descriptor = ParameterDescriptor(description=description, read_only=read_only)
            return self.declare_parameter(name, default, descriptor).value

        namespace = self.get_namespace().strip("/")
        robot_id = str(param("robot_id", "", "name of the arm in log lines and on ~/faults (empty = the namespace)"))
        self.robot_id = robot_id or namespace or "panda_fake_0"
        self.state_rate = float(param("state_rate_hz", 50.0, "physics tick and joint_states rate, Hz"))
        self.perception_rate = float(param("perception_rate_hz", 20.0, "object_states rate, Hz (0 = off)"))
        self.camera_rate = float(param("camera_rate_hz", 5.0, "camera/image_raw rate, Hz (0 = off)"))
        self.camera_size = int(param("camera_size", 64, "camera image width and height, pixels"))
        self.base_frame = str(param("base_frame", "base", "frame_id of object_states (the arm's base frame)"))
        self.camera_frame = str(param("camera_frame", "camera", "frame_id of camera images"))
        self.joint_names = list(
            param("joint_names", list(panda.ARM_JOINTS), "names of the 7 arm joints, in the engine model's order")
        )
        self.finger_names = list(param("finger_joint_names", list(panda.FINGER_JOINTS), "names of the 2 finger joints"))
        family = str(param("initial_family", "reach", "family of the scene loaded at start-up"))
        seed = int(param("initial_seed", 0, "seed of the scene loaded at start-up"))
        fault_docs = {
            "latency_s": "delay before a received command is applied and before a joint state is published, s",
            "jitter_s": "extra delay drawn uniformly from [0, jitter_s] per message, s",
            "joint_noise": "std of Gaussian noise on published joint positions, rad",
            "drop_rate": "probability a joint_states message or a received command is lost",
            "reject_rate": "probability the controller rejects a valid trajectory",
            "seed": "seed of the generator faults are drawn from",
        }
        defaults = FaultConfig()
        faults = {name: param(name, getattr(defaults, name), doc, read_only=False) for name, doc in fault_docs.items()}
        self._check_parameters()
        self.faults = FaultInjector(FaultConfig.from_dict(faults))  # FaultConfigError names a bad field
        self.add_on_set_parameters_callback(self.on_set_parameters)
        self.add_post_set_parameters_callback(self.after_set_parameters)
        self.engine_index = {name: panda.ARM_JOINTS[i] for i, name in enumerate(self.joint_names)}

        # Every use of self.arm happens on this one thread.
        self.physics = PhysicsThread(1.0 / self.state_rate, on_error=self._tick_failed)
        self.delays = DelayLine(on_error=lambda exc: self.get_logger().error(f"delayed message failed: {exc}"))
        self.target_lock = threading.Lock()
        self.arm: SimArm = self.on_sim(SimArm, ArmConfig(control_hz=CHUNK_HZ))
        self.q_target = np.array(panda.HOME_QPOS)
        self.gripper = -1.0
        self.skipped_s = 0.0
        self.on_sim(self._load, generate_seeded(family, seed, SceneParams()), keep_joints=False)
        model = self.arm.model
        ranges = np.array([model.jnt_range[model.joint(n).id] for n in panda.ARM_JOINTS])
        self.q_low, self.q_high = ranges[:, 0], ranges[:, 1]
        self.sim_time = 0.0
        self.wall_start = time.monotonic()
        # (wall clock since the start, simulated, skipped) seconds after the last physics advance, set as one
        # tuple so ~/faults reports the three from the same instant: simulated plus skipped time tracks the wall
        self.clock = (0.0, 0.0, 0.0)
        self.next_perception = self.next_camera = self.wall_start

        self.joint_pub = self.create_publisher(JointState, "joint_states", 10)
        self.objects_pub = self.create_publisher(ObjectStates, "object_states", 10)
        self.camera_pub = self.create_publisher(Image, "camera/image_raw", 2)
        self.faults_pub = self.create_publisher(String, "~/faults", 10)
        # one executor thread: commands are handled in arrival order; a scene load (about 0.2 s) holds them up
        trajectory_topic = "joint_trajectory_controller/joint_trajectory"
        self.create_subscription(JointTrajectory, trajectory_topic, self.on_trajectory, 10)
        self.create_subscription(Float64MultiArray, "gripper_controller/commands", self.on_gripper, 10)
        self.create_subscription(SceneSpec, "scene_request", self.on_scene, 2)
        self.create_timer(1.0, self.on_faults_tick)
        self.physics.tick = self._tick
        self.get_logger().info(
            f"fake_ros2_control_arm {self.robot_id} ready: joint_states at {self.state_rate:g} Hz, "
            f"faults {self.faults.config.to_dict()}"
        )

    def _check_parameters(self) -> None:
        """Raise ValueError naming the first bad read-only parameter."""
        if not 0.0 < self.state_rate <= 500.0:
            raise ValueError(f"parameter state_rate_hz={self.state_rate} must be in (0, 500]")
        for name, rate in (("perception_rate_hz", self.perception_rate), ("camera_rate_hz", self.camera_rate)):
            if not 0.0 <= rate <= 100.0:
                raise ValueError(f"parameter {name}={rate} must be in [0, 100] (0 = off)")
        if not 8 <= self.camera_size <= 1024:
            raise ValueError(f"parameter camera_size={self.camera_size} must be in [8, 1024]")
        for name, names, count in (("joint_names", self.joint_names, 7), ("finger_joint_names", self.finger_names, 2)):
            if len(names) != count or len(set(names)) != count or not all(names):
                raise ValueError(f"parameter {name}={names} must hold {count} distinct non-empty names")
        if set(self.joint_names) & set(self.finger_names):
            raise ValueError(
                f"parameters joint_names and finger_joint_names share names: "
                f"{sorted(set(self.joint_names) & set(self.finger_names))}"
            )

    # ---------------------------------------------------------------- parameters
    def on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        """Check new fault settings before they are set; the reason names the bad field."""
        values = self.faults.config.to_dict()
        for p in params:
            if p.name in FAULT_PARAMETERS:
                values[p.name] = p.value
        try:
            FaultConfig.from_dict(values)
        except FaultConfigError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def after_set_parameters(self, params: list[Parameter]) -> None:
        """Apply fault settings once they are set."""
        if any(p.name in FAULT_PARAMETERS for p in params):
            config = FaultConfig.from_dict({name: self.get_parameter(name).value for name in FAULT_PARAMETERS})
            self.faults.configure(config)
            self.get_logger().info(f"faults now {config.to_dict()}")

    # ---------------------------------------------------------------- physics thread
    def on_sim(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the physics thread and return its result."""
        return self.physics.call(fn, *args, **kwargs)

    def _load(self, scene: Scene, keep_joints: bool = True) -> None:
        """Load ``scene`` (objects at their scene poses); with ``keep_joints`` the arm stays where it is."""
        arm = self.arm
        q = arm.joint_positions() if keep_joints and arm.data is not None else None
        arm.close()  # renderers belong to the previous model
        arm.reset(scene)
        if self.camera_rate > 0:
            arm.render(self.camera_size, self.camera_size)  # make the renderer now, not in a tick
        if q is not None:
            m, d = arm.model, arm.data
            for name, value in zip(arm.joint_names, q, strict=True):
                joint = m.joint(name)
                d.qpos[joint.qposadr[0]] = value
                d.qvel[joint.dofadr[0]] = 0.0
            mujoco.mj_forward(m, d)
        else:
            with self.target_lock:
                self.q_target = arm.joint_positions()[:7]
                self.gripper = -1.0

    def _advance(self, now: float) -> None:
        """Step the physics up to the wall clock ``now`` (whole chunks; a gap above MAX_CATCH_UP_S is skipped)."""
        wall_time = now - self.wall_start
        behind = wall_time - self.sim_time
        if behind > MAX_CATCH_UP_S:
            skip = behind - 1.0 / self.state_rate
            self.sim_time += skip
            self.skipped_s += skip
            behind -= skip
        chunks = int(behind * CHUNK_HZ)
        with self.target_lock:
            q, gripper = self.q_target.copy(), self.gripper
        for _ in range(chunks):
            self.arm.step_joint_targets(q, gripper)
        self.sim_time += chunks / CHUNK_HZ
        self.clock = (wall_time, self.sim_time, self.skipped_s)

    def _tick(self) -> None:
        """Advance the physics to now; publish the joint state, and the objects and a camera frame when due."""
        if not self.context.ok():
            return
        now = time.monotonic()
        self._advance(now)
        self._publish_joint_state()
        if self.perception_rate > 0 and now >= self.next_perception:
            self.next_perception = max(self.next_perception + 1.0 / self.perception_rate, now)
            self._publish_objects()
        if self.camera_rate > 0 and now >= self.next_camera:
            self.next_camera = max(self.next_camera + 1.0 / self.camera_rate, now)
            self._publish_camera()

    def _tick_failed(self, exc: BaseException) -> None:
        if self.context.ok():  # at shutdown publishers go away under a running tick
            self.get_logger().error(f"physics tick failed: {type(exc).__name__}: {exc}", throttle_duration_sec=5.0)

    # ---------------------------------------------------------------- outputs (physics thread)
    def _publish_joint_state(self) -> None:
        """Publish the measured joint state through the faults (drop, noise, delay), stamped when measured."""
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        if self.faults.drop("states"):
            return
        msg.name = [*self.joint_names, *self.finger_names]
        msg.position = self.faults.noisy(self.arm.joint_positions()).tolist()
        msg.velocity = self.arm.joint_velocities().tolist()
        msg.effort = self.arm.joint_efforts().tolist()
        self.delays.submit(self.faults.delay("states"), lambda: self._send_state(msg), stream="states")

    def _send_state(self, msg: JointState) -> None:
        if self.context.ok():
            self.joint_pub.publish(msg)
            self.faults.count("published_states")

    def _publish_objects(self) -> None:
        """Publish the scene's objects (poses in the base frame) as perception would."""
        objects = [o.to_dict() for o in self.arm.object_states()]
        msg = dict_to_msg(ObjectStates, {"objects": objects, "scene_id": self.arm.scene.scene_id})
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.base_frame
        self.objects_pub.publish(msg)

    def _publish_camera(self) -> None:
        """Publish a frame of the scene camera."""
        frame = self.arm.render(self.camera_size, self.camera_size)
        msg = image_to_msg(frame, frame_id=self.camera_frame)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.camera_pub.publish(msg)

    def on_faults_tick(self) -> None:
        """Publish the fault settings and counters on ``~/faults``."""
        status = {
            "robot_id": self.robot_id,
            "faults": self.faults.config.to_dict(),
            "counters": self.faults.snapshot(),
            **{key: round(value, 3) for key, value in zip(("wall_time_s", "sim_time_s", "skipped_s"), self.clock,
                                                            strict=True)},
        }
        self.faults_pub.publish(String(data=json.dumps(status, sort_keys=True)))

    # ---------------------------------------------------------------- inputs
    def on_trajectory(self, msg: JointTrajectory) -> None:
        """Receive a trajectory: it may be lost; otherwise it reaches the controller after the command delay."""
        self.faults.count("received_commands")
        if self.faults.drop("commands"):
            return
        names = list(msg.joint_names)
        points = [list(p.positions) for p in msg.points]
        self.delays.submit(
            self.faults.delay("commands"), lambda: self.execute_trajectory(names, points), stream="commands"
        )

    def execute_trajectory(self, names: list[str], points: list[list[float]]) -> None:
        """Act as the controller: check the trajectory, maybe reject it, else make its last point the servo target."""
        try:
            if not points:
                raise CommandError("trajectory has no points")
            unknown = sorted(set(names) - set(self.joint_names))
            if unknown:
                raise CommandError(f"unknown joints {unknown}; this arm has {self.joint_names}")
            if len(set(names)) != len(names):
                raise CommandError(f"joint names repeat: {names}")
            with self.target_lock:
                q = joint_targets_from_trajectory(
                    [self.engine_index[n] for n in names], points[-1], self.q_target, self.q_low, self.q_high
                )
        except CommandError as exc:
            self.faults.count("invalid_commands")
            self.get_logger().error(f"joint_trajectory rejected: {exc}")
            return
        if self.faults.reject():
            self.get_logger().warning(
                f"controller rejected trajectory (reject_rate={self.faults.config.reject_rate:g})",
                throttle_duration_sec=1.0,
            )
            return
        with self.target_lock:
            self.q_target = q
        self.faults.count("applied_commands")

    def on_gripper(self, msg: Float64MultiArray) -> None:
        """Receive a finger opening command (m); lost or delayed like trajectories."""
        self.faults.count("received_commands")
        if self.faults.drop("commands"):
            return
        data = list(msg.data)
        self.delays.submit(self.faults.delay("commands"), lambda: self.execute_gripper(data), stream="commands")

    def execute_gripper(self, data: list[float]) -> None:
        """Set the finger opening target; a bad command is rejected with a log line."""
        if len(data) != 1 or not math.isfinite(data[0]) or not 0.0 <= data[0] <= MAX_FINGER_OPENING:
            self.faults.count("invalid_commands")
            self.get_logger().error(
                f"gripper command rejected: expected [opening in 0..{MAX_FINGER_OPENING} m], got {data}"
            )
            return
        with self.target_lock:
            self.gripper = 1.0 - 2.0 * data[0] / MAX_FINGER_OPENING
        self.faults.count("applied_commands")

    def on_scene(self, msg: SceneSpec) -> None:
        """Set a requested scene up: load its objects, keep the arm's joint positions."""
        try:
            scene = Scene.from_dict(msg_to_dict(msg))
            scene.validate()
            scene_model(scene)  # compile here (cached): the physics thread only swaps the model in
            self.on_sim(self._load, scene)
        except (ValueError, KeyError, TypeError, ConversionError) as exc:
            self.get_logger().error(f"scene_request {msg.scene_id!r} rejected: {type(exc).__name__}: {exc}")
            return
        self.get_logger().info(f"scene {scene.scene_id} set up ({len(scene.objects)} objects)")


def _release(node: FakeArmNode) -> None:
    node.delays.close()
    node.physics.stop(last=node.arm.close)


def main(args: list[str] | None = None) -> None:
    """Run the node on a single-threaded executor until shutdown (the physics has its own thread)."""
    run_node(FakeArmNode, args, on_exit=_release)


if __name__ == "__main__":
    main()
