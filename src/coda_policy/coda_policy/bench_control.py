# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda bench control``: observation-to-command latency through the ``policy`` node over DDS.

The ``policy`` node runs as its own process with ``trigger: joint_states`` (one ArmCommand per observation,
stamped with it) and a real policy version written for the run (a checkpoint of an untrained network: the
latency does not depend on the weights). This process plays the arm and the perception: it sends the
instruction once, object states at 10 Hz, and ``joint_states`` on a schedule, and times the ``arm_command``
carrying each observation's stamp. Every figure comes from the same process, executor and message type:

- ``latency_us_p50`` / ``latency_us_p99``: ``--ticks`` observations at up to 200 Hz, from just before publishing
  the observation to the arrival of its command (serialisation, transport and both executors included), one
  round trip at a time; ``ticks`` is how many of them were answered by a command that ran the network.
- ``bare_rtt_us_p50`` / ``bare_rtt_us_p99``: the reference, measured in the same run, interleaved tick by tick
  (half a period after each observation): the same JointState echoed by a bare rclpy relay process.
- ``misses_20hz`` / ``misses_100hz``: observations whose command did not arrive within one period, over
  ``--seconds`` at each rate (a lost command is a miss).
- ``action_mean_us_cpp`` / ``_numpy`` / ``_eager``: one action mean of the same network (two objects) in this
  process before the run: the node's C++ ObjectTokenActor against its NumPy reference and the torch network.
- ``hold_fraction``: the share of commands that were holds. The run fails (exit 1) if the node only held:
  then it never ran the network and the latency would mean nothing.

``--busy-poll S`` sets the node's ``busy_poll_s``: after each command it polls for the next input for S seconds
instead of sleeping, which keeps its core warm (at the price of that core).

