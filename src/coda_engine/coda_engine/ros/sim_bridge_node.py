# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``sim_bridge`` node: a simulated Panda that looks like a ros2_control arm, plus a ``RunEpisode`` server.

Under the node's namespace (``ros2 run coda_engine sim_bridge --ros-args -r __ns:=/sim_0``):

- ``joint_states`` (sensor_msgs/JointState): published at ``control_rate_hz``
- ``joint_trajectory_controller/joint_trajectory`` (trajectory_msgs/JointTrajectory): commands in; the
  last point is the target
- ``gripper_controller/commands`` (std_msgs/Float64MultiArray): ``[finger opening, m in [0, 0.08]]``
- ``camera/image_raw`` (sensor_msgs/Image, rgb8): published at ``camera_rate_hz``
- ``object_states`` (coda_msgs/ObjectStates): published at ``control_rate_hz``
- ``scene`` (coda_msgs/SceneSpec): subscribed; loads that scene for live control
- ``run_episode`` (coda_msgs/action/RunEpisode): a whole episode in-process, returns an EpisodeResult. A trained
  version is read from ``checkpoint_root`` when its model there has the goal's hash, else from the
  ``checkpoint_cache``, else fetched once from the goal's ``checkpoint_service`` (the loop's; a worker on another
  machine needs no shared disk) and cached

