# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``policy`` node: the language-conditioned policy commanding an arm at the control rate.

Topics (relative to the node's namespace):

- ``joint_states`` (sensor_msgs/JointState) in: the Panda's joints; the tool point comes from forward kinematics
- ``object_states`` (coda_msgs/ObjectStates) in: the scene's objects (simulator stream or perception)
- ``instruction`` (std_msgs/String) in: the task; embedded once per string (MiniLM), the stage restarts
- ``policy_version`` (coda_msgs/PolicyVersion) in: a new version, loaded off the control path (SHA-256 checked)
  and swapped in atomically
- ``arm_command`` (coda_msgs/ArmCommand) out: one per tick; ``hold`` with a reason when inputs are missing,
  stale or not finite, or no version is loaded (the reason is also logged when it changes); it names the version
  and its model's SHA-256, so an ``arm_bridge`` gates exactly that model

With ``robot_config`` (a real arm's robot file, the one its ``arm_bridge`` reads) the node reads that driver's joint
names, its ``topics.joint_states`` and ``topics.object_poses`` and its ``control_rate_hz``, so it drives the arm live
through the bridge (``launch/coda_real_arm.launch.py policy:=true``).

On a machine without the run's disk, ``checkpoint_service`` names the run's ``GetCheckpoint`` service (``coda run``
serves ``/coda_run/get_checkpoint``, the ``coda_loop`` node ``/coda_loop/get_checkpoint``, for the whole run): a
version whose folder is not here with the announced model hash, ``initial_version`` included, is taken from the
cache (``checkpoint_cache``, shared with the bridges of this machine) or fetched once, checked and cached
(:mod:`coda_engine.checkpoint_share`).

Two control paths, chosen by ``control_path``; both decide exactly alike (tested command for command):

- ``cpp`` (default): the control loop runs on a C++ thread of its own (``coda_core_cpp._rt.ControlLoop``) that
  talks to rcl directly, with a node of its own (``<name>_control``, same namespace): it takes ``joint_states`` and
  ``object_states``, computes forward kinematics, the observation and the stage, runs the C++ action mean, clips,
  holds, and publishes ``arm_command``, waiting in an rcl wait set with a timeout (the next tick's deadline, or
  100 ms when ticking on ``joint_states``). That thread never takes Python's GIL. This node keeps the rest:
  parameters, instructions (embedded here), version loading; each (version, instruction) is handed over as one
  model that the loop swaps in between two ticks. Hold reasons are logged from the loop's status at 4 Hz.
- ``python``: the same tick in this process (:class:`coda_policy.control.PolicyController`) on the rclpy executor;
  the reference, and the fallback where the C++ extension's rcl part cannot be loaded. ``busy_poll_s`` and
  ``executor`` apply to this path.

The logic lives in :mod:`coda_policy.control`; this node only converts and schedules. The Python path runs the
controller's compiled action mean (C++ ``coda_core_cpp.ObjectTokenActor``, else NumPy; rebuilt per version and
instruction, checked against the network; the eager network is the last fallback); the C++ path needs the C++ one
and holds, saying why, for a version without it. ``busy_poll_s`` > 0 trades a
CPU core for latency: after each command the node polls for the next input for that long instead of sleeping.
Torch runs on one intra-op thread without oneDNN:
for a single observation through this small network both only add overhead (oneDNN's GELU costs several times
the native kernel at these sizes). After a version or the text model is loaded, the objects alive so far are
frozen out of Python's cyclic collector (``gc.freeze``): a full collection over the libraries and models would
otherwise stall one tick for hundreds of milliseconds.
"""

from __future__ import annotations

import gc
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import rclpy
import torch
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from coda_engine.ros.spin import shutdown_context, stop_on_first_signal
from coda_msgs.msg import ArmCommand, ObjectStates, PolicyVersion
from coda_policy.control import ControlConfig, PandaKinematics, PolicyController, load_version, native_tick_spec
from coda_policy.ros.convert import checkpoint_folder, fill_command_msg, objects_from_msg, stamp_seconds

PARAMETERS: dict[str, tuple[object, str]] = {
    "control_rate_hz": (10.0, "command rate, Hz"),
    "max_input_age_s": (0.5, "joint/object inputs older than this make the node hold, s"),
    "max_delta_m": (0.05, "largest end-effector displacement per command and axis, m"),
    "family": ("reach", "task family whose default staged program tracks the stage index"),
    "program": ("", "staged potential program source tracking the stage the policy reads (overrides the family's; "
                    "must be the program the policy was trained with)"),
    "checkpoint_root": ("", "folder of version folders; relative checkpoint URIs resolve under it"),
    "initial_version": ("", "version folder under checkpoint_root loaded at start-up (empty: none)"),
    "checkpoint_service": ("", "the run's GetCheckpoint service: versions not readable here are fetched from it, "
                               "hash-checked and cached (empty: local folders only)"),
    "checkpoint_cache": ("", "folder of fetched versions (empty: $XDG_CACHE_HOME or ~/.cache, then coda/checkpoints)"),
    "trigger": ("timer", "'timer': command at control_rate_hz; 'joint_states': one command per joint_states message"),
    "executor": ("single", "'single' (SingleThreadedExecutor) or 'events' (rclpy's EventsExecutor, lower latency)"),
    "busy_poll_s": (0.0, "after each command keep polling for input this long instead of sleeping (0: off), s"),
    "control_path": ("cpp", "'cpp': the control loop on a C++ thread over rcl (no Python per tick); 'python': "
                            "the same tick on this node's executor (the reference)"),
    "realtime_priority": (0, "control_path 'cpp': run the loop thread SCHED_FIFO at this priority (1-99; needs "
                              "CAP_SYS_NICE or an rtprio limit, else it runs normally scheduled and says so); 0: off"),
    "robot_config": ("", "a real arm's robot file (as arm_bridge's): its joint names, joint_states and perception "
                         "topics and control rate replace the defaults (empty: the engine's Panda names)"),
}


class PolicyNode(Node):
    """Publishes ArmCommand at the control rate from the latest inputs and the loaded policy version."""

    def __init__(self) -> None:
        """Declare parameters, build the controller, create the topics and the control timer."""
        super().__init__("policy")
        torch.set_num_threads(1)
        torch.backends.mkldnn.enabled = False
        for name, (default, text) in PARAMETERS.items():
            self.declare_parameter(name, default, ParameterDescriptor(description=text))
        value = {name: self.get_parameter(name).value for name in PARAMETERS}
        joints_topic, objects_topic, joint_names, finger_joints = "joint_states", "object_states", (), ()
        if value["robot_config"]:
            from coda_engine.real.robot import RobotConfig

            robot = RobotConfig.load(Path(str(value["robot_config"])))  # RobotConfigError names file and field
            joints_topic, objects_topic = robot.topics.joint_states, robot.topics.object_poses
            joint_names, finger_joints = robot.joint_names, robot.finger_joints
            given = float(value["control_rate_hz"])
            if given not in (robot.control_rate_hz, PARAMETERS["control_rate_hz"][0]):
                self.get_logger().warning(f"control_rate_hz={given:g} ignored: {value['robot_config']} sets "
                                          f"{robot.control_rate_hz:g} Hz")
            value["control_rate_hz"] = robot.control_rate_hz  # the bridge's watchdog expects this rate
        self.config = ControlConfig(control_rate_hz=float(value["control_rate_hz"]),
                                    max_input_age=float(value["max_input_age_s"]),
                                    max_delta=float(value["max_delta_m"]), family=str(value["family"]),
                                    program=str(value["program"]))
        self.checkpoint_root = str(value["checkpoint_root"])
        self.checkpoint_service = str(value["checkpoint_service"])
        self.fetcher = None
        if self.checkpoint_service:
            from coda_engine.ros.checkpoints import CheckpointFetcher

            cache = str(value["checkpoint_cache"])
            self.fetcher = CheckpointFetcher(self, None, Path(cache) if cache else None)
        self.controller = PolicyController(self.config)
        self.kinematics = PandaKinematics(joint_names, finger_joints)
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy_loader")
        self._embedder = None
        self._last_reason = None
        self.control_path = str(value["control_path"])
        if self.control_path not in ("cpp", "python"):
            raise ValueError(f"parameter control_path={self.control_path!r} must be 'cpp' or 'python'")
        self.trigger = str(value["trigger"])
        if self.trigger not in ("timer", "joint_states"):
            raise ValueError(f"parameter trigger={self.trigger!r} must be 'timer' or 'joint_states'")
        self.busy_poll_ns = int(float(value["busy_poll_s"]) * 1e9)
        if self.busy_poll_ns < 0:
            raise ValueError(f"parameter busy_poll_s={value['busy_poll_s']} must be >= 0")
        self.poll_until_ns = 0
        """Until this time.monotonic_ns() the main loop polls instead of blocking (see ``busy_poll_s``)."""
        self.loop = None
        """The C++ control loop (control_path 'cpp'), else None."""
        if self.control_path == "cpp":
            self.busy_poll_ns = 0  # nothing to poll for here: the loop waits in its own thread
            self._start_loop(joints_topic, objects_topic)
        else:
            self.publisher = self.create_publisher(ArmCommand, "arm_command", 10)
            self._command = ArmCommand()  # filled and published every tick (publish serialises it at once)
            self.create_subscription(JointState, joints_topic, self.on_joint_states, 10)
            self.create_subscription(ObjectStates, objects_topic, self.on_object_states, 10)
            self._obs_stamp = None
            if self.trigger == "timer":
                self.timer = self.create_timer(1.0 / self.config.control_rate_hz, self.on_tick)
        # Volatile on purpose: a transient-local subscription would not match the volatile publishers that
        # `ros2 topic pub` and most task managers create, while this one matches latched publishers as well.
        self.create_subscription(String, "instruction", self.on_instruction, 10)
        self.create_subscription(PolicyVersion, "policy_version", self.on_policy_version, 10)
        if value["initial_version"]:
            version = str(value["initial_version"])
            self.worker.submit(self._load, version, Path(self.checkpoint_root) / version, "")

    def _start_loop(self, joints_topic: str, objects_topic: str) -> None:
        """Start the C++ control loop on this node's topics (resolved here: remappings and namespace apply)."""
        from coda_core_cpp import _rt

        options = {
            "node_name": f"{self.get_name()}_control", "node_namespace": self.get_namespace(),
            "joint_states_topic": self.resolve_topic_name(joints_topic),
            "object_states_topic": self.resolve_topic_name(objects_topic),
            "arm_command_topic": self.resolve_topic_name("arm_command"),
            "tick_on_joint_states": self.trigger == "joint_states", "rate_hz": float(self.config.control_rate_hz),
            "realtime_priority": int(self.get_parameter("realtime_priority").value),
        }
        spec = native_tick_spec(self.config, self.controller.builder, self.kinematics)
        self.loop = _rt.ControlLoop(spec, options)
        self.loop.set_model(self.controller.native_model())
        self.loop.start()
        self._loop_status = {"reason_changes": 0, "ignored_joint_messages": 0, "error": "", "realtime": "off"}
        self.create_timer(0.25, self.on_loop_status)
        rate = "per joint_states" if self.trigger == "joint_states" else f"{self.config.control_rate_hz:g} Hz"
        self.get_logger().info(f"control loop in C++ over rcl: {options['joint_states_topic']} + "
                               f"{options['object_states_topic']} -> {options['arm_command_topic']} ({rate})")

    def on_loop_status(self) -> None:
        """Log what the C++ loop did since the last look: hold reasons that changed, ignored inputs, a failure."""
        stats, seen = self.loop.stats(), self._loop_status
        if stats["reason_changes"] != seen["reason_changes"]:
            if stats["reason"] and stats["reason"] != self._last_reason:
                self.get_logger().warning(f"holding: {stats['reason']}")
            self._last_reason = stats["reason"]
        if stats["ignored_joint_messages"] != seen["ignored_joint_messages"]:
            self.get_logger().warning(f"joint_states ignored: {stats['ignored']}", throttle_duration_sec=5.0)
        if stats["error"] and stats["error"] != seen["error"]:
            self.get_logger().error(f"the control loop stopped: {stats['error']}")
        if stats["realtime"] != seen["realtime"]:
            log = self.get_logger().warning if "refused" in stats["realtime"] else self.get_logger().info
            log(f"control loop scheduling: {stats['realtime']}")
        self._loop_status = {key: stats[key] for key in seen}

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _stamp(self, stamp: object) -> float:
        seconds = stamp_seconds(stamp)  # type: ignore[arg-type]
        return seconds if seconds > 0 else self._now()

    def on_joint_states(self, msg: JointState) -> None:
        """Forward kinematics of the reported joints -> the controller's arm state."""
        try:
            ee, opening = self.kinematics.forward(msg.name, msg.position)
        except (KeyError, ValueError) as exc:
            self.get_logger().warning(f"joint_states ignored: {exc}", throttle_duration_sec=5.0)
            return
        self.controller.set_arm(self._stamp(msg.header.stamp), ee, opening)
        self._obs_stamp = msg.header.stamp
        if self.trigger == "joint_states":
            self.on_tick()

    def on_object_states(self, msg: ObjectStates) -> None:
        """Object states -> the controller."""
        self.controller.set_objects(self._stamp(msg.header.stamp), objects_from_msg(msg))

    def on_instruction(self, msg: String) -> None:
        """Embed the instruction off the control path, then hand it to the controller."""
        self.worker.submit(self._set_instruction, msg.data)

    def _set_instruction(self, text: str) -> None:
        if self._embedder is None:
            from coda_policy.serving import embedder

            self._embedder = embedder()
        self.controller.set_instruction(text, self._embedder.embed_one(text))
        if self.loop is not None:
            self.loop.set_model(self.controller.native_model())
        gc.freeze()
        self.get_logger().info(f"instruction: {text!r}{self._compile_note()}")

    def on_policy_version(self, msg: PolicyVersion) -> None:
        """Load the announced version off the control path; swap it in when it is verified."""
        try:
            folder = checkpoint_folder(msg.checkpoint_uri, self.checkpoint_root)
        except ValueError as exc:
            self.get_logger().error(f"policy_version {msg.version_id!r} rejected: {exc}")
            return
        self.worker.submit(self._load, msg.version_id, folder, msg.checkpoint_sha256)

    def _here(self, version: str, folder: Path, sha256: str) -> Path:
        """Return a folder on this machine holding ``version`` with model hash ``sha256`` (empty: any).

        ``folder`` when it holds that model (or no service is set: loading then says what is wrong), else the
        cached or fetched copy. Raises ``LookupError`` saying why the version is neither here nor fetchable.
        """
        if self.fetcher is None:
            return folder
        from coda_engine.checkpoint_share import model_mismatch

        if not model_mismatch(folder, sha256):
            return folder
        root = self.fetcher.root_for(version, sha256, self.checkpoint_service)
        if root is None:
            raise LookupError("the announcement names no version id to fetch")
        return root / version

    def _load(self, version: str, folder: Path, sha256: str) -> None:
        try:
            folder = self._here(version, folder, sha256)
        except LookupError as exc:
            self.get_logger().error(f"policy version {version!r} not loaded: {exc}")
            return
        try:
            loaded = load_version(folder, sha256, self.config.control_rate_hz)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            self.get_logger().error(f"policy version in {folder} not loaded: {exc}")
            return
        self.controller.swap(loaded)
        if self.loop is not None:
            self.loop.set_model(self.controller.native_model())
        gc.freeze()
        self.get_logger().info(f"policy version {loaded.version} active{self._compile_note()}")

    def _compile_note(self) -> str:
        if self.controller.compile_error:
            self.get_logger().warning(f"running the eager network: {self.controller.compile_error}")
        if not self.controller.compiled:
            return ""
        note = f"; C++ not used: {self.controller.backend_note}" if self.controller.backend_note else ""
        return f" (action mean: {self.controller.backend}{note})"

    def on_tick(self) -> None:
        """One control period: compute and publish the command; log hold reasons when they change."""
        cmd = self.controller.tick(self._now())
        # The command is stamped with the observation it was computed from (ArmCommand.header).
        stamp = self._obs_stamp if self._obs_stamp is not None else self.get_clock().now().to_msg()
        self.publisher.publish(fill_command_msg(self._command, cmd, stamp))
        if self.busy_poll_ns:
            self.poll_until_ns = time.monotonic_ns() + self.busy_poll_ns
        if cmd.reason != self._last_reason:
            if cmd.hold:
                self.get_logger().warning(f"holding: {cmd.reason}")
            self._last_reason = cmd.reason

    def destroy_node(self) -> None:
        """Stop the loader thread and the C++ control loop, then the node."""
        self.worker.shutdown(wait=False, cancel_futures=True)
        if self.loop is not None:
            self.loop.stop()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    """Run the node until SIGINT/SIGTERM or an external shutdown.

    The signals are handled here (rclpy's own handlers are off; the first one stops the node, later ones are
    ignored: :func:`coda_engine.ros.spin.stop_on_first_signal`) and the executor spins in short slices, so
    the process leaves promptly: with rclpy's handlers it could hang in interpreter finalisation.
    """
    stop = stop_on_first_signal()
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node = PolicyNode()
    if node.get_parameter("executor").value == "events":
        from rclpy.experimental import EventsExecutor

        executor = EventsExecutor()
    else:
        executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        while not stop.is_set() and rclpy.ok():
            # Polling keeps this core's caches warm for the next observation; blocking lets the core sleep, and
            # code run just after a wake-up is several times slower (most on virtual machines).
            executor.spin_once(timeout_sec=0.0 if time.monotonic_ns() < node.poll_until_ns else 0.1)
    except ExternalShutdownException:
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        shutdown_context()


if __name__ == "__main__":
    main()