``--executor`` picks the executor of the node, the relay and this process alike (``events``: rclpy's
EventsExecutor, ``single``: SingleThreadedExecutor). Every executor here is spun from its process's main
thread only: on Kilted's rclpy, an EventsExecutor spinning in a background thread while another thread
publishes stops delivering messages (the publishing thread blocks in the executor's event callback).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

VERSION = "bench-untrained"
INSTRUCTION = "touch the red cube"
ECHO_IN, ECHO_OUT = "bench_echo_in", "bench_echo_out"
OBJECT_PERIOD_NS = 100_000_000  # object states at 10 Hz, like a perception stream
ANSWER_DEPTH = 1000
ANSWER_TIMEOUT_NS = 500_000_000  # latency phase: an answer later than this counts as lost
TARGETS: dict[str, tuple[str, float]] = {
    "latency_us_p50": ("<=", 800.0),
    "latency_us_p99": ("<=", 1500.0),
    "misses_100hz": ("<=", 0.0),
}


@dataclass
class ControlBenchConfig:
    """Settings of one benchmark run."""

    ticks: int = 5000
    """Observations timed for the latency percentiles."""
    seconds: float = 60.0
    """Duration at 20 Hz and again at 100 Hz for the deadline misses, s."""
    executor: str = "events"
    """Executor of the node, the relay and the probe: 'events' or 'single'."""
    latency_rate_hz: float = 200.0
    """Rate of the latency observations (the bare round trips are interleaved at the same rate)."""
    warmup_ticks: int = 200
    """Observations sent (and not counted) before timing starts."""
    startup_timeout: float = 300.0
    """Longest wait for the node's first command that runs the network (loading torch and MiniLM), s."""
    family: str = "reach"
    """Task family of the node's stage tracking."""
    busy_poll_s: float = 0.0
    """The node's ``busy_poll_s`` parameter: after each command it polls this long instead of sleeping, s."""

    def __post_init__(self) -> None:
        """Check the fields; errors name the field."""
        errors = []
        if self.ticks < 10:
            errors.append(f"ControlBenchConfig.ticks={self.ticks} must be >= 10")
        if not self.seconds > 0:
            errors.append(f"ControlBenchConfig.seconds={self.seconds} must be > 0")
        if self.executor not in ("events", "single"):
            errors.append(f"ControlBenchConfig.executor={self.executor!r} must be 'events' or 'single'")
        if not 1.0 <= self.latency_rate_hz <= 1000.0:
            errors.append(f"ControlBenchConfig.latency_rate_hz={self.latency_rate_hz} must be in [1, 1000]")
        if not 0.0 <= self.busy_poll_s <= 1.0:
            errors.append(f"ControlBenchConfig.busy_poll_s={self.busy_poll_s} must be in [0, 1]")
        if self.warmup_ticks < 0:
            errors.append(f"ControlBenchConfig.warmup_ticks={self.warmup_ticks} must be >= 0")
        if errors:
            raise ValueError("; ".join(errors))


def percentiles_us(samples_ns: list[int]) -> tuple[float, float]:
    """Return the 50th and 99th percentiles of durations in ns, in microseconds (NaN without samples)."""
    if not samples_ns:
        return float("nan"), float("nan")
    arr = np.asarray(samples_ns, dtype=np.float64) / 1e3
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def write_version(root: Path, seed: int = 0) -> str:
    """Write an untrained policy version under ``root`` (checkpoint format of coda_policy.checkpoint)."""
    from coda_policy.checkpoint import save_checkpoint
    from coda_policy.config import PolicyConfig
    from coda_policy.sft import build_policy

    net = build_policy(PolicyConfig(), seed).net.eval()
    save_checkpoint(root / VERSION, net, VERSION, meta={"purpose": "coda bench control (untrained weights)"})
    return VERSION


def action_mean_timings(objects: int = 2, calls: int = 1000, repeats: int = 5, seed: int = 0) -> dict[str, float]:
    """Time one action mean of the default policy network per backend, in µs (median over ``repeats``).

    ``cpp``: coda_core_cpp.ObjectTokenActor; ``numpy``: coda_policy.control.NumpyActionMean (its reference);
    ``eager``: the torch network (1 thread, inference mode). ``objects`` objects are present in the scene.
    """
    import torch

    from coda_policy.config import PolicyConfig
    from coda_policy.control import compiled_action_mean, numpy_action_mean
    from coda_policy.sft import build_policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        net = build_policy(PolicyConfig(), seed).net.eval()
        cfg = net.cfg
        rng = np.random.default_rng(seed)
        embedding = torch.from_numpy(rng.normal(size=(1, cfg.instruction_dim)).astype(np.float32))
        actor, backend, note = compiled_action_mean(net, embedding)
        if backend != "cpp":
            raise RuntimeError(f"the C++ action mean is not available: {note}")
        reference = numpy_action_mean(net, embedding, checks=0)
        obs = rng.uniform(-0.5, 0.5, cfg.obs_dim).astype(np.float32)
        obs[[cfg.layout[f"obj{k}_present"][0] for k in range(cfg.max_objects)]] = np.arange(cfg.max_objects) < objects
        obs[cfg.layout["stage_index"][0]] = 0.0
        tensor = torch.from_numpy(obs)[None]

        def eager() -> Any:
            with torch.inference_mode():
                return net(tensor, embedding)

        out = {}
        for name, fn in (("cpp", lambda: actor(obs)), ("numpy", lambda: reference(obs)), ("eager", eager)):
            runs = []
            for _ in range(repeats):
                start = time.perf_counter_ns()
                for _ in range(calls):
                    fn()
                runs.append((time.perf_counter_ns() - start) / calls / 1e3)
            out[name] = round(float(np.median(runs)), 1)
        return out
    finally:
        torch.set_num_threads(threads)


def make_executor(kind: str, context: Any) -> Any:
    """Return the executor named ``kind`` ('events' or 'single') for ``context``."""
    if kind == "events":
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context)
    from rclpy.executors import SingleThreadedExecutor

    return SingleThreadedExecutor(context=context)