Live control (topics) and episodes (action) share one simulated arm, owned by one dedicated
thread (MuJoCo's GL context belongs to the thread that made it); an episode pauses live stepping
while it runs. Bad commands (unknown joints, NaN, outside limits) and bad goals are
rejected with a log line or a REJECTED result naming the problem; the node keeps running.
"""

from __future__ import annotations

import itertools
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from coda_engine import policies
from coda_engine.episodes import STATUS_REJECTED, RecordingConfig, run_recorded_episode
from coda_engine.ros.checkpoints import CheckpointFetcher
from coda_engine.ros.convert import ConversionError, dict_to_msg, msg_to_dict
from coda_engine.ros.images import image_to_msg
from coda_engine.ros.spin import InFlight, run_node
from coda_engine.sim import panda
from coda_engine.sim.arm import ArmConfig, SimArm
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import Scene, SceneParams
from coda_msgs.action import RunEpisode
from coda_msgs.msg import EpisodeResult, ObjectStates, SceneSpec

MAX_FINGER_OPENING = 0.08


class CommandError(ValueError):
    """A joint or gripper command that is rejected; the message names the problem."""


def joint_targets_from_trajectory(
    msg_names: list[str], positions: list[float], current: np.ndarray, low: np.ndarray, high: np.ndarray
) -> np.ndarray:
    """Arm joint targets (7) from one trajectory point; joints not named keep ``current``."""
    if len(msg_names) != len(positions):
        raise CommandError(f"{len(msg_names)} joint names but {len(positions)} positions")
    unknown = sorted(set(msg_names) - set(panda.ARM_JOINTS))
    if unknown:
        raise CommandError(f"unknown joints {unknown}; this arm has {list(panda.ARM_JOINTS)}")
    q = current.copy()
    for name, value in zip(msg_names, positions, strict=True):
        i = panda.ARM_JOINTS.index(name)
        if not math.isfinite(value):
            raise CommandError(f"{name}: position {value} is not finite")
        if not low[i] <= value <= high[i]:
            raise CommandError(f"{name}: position {value:.4f} rad outside limits [{low[i]:.4f}, {high[i]:.4f}]")
        q[i] = value
    return q


class SimBridgeNode(Node):
    """One simulated arm on the ROS graph."""

    def __init__(self) -> None:
        """Declare parameters, load the initial scene, create the interfaces."""
        super().__init__("sim_bridge")

        def param(name: str, default: object, description: str) -> object:
            return self.declare_parameter(name, default, ParameterDescriptor(description=description)).value

        namespace = self.get_namespace().strip("/")
        self.robot_id = str(param("robot_id", namespace or "sim_0", "id recorded in EpisodeResult.robot_id"))
        rate = float(param("control_rate_hz", 10.0, "control rate of live stepping and of episodes, Hz (a policy "
                                                    "version trained at another rate is refused)"))
        self.control_hz = rate
        self.camera_rate = float(param("camera_rate_hz", 2.0, "camera image rate in live mode, Hz (0 = off)"))
        self.camera_size = int(param("camera_size", 64, "camera image width and height, pixels"))
        self.keyframe_size = int(param("keyframe_size", 64, "keyframe width and height in episode results, px"))
        self.checkpoints = CheckpointFetcher.from_parameters(self)
        self.checkpoint_root = self.checkpoints.checkpoint_root
        family = str(param("initial_family", "reach", "family of the scene loaded at start-up"))
        seed = int(param("initial_seed", 0, "seed of the scene loaded at start-up"))

        # Every use of self.arm happens on this one thread; callbacks hand work to it.
        self.sim_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sim")
        self.episode_running = False
        self.in_flight = InFlight()
        """Episodes being run; when the node stops, they end (aborted) and reply before it is destroyed."""
        self.arm = self.on_sim(SimArm, ArmConfig(control_hz=rate))
        self.load_scene(generate_seeded(family, seed, SceneParams()))
        self.episode_counter = itertools.count()

        live = MutuallyExclusiveCallbackGroup()
        self.joint_pub = self.create_publisher(JointState, "joint_states", 10)
        self.objects_pub = self.create_publisher(ObjectStates, "object_states", 10)
        self.camera_pub = self.create_publisher(Image, "camera/image_raw", 2)
        self.create_subscription(
            JointTrajectory, "joint_trajectory_controller/joint_trajectory", self.on_trajectory, 10, callback_group=live
        )
        self.create_subscription(
            Float64MultiArray, "gripper_controller/commands", self.on_gripper, 10, callback_group=live
        )
        self.create_subscription(SceneSpec, "scene", self.on_scene, 2, callback_group=live)
        self.create_timer(1.0 / rate, self.on_control_tick, callback_group=live)
        if self.camera_rate > 0:
            self.create_timer(1.0 / self.camera_rate, self.on_camera_tick, callback_group=live)
        self.action_server = ActionServer(
            self,
            RunEpisode,
            "run_episode",
            execute_callback=self.execute_episode,
            goal_callback=lambda goal: GoalResponse.REJECT if self.in_flight.stopping.is_set() else GoalResponse.ACCEPT,
            cancel_callback=lambda handle: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )
        self.get_logger().info(f"sim_bridge {self.robot_id} ready ({rate:g} Hz)")

    # ---------------------------------------------------------------- live control
    def on_sim(self, fn: object, *args: object, **kwargs: object) -> object:
        """Run ``fn(*args, **kwargs)`` on the simulation thread and return its result."""
        return self.sim_thread.submit(fn, *args, **kwargs).result()

    def load_scene(self, scene: Scene) -> None:
        """Reset the arm into ``scene`` and hold the home posture."""

        def load() -> None:
            self.arm.reset(scene)
            self.q_target = self.arm.joint_positions()[:7]
            self.gripper = -1.0

        self.on_sim(load)

    def on_scene(self, msg: SceneSpec) -> None:
        """Load a scene sent on the ``scene`` topic."""
        try:
            self.load_scene(Scene.from_dict(msg_to_dict(msg)))
            self.get_logger().info(f"loaded scene {msg.scene_id}")
        except (ValueError, KeyError, ConversionError) as exc:
            self.get_logger().error(f"scene {msg.scene_id!r} rejected: {exc}")

    def on_trajectory(self, msg: JointTrajectory) -> None:
        """Take the last point of a trajectory as the joint target; reject bad commands."""
        try:
            if not msg.points:
                raise CommandError("trajectory has no points")
            point = msg.points[-1]
            self.q_target = joint_targets_from_trajectory(
                list(msg.joint_names),
                list(point.positions),
                self.q_target,
                self.arm._q_lo,
                self.arm._q_hi,
            )
        except CommandError as exc:
            self.get_logger().error(f"joint_trajectory rejected: {exc}")

    def on_gripper(self, msg: Float64MultiArray) -> None:
        """Finger opening command in metres."""
        data = list(msg.data)
        if len(data) != 1 or not math.isfinite(data[0]) or not 0.0 <= data[0] <= MAX_FINGER_OPENING:
            self.get_logger().error(
                f"gripper command rejected: expected [opening in 0..{MAX_FINGER_OPENING} m], got {data}"
            )
            return
        self.gripper = 1.0 - 2.0 * data[0] / MAX_FINGER_OPENING

    def on_control_tick(self) -> None:
        """Advance the simulation one control step toward the live targets; publish the state."""
        if self.episode_running:
            return

        def tick() -> None:
            self.arm.step_joint_targets(self.q_target, self.gripper)
            self.publish_state()

        self.on_sim(tick)

    def on_camera_tick(self) -> None:
        """Publish a camera frame (skipped while an episode runs)."""
        if self.episode_running:
            return
        frame = self.on_sim(self.arm.render, self.camera_size, self.camera_size)
        msg = image_to_msg(frame, frame_id=f"{self.robot_id}/scene_camera")
        msg.header.stamp = self.get_clock().now().to_msg()
        self.camera_pub.publish(msg)

    def publish_state(self) -> None:
        """Publish joint states and object states of the arm (runs on the simulation thread)."""
        stamp = self.get_clock().now().to_msg()
        joints = JointState()
        joints.header.stamp = stamp
        joints.header.frame_id = f"{self.robot_id}/base"
        joints.name = list(self.arm.joint_names)
        joints.position = self.arm.joint_positions().tolist()
        joints.velocity = self.arm.joint_velocities().tolist()
        joints.effort = self.arm.joint_efforts().tolist()
        self.joint_pub.publish(joints)
        objects = dict_to_msg(ObjectStates, {"objects": [o.to_dict() for o in self.arm.object_states()]})
        objects.header.stamp = stamp
        objects.header.frame_id = "world"
        objects.scene_id = self.arm.scene.scene_id if self.arm.scene else ""
        self.objects_pub.publish(objects)

    # ---------------------------------------------------------------- episodes
    def execute_episode(self, goal_handle: object) -> RunEpisode.Result:
        """Run one episode for a RunEpisode goal; invalid goals end with a REJECTED result."""
        with self.in_flight.running():
            return self._execute_episode(goal_handle)

    def _execute_episode(self, goal_handle: object) -> RunEpisode.Result:
        goal = goal_handle.request
        episode_id = goal.episode_id or f"{self.robot_id}-{next(self.episode_counter):06d}"
        result = RunEpisode.Result()
        try:
            scene = Scene.from_dict(msg_to_dict(goal.scene))
            root = self.checkpoints.root_for(goal.policy_version, goal.policy_sha256, goal.checkpoint_service)
            act = policies.resolve(goal.policy_version, scene, root, self.control_hz)
        except (ValueError, KeyError, ConversionError, policies.PolicyNotAvailableError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"episode {episode_id} rejected: {error}")
            result.accepted, result.error = False, error
            result.result = EpisodeResult(
                episode_id=episode_id,
                scene_id=goal.scene.scene_id,
                policy_version=goal.policy_version,
                robot_id=self.robot_id,
                status=STATUS_REJECTED,
                status_detail=error,
            )
            result.result.header.stamp = self.get_clock().now().to_msg()
            goal_handle.abort()
            return result

        feedback = RunEpisode.Feedback()

        def progress(step: int, stage: int, potential: float) -> None:
            feedback.step, feedback.stage, feedback.potential = step, stage, potential
            goal_handle.publish_feedback(feedback)
            self.publish_state()

        config = RecordingConfig(keyframes=goal.record_keyframes, keyframe_size=self.keyframe_size,
                                 sample_every=max(1, goal.sample_every))

        def run() -> object:
            episode = run_recorded_episode(
                self.arm,
                scene,
                act,
                episode_id=episode_id,
                policy_version=goal.policy_version,
                robot_id=self.robot_id,
                max_steps=goal.max_steps,
                config=config,
                progress=progress,
                should_stop=lambda: goal_handle.is_cancel_requested or self.in_flight.stopping.is_set(),
            )
            self.q_target = self.arm.joint_positions()[:7]
            return episode

        self.episode_running = True
        try:
            episode = self.on_sim(run)
        finally:
            self.episode_running = False
        result.accepted = True
        result.result = dict_to_msg(EpisodeResult, episode.to_result_dict())
        result.result.header.stamp = self.get_clock().now().to_msg()
        result.result.keyframes = [
            image_to_msg(frame, frame_id=f"{self.robot_id}/scene_camera") for frame in episode.keyframes
        ]
        if goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.succeed()
        self.get_logger().info(
            f"episode {episode_id} in {scene.scene_id}: success={episode.success} steps={episode.steps} "
            f"stage={episode.stage_reached}/{episode.num_stages}"
        )
        return result


def _release_arm(node: SimBridgeNode) -> None:
    node.on_sim(node.arm.close)
    node.sim_thread.shutdown()


def main(args: list[str] | None = None) -> None:
    """Run the node with a multi-threaded executor until shutdown."""
    run_node(SimBridgeNode, args, make_executor=lambda: MultiThreadedExecutor(num_threads=3), on_exit=_release_arm,
             in_flight=lambda node: node.in_flight)


if __name__ == "__main__":
    main()
