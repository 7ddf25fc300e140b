# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``arm_bridge`` node: a real arm driven by ros2_control, behind the same ``RunEpisode`` action as ``sim_bridge``.

Run one per arm, in the arm's namespace, with the robot's YAML file
(``ros2 run coda_engine arm_bridge --ros-args -r __ns:=/panda_lab1 -p robot_config:=/path/robot.yaml``).
Topic names, joint names, limits and frames come from that file (:class:`coda_engine.real.robot.RobotConfig`).

Reads ``joint_states`` (sensor_msgs/JointState), the perception topic (coda_msgs/ObjectStates: object poses by
name) and the camera (sensor_msgs/Image); writes the joint trajectory controller topic
(trajectory_msgs/JointTrajectory, one point per command) and the gripper command topic
(std_msgs/Float64MultiArray ``[opening m]``); publishes ``scene_request`` (coda_msgs/SceneSpec) when an episode
needs a scene set up.

- ``run_episode`` (coda_msgs/action/RunEpisode): one episode with a policy version from ``checkpoint_root``, or
  fetched from the loop's ``checkpoint_service`` into ``checkpoint_cache`` when the robot's computer does not have
  it (checked against the goal's model hash; :func:`coda_engine.real.episode.run_real_episode`); versions refused
  by the sim-first gate, bad scenes and goals sent while an episode runs end REJECTED with the reason.
- ``arm_command`` (coda_msgs/ArmCommand) in: live control by a ``policy`` node (same action space; gate, IK
  and safety as in episodes); ignored while an episode runs. The gate reads the version under ``checkpoint_root``
  or, when the command names its model's SHA-256 and that model is not there, the copy of exactly that model in
  ``checkpoint_cache`` (where this machine's policy node or an episode fetched it).
- ``estop`` (std_srvs/Trigger) and the ``estop`` topic (std_msgs/Bool, true = stop): hold and latch (a stop
  signal while latched restarts the quiet time below); ``reset_estop`` (std_srvs/Trigger) releases the latch only
  when every stop signal has been quiet for the robot's ``safety.estop_release_quiet_s`` (robot file, default 2 s)
  and the topic's latest message is false; the bridge then moves the arm home at ``safety.rehome_speed_fraction``
  of its joint speed limits and accepts commands and episodes only once it is home (a failed re-home latches the
  e-stop again). The answer tells, not its timing: a refused release answers ``success: false`` with why and how
  long is left, a release ``success: true``; both are also ``safety_events`` messages.
- ``operator_verdict`` (std_srvs/SetBool, data = success): an operator's verdict on the running episode
  (robots configured with ``success_check: operator``); refused when no episode runs.
- ``safety_events`` (coda_msgs/SafetyEvent, reliable + transient local, last 1000): every intervention (live
  commands refused one after another for the same reason are one event) and every transition of the e-stop, in
  this order: ``estop`` (latched), ``estop_release_refused`` (why, how long is left), ``estop_released`` (how long
  it was latched; the caller is not known to the service: a Trigger request names none and rclpy gives a service
  callback no caller identity), ``rehoming``, then ``home`` or ``rehome_failed`` (followed by ``estop``, latched
  again). The log lines come in the same order. Stamps strictly increase in publishing order (one nanosecond past
  the previous event when the clock has not moved past it), so (robot, stamp, kind) names each event once and sorts
  them in order; the loop stores each as a memory record.

The safety layer (:class:`coda_engine.real.safety.SafetyLayer`) is always on: a watchdog timer at the control
rate holds the arm when the joint state stream or a live policy goes silent. The arm's streams, ``arm_command`` and
that watchdog belong to a second node, ``<bridge name>_live``, spun single-threaded on its own thread
(:class:`LivePath`); the bridge node keeps the action and the services.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.duration import Duration
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from coda_engine import policies
from coda_engine.checkpoint_share import CheckpointShareError, find_version
from coda_engine.episodes import STATUS_REJECTED, RecordingConfig
from coda_engine.real.episode import ArmKinematics, JointReading, PoseReading, move_home, run_real_episode
from coda_engine.real.robot import (
    N_ARM_JOINTS,
    JointOrder,
    RobotConfig,
    RobotConfigError,
    gripper_from_message,
)
from coda_engine.real.safety import Intervention, SafetyLayer, gate_check
from coda_engine.ros.checkpoints import CheckpointFetcher
from coda_engine.ros.convert import ConversionError, dict_to_msg, msg_to_dict
from coda_engine.ros.images import image_to_msg, msg_to_image
from coda_engine.ros.security import cell_security
from coda_engine.ros.spin import InFlight, NodeThread, run_node
from coda_engine.sim.scene import Scene
from coda_msgs.action import RunEpisode
from coda_msgs.msg import ArmCommand, EpisodeResult, ObjectStates, SafetyEvent, SceneSpec

EVENT_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""QoS of ``safety_events``: a memory node started later still gets the recent interventions."""


class _BridgeIO:
    """:class:`coda_engine.real.episode.ArmIO` over the node's topics for one episode."""

    def __init__(self, node: ArmBridgeNode, goal_handle: object, episode_id: str) -> None:
        self.node, self.goal_handle, self.episode_id = node, goal_handle, episode_id
        self.started = time.monotonic()

    def now(self) -> float:
        return time.monotonic()

    def sleep_until(self, t: float) -> None:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def joints(self) -> JointReading | None:
        return self.node.joints

    def objects(self) -> PoseReading | None:
        return self.node.poses

    def camera(self) -> np.ndarray | None:
        msg = self.node.image
        return msg_to_image(msg) if msg is not None else None

    def send(self, q: np.ndarray, opening: float, duration: float) -> None:
        self.node.send(q, opening, duration)

    def request_scene(self, scene: Scene) -> None:
        self.node.scene_pub.publish(dict_to_msg(SceneSpec, scene.to_dict()))

    def stop_reason(self) -> str:
        if self.goal_handle.is_cancel_requested:
            return "goal cancelled"
        if self.node.in_flight.stopping.is_set():
            return "the bridge is shutting down"
        if self.node.safety.latched:
            return f"e-stop latched ({self.node.safety.latch_reason})"
        return ""

    def operator_verdict(self) -> bool | None:
        verdict = self.node.verdict
        return verdict[1] if verdict is not None and verdict[0] >= self.started else None

    def record(self, intervention: Intervention) -> None:
        self.node.record(intervention, self.episode_id)


UNKNOWN_CALLER = ("not known to the service (a std_srvs/Trigger request names no caller and rclpy gives a service "
                  "callback none)")
"""What an ``estop_released`` event says of who called ``reset_estop``."""

LIVE_LOOKUP_RETRY_S = 1.0
"""A live command's version not found on this machine is looked up again after this long, s (not every command)."""


class LivePath:
    """The bridge's live paths on a node of their own, spun single-threaded by their own thread.

    It takes the arm's streams (joint states, perception, camera) and live ``arm_command`` messages, and runs the
    live watchdog; the callbacks are the bridge's. rclpy's MultiThreadedExecutor rebuilds its wait set over every
    entity of its nodes several times per message: with the streams on the bridge node, an idle bridge spent most
    of a core at 75 messages/s and the GIL contention delayed the joint states it stamps. This executor waits on
    these five entities only. The node is ``<bridge name>_live`` in the bridge's namespace and subscribes to the
    topic names as the bridge resolves them, so the bridge's command-line remappings apply to it.
    """

    def __init__(self, bridge: ArmBridgeNode, subscriptions: list[tuple[type, str, Callable[[Any], None], int]],
                 timer: tuple[float, Callable[[], None]]) -> None:
        """Create the node: ``subscriptions`` are (type, topic, callback, depth), ``timer`` is (period, callback)."""
        self.node = Node(
            f"{bridge.get_name()}_live",
            namespace=bridge.get_namespace(),
            context=bridge.context,
            use_global_arguments=False,
            start_parameter_services=False,
        )
        for msg_type, topic, callback, depth in subscriptions:
            self.node.create_subscription(msg_type, bridge.resolve_topic_name(topic), callback, depth)
        self.node.create_timer(timer[0], timer[1])
        self._spinner = NodeThread(self.node, "arm-live")

    def close(self) -> None:
        """Stop the thread and destroy the node."""
        self._spinner.close()


class ArmBridgeNode(Node):
    """One real arm on the ROS graph (see the module docstring)."""

    def __init__(self) -> None:
        """Load the robot file, create the safety layer and the interfaces."""
        super().__init__("arm_bridge")

        def param(name: str, default: object, description: str) -> object:
            return self.declare_parameter(name, default, ParameterDescriptor(description=description)).value

        path = str(param("robot_config", "", "the robot's YAML file (topics, joints, limits, frames, gate)"))
        self.keyframe_size = int(param("keyframe_size", 64, "keyframe width and height in episode results, px"))
        if not path:
            raise RobotConfigError("parameter robot_config is empty: give the robot's YAML file")
        self.robot = RobotConfig.load(Path(path))
        self.checkpoints = CheckpointFetcher.from_parameters(self)
        self.checkpoint_root = self.checkpoints.checkpoint_root
        self.safety = SafetyLayer(self.robot.safety, self.robot.control_rate_hz, joint_names=self.robot.joint_names)
        self.kin = ArmKinematics(self.robot.control_rate_hz)
        self.period = 1.0 / self.robot.control_rate_hz
        topics = self.robot.topics
        self.joints: JointReading | None = None
        self.poses: PoseReading | None = None
        self.image: Image | None = None
        self.verdict: tuple[float, bool] | None = None
        self.episode_lock = threading.Lock()
        self.in_flight = InFlight()
        """Episodes being run; when the node stops, they end (aborted) and reply before it is destroyed."""
        self.episode_counter = itertools.count()
        self.event_lock = threading.RLock()
        """Held while an event is stamped and published, and around each e-stop transition with its event, so
        the events (and their log lines) come in the order of the transitions."""
        self._last_event_ns = 0
        self.live_version = ""
        self.live_last: float | None = None
        self.live_holding = False
        self.live_hold_kind = ""  # kind of the intervention that holds the live path (reported once per hold)
        self.gates: dict[str, bool] = {}
        self.live_roots: dict[tuple[str, str], tuple[Path | None, str, float]] = {}
        """(version, model SHA-256) of live commands -> (root holding the version, why not found, when looked up)."""
        self._name_warned: set[str] = set()
        self.joint_order = JointOrder((*self.robot.joint_names, *self.robot.finger_joints))
        self.send_lock = threading.Lock()

        self.trajectory_pub = self.create_publisher(JointTrajectory, topics.joint_trajectory, 10)
        self.gripper_pub = self.create_publisher(Float64MultiArray, topics.gripper_command, 10)
        self.scene_pub = self.create_publisher(SceneSpec, topics.scene_request, 2)
        self.event_pub = self.create_publisher(SafetyEvent, "safety_events", EVENT_QOS)
        self.live = LivePath(
            self,
            [
                (JointState, topics.joint_states, self.on_joint_states, 20),
                (ObjectStates, topics.object_poses, self.on_objects, 10),
                (Image, topics.camera, self.on_image, 2),
                (ArmCommand, "arm_command", self.on_arm_command, 10),
            ],
            timer=(self.period, self.on_watchdog),
        )
        services = MutuallyExclusiveCallbackGroup()
        self.create_subscription(Bool, "estop", self.on_estop_topic, 10, callback_group=services)
        self.create_service(Trigger, "estop", self.on_estop, callback_group=services)
        self.create_service(Trigger, "reset_estop", self.on_reset_estop, callback_group=services)
        self.create_service(SetBool, "operator_verdict", self.on_verdict, callback_group=services)
        self.action_server = ActionServer(
            self,
            RunEpisode,
            "run_episode",
            execute_callback=self.execute_episode,
            goal_callback=lambda goal: GoalResponse.REJECT if self.in_flight.stopping.is_set() else GoalResponse.ACCEPT,
            cancel_callback=lambda handle: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )
        exposed = cell_security(os.environ).warning(f"arm_bridge {self.robot.robot_id}")
        if exposed:  # loudly: an arm anyone on the network can release and drive
            self.get_logger().error(f"SECURITY: {exposed}")
        self.get_logger().info(
            f"arm_bridge {self.robot.robot_id} ready: {self.robot.control_rate_hz:g} Hz, commands on "
            f"{topics.joint_trajectory}, success by {self.robot.success_check}, "
            f"gate {self.robot.gate.min_sim_success:.0%} in simulation"
        )

    # ---------------------------------------------------------------- inputs
    def on_joint_states(self, msg: JointState) -> None:
        """Keep the latest arm state in engine order; a message lacking a configured joint is dropped (logged once)."""
        try:
            picked = self.joint_order.pick(msg.name, msg.position)
        except (KeyError, ValueError) as exc:
            problem = str(exc.args[0])
            if problem not in self._name_warned:  # logged once per kind of problem
                self._name_warned.add(problem)
                self.get_logger().error(f"{problem}: message dropped")
            return
        q, opening = picked[:N_ARM_JOINTS], float(picked[N_ARM_JOINTS:].sum())
        if not (np.all(np.isfinite(q)) and np.isfinite(opening)):
            self.get_logger().error("joint_states dropped: non-finite position", throttle_duration_sec=5.0)
            return
        self.joints = JointReading(time.monotonic(), q, opening)

    def on_objects(self, msg: ObjectStates) -> None:
        """Keep the latest perceived positions of the visible objects."""
        positions = {}
        for obj in msg.objects:
            p = obj.pose.position
            value = np.array([p.x, p.y, p.z], dtype=np.float64)
            if obj.visible and obj.name and np.all(np.isfinite(value)):
                positions[obj.name] = value
        self.poses = PoseReading(time.monotonic(), positions)

    def on_image(self, msg: Image) -> None:
        """Keep the latest camera frame (decoded only when an episode takes a keyframe)."""
        self.image = msg

    # ---------------------------------------------------------------- commands out
    def send(self, q: np.ndarray, opening: float, duration: float) -> None:
        """Publish one trajectory point (the robot's joint names) and the gripper opening."""
        traj = JointTrajectory()
        traj.joint_names = list(self.robot.joint_names)
        point = JointTrajectoryPoint()
        point.positions = [float(v) for v in q]
        point.time_from_start = Duration(seconds=duration).to_msg()
        traj.points = [point]
        grip = Float64MultiArray()
        grip.data = [float(min(max(opening, 0.0), self.robot.max_finger_opening))]
        with self.send_lock:
            self.trajectory_pub.publish(traj)
            self.gripper_pub.publish(grip)

    def hold(self) -> None:
        """Command the measured position (nothing without a joint state)."""
        joints = self.joints
        if joints is not None:
            opening = joints.opening
            self.send(joints.q, opening, self.period)

    def record(self, intervention: Intervention, episode_id: str = "") -> None:
        """Publish an intervention or e-stop transition on ``safety_events`` and log it (stamps strictly increase)."""
        fields = intervention.to_event(self.robot.robot_id, episode_id)
        msg = dict_to_msg(SafetyEvent, fields)
        msg.header.frame_id = self.robot.base_frame
        with self.event_lock:
            stamp = max(self.get_clock().now().nanoseconds, self._last_event_ns + 1)
            self._last_event_ns = stamp
            msg.header.stamp = Time(nanoseconds=stamp).to_msg()
            self.event_pub.publish(msg)
            text = f"safety {intervention.kind}: {intervention.detail} (holding={intervention.holding})"
            if intervention.kind in ("rehoming", "home"):
                self.get_logger().info(text)
            elif intervention.kind == "rehome_failed":
                self.get_logger().error(text)
            else:
                self.get_logger().warning(text)

    # ---------------------------------------------------------------- e-stop and operator
    def trigger_estop(self, reason: str) -> None:
        """Hold, latch and record; a trigger while latched only holds and restarts the quiet time."""
        self.hold()
        with self.event_lock:
            was = self.safety.latched
            intervention = self.safety.estop(time.monotonic(), reason)
            if not was:
                self.record(intervention)

    def on_estop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """``estop`` service: hold and latch."""
        self.trigger_estop("estop service called")
        response.success, response.message = True, f"e-stop latched on {self.robot.robot_id}"
        return response

    def on_estop_topic(self, msg: Bool) -> None:
        """``estop`` topic: true holds and latches; false marks the signal quiet (only ``reset_estop`` releases)."""
        with self.event_lock:
            was = self.safety.latched
            intervention = self.safety.estop_signal(time.monotonic(), bool(msg.data))
            if intervention is not None:
                self.hold()
                if not was:
                    self.record(intervention)

    def on_reset_estop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """``reset_estop`` service: release the latch if the stop signals were quiet, then re-home (own thread).

        A refusal (``success: false``, the message says why and how long is left) and a release (``success: true``)
        are each a ``safety_events`` message; the release is followed by ``rehoming`` before the move starts.
        """
        with self.event_lock:
            latched = self.safety.latched
            now = time.monotonic()
            released, response.message = self.safety.release(now)
            response.success = released
            if not latched:  # nothing to release: no transition
                self.get_logger().info(f"reset_estop: {response.message}")
                return response
            if not released:
                self.record(Intervention("estop_release_refused", f"reset_estop refused: {response.message}", now))
                return response
            self.live_last = None
            self.record(Intervention("estop_released", f"{response.message}; reset_estop caller: {UNKNOWN_CALLER}",
                                     now, holding=False))
            fraction = self.robot.safety.rehome_speed_fraction
            self.record(Intervention("rehoming", f"moving home at {fraction:g} of the joint speed limits; commands "
                                                 "and episodes are refused until the arm is home", now, holding=False))
        threading.Thread(target=self._rehome, name="arm-rehome", daemon=True).start()
        return response

    def _rehome(self) -> None:
        """Move home at reduced speed after a release; accept commands when home, latch again when it fails."""
        io = _BridgeIO(self, None, "rehome")

        def intervene(intervention: Intervention, joints: JointReading | None) -> str:
            self.hold()
            self.record(intervention)
            return f"{intervention.kind}: {intervention.detail}"

        def fresh() -> tuple[JointReading | None, str]:
            joints = self.joints
            if self.in_flight.stopping.is_set():
                return joints, "the bridge is shutting down"
            if self.safety.latched:
                return joints, f"e-stop latched again ({self.safety.latch_reason})"
            now = time.monotonic()
            watchdog = self.safety.check_watchdog(now, joints.stamp if joints else None, None)
            if watchdog is not None or joints is None:
                return joints, intervene(watchdog or Intervention("watchdog", "no joint_states received", now), joints)
            return joints, ""

        with self.in_flight.running(), self.episode_lock:  # a stopping bridge ends the move and waits for it
            opening = self.joints.opening if self.joints is not None else self.robot.max_finger_opening
            reason = move_home(io, self.kin, self.safety, self.robot, opening, fresh, intervene,
                               speed_fraction=self.robot.safety.rehome_speed_fraction, rehome=True)
        if self.in_flight.stopping.is_set():
            return
        with self.event_lock:  # home and a new latch cannot cross: the events say which came first
            if not reason and self.safety.latched:
                reason = f"e-stop latched again ({self.safety.latch_reason})"
            now = time.monotonic()
            if not reason:
                self.safety.rehomed()
                self.record(Intervention("home", f"{self.robot.robot_id} is home after the e-stop release: commands "
                                                 "and episodes accepted", now, holding=False))
                return
            self.hold()
            self.record(Intervention("rehome_failed", f"re-home after the e-stop release failed: {reason}", now))
            if not self.safety.latched:
                self.trigger_estop(f"re-home after the release failed: {reason}")

    def on_verdict(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        """``operator_verdict``: the operator says whether the running episode succeeded (refused when none runs)."""
        if not self.episode_lock.locked():
            response.success = False
            response.message = f"no episode is running on {self.robot.robot_id}: verdict not taken"
            return response
        self.verdict = (time.monotonic(), bool(request.data))
        response.success, response.message = True, f"verdict {'success' if request.data else 'failure'} noted"
        return response

    # ---------------------------------------------------------------- live control
    def gate(self, version: str, root: Path | None = None) -> str:
        """'' when ``version`` (in ``root``, default ``checkpoint_root``) may drive this arm, else the gate's reason.

        A pass is remembered per version folder (versions of different runs share names, not folders); a refusal is
        checked again next time (the version's evaluation in simulation may have been written since).
        """
        root = root or self.checkpoint_root
        folder = root / version if (root and version) else None
        key = str(folder) if folder is not None else version
        if key in self.gates:
            return ""
        refused = gate_check(version, folder, self.robot.gate)
        if not refused:
            self.gates[key] = True
        return refused

    def live_gate(self, version: str, sha256: str, now: float) -> str:
        """Return '' when a live command's version may drive the arm, else why (folder looked up per version+hash)."""
        if version in ("", *policies.DEMONSTRATORS):
            return self.gate(version)
        root, why, when = self.live_roots.get((version, sha256), (None, "", -LIVE_LOOKUP_RETRY_S))
        if root is None and now - when >= LIVE_LOOKUP_RETRY_S:
            try:
                root, why = find_version(version, sha256, self.checkpoint_root, self.checkpoints.cache)
            except CheckpointShareError as exc:
                root, why = None, str(exc)
            self.live_roots[(version, sha256)] = (root, why, now)
        if root is None:
            return f"policy version {version!r} is not on this machine: {why}"
        return self.gate(version, root)

    def on_arm_command(self, msg: ArmCommand) -> None:
        """Live control: gate, IK, safety, then the controller (not while an episode runs or the e-stop holds).

        Ignored while an episode runs, while the e-stop is latched and while the arm re-homes after a release.
        """
        if self.episode_lock.locked() or self.safety.latched or self.safety.rehoming:
            return
        now = time.monotonic()
        refused = self.live_gate(msg.policy_version, msg.policy_sha256, now)
        if refused:
            if msg.policy_version != self.live_version:
                self.live_version = msg.policy_version
                self.hold()
                self.record(Intervention("gate", refused, now))
            return
        self.live_version = msg.policy_version
        joints = self.joints
        if msg.hold or joints is None:
            self.live_last = now
            self.hold()
            return
        delta = np.array([msg.delta.x, msg.delta.y, msg.delta.z], dtype=np.float64)
        tcp = self.kin.tcp(joints.q)
        if self.live_holding or self.live_last is None:  # (re)starting: displacements from the measured pose
            self.kin.commander.reset(tcp, joints.q)
        q_target = self.kin.commander.command(delta, tcp, joints.q)
        intervention = self.safety.check_command(now, joints.q, q_target, tcp, self.kin.commander.tcp_target)
        self.live_last = now
        if intervention is not None:
            self.hold()
            self.kin.commander.reset(tcp, joints.q)
            if not self.live_holding or intervention.kind != self.live_hold_kind:
                self.record(intervention)  # once per hold: a policy pushing on a limit does not flood the events
            self.live_holding, self.live_hold_kind = True, intervention.kind
            return
        self.live_holding = False
        self.send(q_target, self.robot.opening(gripper_from_message(msg.gripper)), self.period)

    def on_watchdog(self) -> None:
        """Hold once when the state stream or a live policy goes silent (episodes check their own inputs)."""
        if self.episode_lock.locked() or self.live_last is None or self.live_holding:
            return
        now = time.monotonic()
        joints = self.joints
        intervention = self.safety.check_watchdog(now, joints.stamp if joints else None, self.live_last)
        if intervention is not None:
            self.live_holding, self.live_hold_kind = True, intervention.kind
            self.hold()
            self.record(intervention)

    # ---------------------------------------------------------------- episodes
    def _rejected(self, goal_handle: object, episode_id: str, error: str) -> RunEpisode.Result:
        goal = goal_handle.request
        self.get_logger().error(f"episode {episode_id} rejected: {error}")
        result = RunEpisode.Result(accepted=False, error=error)
        result.result = EpisodeResult(episode_id=episode_id, scene_id=goal.scene.scene_id,
                                      policy_version=goal.policy_version, source=EpisodeResult.SOURCE_REAL,
                                      robot_id=self.robot.robot_id, status=STATUS_REJECTED, status_detail=error)
        result.result.header.stamp = self.get_clock().now().to_msg()
        goal_handle.abort()
        return result

    def execute_episode(self, goal_handle: object) -> RunEpisode.Result:
        """Run one episode for a RunEpisode goal (one at a time); invalid goals end REJECTED."""
        with self.in_flight.running():
            return self._execute_episode(goal_handle)

    def _execute_episode(self, goal_handle: object) -> RunEpisode.Result:
        goal = goal_handle.request
        episode_id = goal.episode_id or f"{self.robot.robot_id}-{next(self.episode_counter):06d}"
        if not self.episode_lock.acquire(blocking=False):
            return self._rejected(goal_handle, episode_id, f"{self.robot.robot_id} is running another episode")
        try:
            try:
                scene = Scene.from_dict(msg_to_dict(goal.scene))
                scene.validate()
            except (ValueError, KeyError, ConversionError) as exc:
                return self._rejected(goal_handle, episode_id, f"bad scene: {type(exc).__name__}: {exc}")
            try:  # the version's folder here, or fetched from the run (checked against the goal's hash)
                root = self.checkpoints.root_for(goal.policy_version, goal.policy_sha256, goal.checkpoint_service)
                refused = self.gate(goal.policy_version, root)
            except policies.PolicyNotAvailableError as exc:  # the gate cannot pass a version it cannot see
                root, refused = None, str(exc)
            if refused:
                self.record(Intervention("gate", refused, time.monotonic(), holding=False), episode_id)
                return self._rejected(goal_handle, episode_id, f"sim-first gate: {refused}")
            if self.safety.latched:
                return self._rejected(goal_handle, episode_id, f"e-stop latched ({self.safety.latch_reason})")
            if self.safety.rehoming:
                return self._rejected(goal_handle, episode_id, "re-homing after an e-stop release")
            try:
                act = policies.resolve(goal.policy_version, scene, root, self.robot.control_rate_hz)
            except policies.PolicyNotAvailableError as exc:
                return self._rejected(goal_handle, episode_id, str(exc))
            feedback = RunEpisode.Feedback()

            def progress(step: int, stage: int, potential: float) -> None:
                feedback.step, feedback.stage, feedback.potential = step, stage, potential
                goal_handle.publish_feedback(feedback)

            self.live_last, self.live_holding = None, False
            episode = run_real_episode(
                _BridgeIO(self, goal_handle, episode_id), scene, act, robot=self.robot, safety=self.safety,
                kinematics=self.kin, episode_id=episode_id, policy_version=goal.policy_version,
                max_steps=goal.max_steps,
                recording=RecordingConfig(keyframes=goal.record_keyframes, keyframe_size=self.keyframe_size,
                                          privileged_objects=False, sample_every=max(1, goal.sample_every)),
                progress=progress,
            )
        finally:
            self.episode_lock.release()
        result = RunEpisode.Result(accepted=True)
        result.result = dict_to_msg(EpisodeResult, episode.to_result_dict())
        result.result.header.stamp = self.get_clock().now().to_msg()
        result.result.keyframes = [image_to_msg(f, frame_id=self.robot.camera_frame) for f in episode.keyframes]
        if goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.succeed()
        self.get_logger().info(
            f"episode {episode_id} in {scene.scene_id}: status={episode.status} success={episode.success} "
            f"steps={episode.steps} stage={episode.stage_reached}/{episode.num_stages} {episode.status_detail}"
        )
        return result


def main(args: list[str] | None = None) -> None:
    """Run the node with a multi-threaded executor until shutdown."""
    run_node(ArmBridgeNode, args, make_executor=lambda: MultiThreadedExecutor(num_threads=4),
             on_exit=lambda node: node.live.close(), in_flight=lambda node: node.in_flight)


if __name__ == "__main__":
    main()