def relay_main(executor_kind: str) -> int:
    """Run the bare reference: republish every JointState of ``bench_echo_in`` on ``bench_echo_out``."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import JointState

    stop = threading.Event()
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    node = rclpy.create_node("coda_bench_relay")
    publisher = node.create_publisher(JointState, ECHO_OUT, 10)
    node.create_subscription(JointState, ECHO_IN, publisher.publish, 10)
    executor = make_executor(executor_kind, node.context)
    executor.add_node(node)
    try:
        while not stop.is_set() and rclpy.ok():  # same loop as the policy node's
            executor.spin_once(timeout_sec=0.1)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def _stamp_ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def _log_tail(path: Path, chars: int = 3000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-chars:]


def _object(name: str, shape: int, role: int, color: str, rgb: tuple[float, float, float], half: float,
            xyz: tuple[float, float, float]) -> Any:
    """Return one ``coda_msgs/ObjectState`` of the benchmark's scene (half extent ``half`` m at ``xyz``, upright)."""
    from coda_msgs.msg import ObjectState

    obj = ObjectState(name=name, shape=shape, role=role, color_name=color, mass=0.1, friction=1.0, visible=True)
    obj.rgba.r, obj.rgba.g, obj.rgba.b, obj.rgba.a = (*rgb, 1.0)
    obj.size.x = obj.size.y = obj.size.z = half
    obj.pose.position.x, obj.pose.position.y, obj.pose.position.z = xyz
    obj.pose.orientation.w = 1.0
    return obj


class _Probe:
    """The arm side: publishes inputs, records when the answer to each observation arrives (main thread only)."""

    def __init__(self, executor_kind: str) -> None:
        import rclpy
        from rclpy.context import Context
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        from coda_engine.sim import panda
        from coda_msgs.msg import ArmCommand, ObjectState, ObjectStates

        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("coda_bench_control", context=self.context)
        self.executor = make_executor(executor_kind, self.context)
        self.joints_pub = self.node.create_publisher(JointState, "joint_states", 10)
        self.objects_pub = self.node.create_publisher(ObjectStates, "object_states", 10)
        self.instruction_pub = self.node.create_publisher(String, "instruction", 10)
        self.echo_pub = self.node.create_publisher(JointState, ECHO_IN, 10)
        # A deep reader queue: answers must not be dropped here when this process is descheduled for a while.
        self.node.create_subscription(ArmCommand, "arm_command", self._on_command, ANSWER_DEPTH)
        self.node.create_subscription(JointState, ECHO_OUT, self._on_echo, ANSWER_DEPTH)
        self.executor.add_node(self.node)
        self.instruction = String(data=INSTRUCTION)
        self.joints = JointState(
            name=[*panda.ARM_JOINTS, *panda.FINGER_JOINTS], position=[*panda.HOME_QPOS, 0.04, 0.04]
        )
        self.objects = ObjectStates(objects=[
            _object("red_cube", ObjectState.SHAPE_BOX, ObjectState.ROLE_TARGET, "red", (0.9, 0.0, 0.0), 0.02,
                    (0.5, 0.05, 0.42)),
            _object("blue_ball", ObjectState.SHAPE_SPHERE, ObjectState.ROLE_DISTRACTOR, "blue", (0.0, 0.0, 0.9),
                    0.025, (0.45, -0.1, 0.425)),
        ])
        self.commands: dict[int, tuple[int, bool]] = {}
        """Observation stamp (ns) -> (arrival, perf_counter ns; the command was a hold)."""
        self.echoes: dict[int, int] = {}
        """Echoed stamp (ns) -> arrival, perf_counter ns."""
        self.last_hold_reason = ""
        self._last_key = 0
        self._last_objects = 0

    def _on_command(self, msg: Any) -> None:
        now = time.perf_counter_ns()
        self.commands.setdefault(_stamp_ns(msg.header.stamp), (now, bool(msg.hold)))
        if msg.hold:
            self.last_hold_reason = msg.hold_reason

    def _on_echo(self, msg: Any) -> None:
        self.echoes.setdefault(_stamp_ns(msg.header.stamp), time.perf_counter_ns())

    def matched(self) -> bool:
        """Return True when every topic of the benchmark has found its peer."""
        return (
            all(
                p.get_subscription_count() > 0
                for p in (self.joints_pub, self.objects_pub, self.instruction_pub, self.echo_pub)
            )
            and self.node.count_publishers("arm_command") > 0
            and self.node.count_publishers(ECHO_OUT) > 0
        )

    def _send(self, publisher: Any) -> tuple[int, int]:
        """Publish the joint state with a fresh unique stamp; return (stamp ns, send time perf_counter ns)."""
        key = max(time.time_ns(), self._last_key + 1)  # the node's clock: the stamp must be current
        self._last_key = key
        self.joints.header.stamp.sec, self.joints.header.stamp.nanosec = divmod(key, 1_000_000_000)
        sent = time.perf_counter_ns()
        publisher.publish(self.joints)
        return key, sent

    def observe(self) -> tuple[int, int]:
        """Send one observation to the policy node."""
        return self._send(self.joints_pub)

    def echo(self) -> tuple[int, int]:
        """Send one joint state through the bare relay."""
        return self._send(self.echo_pub)

    def refresh_objects(self, force: bool = False) -> None:
        """Publish the object states with a current stamp, at most every 100 ms unless forced."""
        now = time.perf_counter_ns()
        if force or now - self._last_objects >= OBJECT_PERIOD_NS:
            self.objects.header.stamp.sec, self.objects.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
            self.objects_pub.publish(self.objects)
            self._last_objects = now

    def spin_until(self, deadline_ns: int, done: Any = None) -> bool:
        """Process arrivals until ``done()`` is true (returns True) or the deadline passes (returns False)."""
        while not (done is not None and done()):
            remaining = deadline_ns - time.perf_counter_ns()
            if remaining <= 0:
                return False
            if not self.context.ok():
                raise RuntimeError("interrupted")
            self.executor.spin_once(timeout_sec=min(remaining, 50_000_000) / 1e9)
        return True

    def close(self) -> None:
        """Destroy the node and the context."""
        import rclpy

        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


def _wait_ready(probe: _Probe, node_proc: subprocess.Popen, log: Path, timeout: float) -> None:
    """Feed the node until it answers an observation with a command that ran the network."""
    end = time.monotonic() + timeout
    instruction_sent = -1e9
    while True:
        if node_proc.poll() is not None:
            raise RuntimeError(f"the policy node exited with {node_proc.returncode}; its output:\n{_log_tail(log)}")
        if time.monotonic() > end:
            raise RuntimeError(
                f"the policy node gave no command that ran the network within {timeout:.0f} s "
                f"(last hold: {probe.last_hold_reason!r}); its output:\n{_log_tail(log)}"
            )
        if not probe.matched():
            probe.spin_until(time.perf_counter_ns() + 100_000_000)
            continue
        if time.monotonic() - instruction_sent > 30.0:  # once, again only if the node still has none
            probe.instruction_pub.publish(probe.instruction)
            instruction_sent = time.monotonic()
        probe.refresh_objects(force=True)
        key, sent = probe.observe()
        probe.spin_until(sent + 100_000_000)  # 10 Hz: leave the starting node its CPU
        if key in probe.commands and not probe.commands[key][1]:
            return


def _wait_echo(probe: _Probe, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        key, _ = probe.echo()
        if probe.spin_until(time.perf_counter_ns() + 100_000_000, lambda k=key: k in probe.echoes):
            return
    raise RuntimeError(f"the bare relay did not echo within {timeout:.0f} s")


def _latency_phase(probe: _Probe, ticks: int, rate_hz: float) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Observations at up to ``rate_hz``, each followed half a period later by one bare echo.

    Each round trip is waited for (up to ``ANSWER_TIMEOUT_NS``) before the next message is sent, so no two are
    ever in flight together and none waits behind another; a slow answer delays the schedule instead. Returns
    (stamp, send time) of the observations and of the echoes.
    """
    period = int(1e9 / rate_hz)
    observed, echoed = [], []
    due = time.perf_counter_ns() + period
    for _ in range(ticks):
        probe.spin_until(due)
        key, sent = probe.observe()
        observed.append((key, sent))
        probe.spin_until(sent + ANSWER_TIMEOUT_NS, lambda key=key: key in probe.commands)
        probe.refresh_objects()
        probe.spin_until(due + period // 2)
        key, sent = probe.echo()
        echoed.append((key, sent))
        probe.spin_until(sent + ANSWER_TIMEOUT_NS, lambda key=key: key in probe.echoes)
        due = max(due + period, time.perf_counter_ns())
    return observed, echoed


def _deadline_phase(probe: _Probe, rate_hz: float, seconds: float) -> tuple[int, int, list[int]]:
    """Observations at ``rate_hz`` for ``seconds``; return (ticks, misses, latencies of the answered ones, ns)."""
    period = int(1e9 / rate_hz)
    count = max(1, round(seconds * rate_hz))
    misses, latencies = 0, []
    start = time.perf_counter_ns() + period
    for k in range(count):
        due = start + k * period
        probe.spin_until(due)
        key, sent = probe.observe()
        if probe.spin_until(due + period, lambda key=key: key in probe.commands):
            arrival = probe.commands[key][0]
            latencies.append(arrival - sent)
            misses += arrival > due + period
        else:
            misses += 1
        probe.refresh_objects()
    return count, misses, latencies


def measure(cfg: ControlBenchConfig) -> dict[str, Any]:
    """Start the node and the relay, run the phases of the module docstring and return the figures."""
    means = action_mean_timings()  # in this process, before anything else runs
    work = Path(tempfile.mkdtemp(prefix="coda-bench-control-"))
    write_version(work)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    node_cmd = [
        sys.executable,
        "-m",
        "coda_policy.ros.policy_node",
        "--ros-args",
        "-p",
        "trigger:=joint_states",
        "-p",
        f"executor:={cfg.executor}",
        "-p",
        f"busy_poll_s:={cfg.busy_poll_s}",
        "-p",
        f"family:={cfg.family}",
        "-p",
        f"checkpoint_root:={work}",
        "-p",
        f"initial_version:={VERSION}",
    ]
    relay_cmd = [sys.executable, "-m", "coda_policy.bench_control", "--relay", "--executor", cfg.executor]
    node_log, relay_log = work / "policy_node.log", work / "relay.log"
    procs: list[subprocess.Popen] = []
    probe = None
    load_start = os.getloadavg()[0]
    ok = False
    try:
        with node_log.open("w") as out:
            procs.append(subprocess.Popen(node_cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
        with relay_log.open("w") as out:
            procs.append(subprocess.Popen(relay_cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
        probe = _Probe(cfg.executor)
        _wait_ready(probe, procs[0], node_log, cfg.startup_timeout)
        _wait_echo(probe)
        _latency_phase(probe, cfg.warmup_ticks, cfg.latency_rate_hz)
        probe.commands.clear()
        probe.echoes.clear()
        gc.collect()
        gc.disable()  # keep the probe's own pauses out of the figures (the node keeps its collector)
        observed, echoed = _latency_phase(probe, cfg.ticks, cfg.latency_rate_hz)
        answers = [probe.commands[k] for k, _ in observed if k in probe.commands]
        latencies = [
            probe.commands[k][0] - sent for k, sent in observed if k in probe.commands and not probe.commands[k][1]
        ]
        rtts = [probe.echoes[k] - sent for k, sent in echoed if k in probe.echoes]
        deadline = {rate: _deadline_phase(probe, rate, cfg.seconds) for rate in (20.0, 100.0)}
        gc.enable()
        holds = sum(hold for _, hold in probe.commands.values())
        commands = len(probe.commands)
        if not latencies:
            raise RuntimeError(
                f"the policy node only held ({len(answers)} answers, last hold: "
                f"{probe.last_hold_reason!r}): no latency of the network was measured; its output:\n"
                f"{_log_tail(node_log)}"
            )
        ok = True
    finally:
        gc.enable()
        if probe is not None:
            probe.close()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            sys.stderr.write(f"coda bench control: logs kept in {work}\n")
    p50, p99 = percentiles_us(latencies)
    r50, r99 = percentiles_us(rtts)
    result: dict[str, Any] = {
        "latency_us_p50": round(p50, 1),
        "latency_us_p99": round(p99, 1),
        "latency_us_max": round(max(latencies) / 1e3, 1),
        "bare_rtt_us_p50": round(r50, 1),
        "bare_rtt_us_p99": round(r99, 1),
        "node_overhead_us_p50": round(p50 - r50, 1),
        "action_mean_us_cpp": means["cpp"],
        "action_mean_us_numpy": means["numpy"],
        "action_mean_us_eager": means["eager"],
        "misses_20hz": deadline[20.0][1],
        "misses_100hz": deadline[100.0][1],
        "ticks": len(latencies),
        "ticks_sent": len(observed),
        "lost": len(observed) - len(answers),
        "hold_fraction": round(holds / max(commands, 1), 4),
        "ticks_20hz": deadline[20.0][0],
        "ticks_100hz": deadline[100.0][0],
        "latency_us_p99_100hz": round(percentiles_us(deadline[100.0][2])[1], 1),
        "executor": cfg.executor,
        "busy_poll_s": cfg.busy_poll_s,
        "seconds": cfg.seconds,
        "load_avg_1min": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }
    result["targets"] = {key: f"{cmp} {bound:g}" for key, (cmp, bound) in TARGETS.items()}
    result["targets_met"] = {key: bool(result[key] <= bound) for key, (_, bound) in TARGETS.items()}
    return result


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (also ``coda bench control``): print the figures, one JSON object with --json."""
    arm = argparse.ArgumentParser(add_help=False)
    arm.add_argument("--arm", choices=("none", "fake"), default="none")
    known, rest = arm.parse_known_args(argv)
    if known.arm == "fake":  # command latency through an arm_bridge to the stand-in ros2_control arm
        from coda_engine.ros.bench_arm import main as arm_main

        return arm_main(rest)
    defaults = ControlBenchConfig()
    parser = argparse.ArgumentParser(prog="coda bench control", description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", choices=("none", "fake"), default="none",
                        help="fake: command latency through arm_bridge to fake_ros2_control_arm instead "
                             "(`coda bench control --arm fake --help`)")
    parser.add_argument("--ticks", type=int, default=defaults.ticks, help="observations for the latency percentiles")
    parser.add_argument(
        "--seconds",
        type=float,
        default=defaults.seconds,
        help="duration at 20 Hz and at 100 Hz for the deadline misses, s",
    )
    parser.add_argument(
        "--executor",
        choices=("events", "single"),
        default=defaults.executor,
        help="executor of the node, the relay and the probe",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=defaults.startup_timeout,
        help="longest wait for the node's first command that runs the network, s",
    )
    parser.add_argument(
        "--busy-poll",
        type=float,
        default=defaults.busy_poll_s,
        help="the node polls this long after each command instead of sleeping (costs a core while it polls), s",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--relay", action="store_true", help=argparse.SUPPRESS)  # the bare reference process
    args = parser.parse_args(argv)
    if args.relay:
        return relay_main(args.executor)
    try:
        cfg = ControlBenchConfig(
            ticks=args.ticks,
            seconds=args.seconds,
            executor=args.executor,
            startup_timeout=args.startup_timeout,
            busy_poll_s=args.busy_poll,
        )
    except ValueError as exc:
        parser.error(str(exc))
    try:
        result = measure(cfg)
    except RuntimeError as exc:
        sys.stderr.write(f"coda bench control: error: {exc}\n")
        return 1
    if args.json:
        print(json.dumps(result))
        return 0
    for key, value in result.items():
        if key in ("targets", "targets_met"):
            continue
        target = result["targets"].get(key, "")
        status = "" if not target else ("  ok" if result["targets_met"][key] else "  MISSED")
        print(f"{key:24s} {value!s:>16}  {target}{status}")
    print(f"config {json.dumps(asdict(cfg))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
