# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda bench control``: observation-to-command latency through the ``policy`` node over DDS, per control path.

Four processes answer one probe, in one run: the ``policy`` node with its default C++ control path
(``control_path: cpp``), the same node on its Python path (``control_path: python``), a bare rclpy relay and a bare
C relay over rcl (``coda_rcl_relay``). The nodes run with ``trigger: joint_states`` (one ArmCommand per observation,
stamped with it) and a real policy version written for the run (a checkpoint of an untrained network: the latency
does not depend on the weights). The probe plays the arm and the perception, in C++ over rcl
(``coda_core_cpp._rt.Probe``, so the figures measure the node and not the probe): it sends the instruction once,
object states at 10 Hz, and ``joint_states`` on a schedule, and times on a monotonic clock the answer that carries
each observation's stamp. Figures:

- ``latency_us_p50`` / ``latency_us_p99`` / ``latency_us_max``: the default (C++) path: ``--ticks`` observations
  at 200 Hz, from just before publishing the observation to the arrival of its command (serialisation,
  transport, the node), one round trip at a time; ``ticks`` counts the ones answered by a command that ran the
  network.
- ``paths``: the same for each path (``cpp``, ``python``), plus ``misses_100hz`` / ``misses_500hz`` (observations
  at that rate for ``--seconds``, whose command did not arrive within one period; a lost command is a miss), the
  p99 at each rate and ``hold_fraction``.
- ``relays``: the round trip of the same JointState through the rclpy relay (``rclpy``, with ``--executor``) and
  the C relay (``rcl``). All round trips of the latency phase are interleaved tick by tick (each waits for its
  answer before the next message goes out), so every target sees the same machine. The C relay also runs the
  deadline phases (``misses_100hz`` / ``misses_500hz``, as the paths'): the misses of a node that only receives and
  publishes over the same transport, the floor any control path on this machine starts from.
- ``ratio_to_rclpy_relay_p50``: the default path's p50 over the rclpy relay's.
- ``misses_100hz`` / ``misses_500hz``: the default path's.
- ``action_mean_us_cpp`` / ``_numpy`` / ``_eager``: one action mean of the same network (two objects) in this
  process before the run: the C++ ObjectTokenActor against its NumPy reference and the torch network.
- ``load_avg`` (1, 5, 15 min) at the start and the end, ``cpus``: the machine the figures were taken on.

The run fails (exit 1) if a path only held: then it never ran the network and its latency would mean nothing.
``--realtime-priority N`` runs everything on the measured paths SCHED_FIFO at priority N, as a robot's control
stack would run: the C++ path's loop thread and its middleware threads (the node's ``realtime_priority``), the
Python path's node and both relays (started under ``chrt``), and the probe (this process's thread and its
middleware threads). It needs CAP_SYS_NICE or an rtprio limit; 0 (default): normal scheduling.
``--busy-poll S`` sets the Python path's ``busy_poll_s`` (after each command it polls for S seconds instead of
sleeping). ``--executor`` picks the executor of the Python path and of the rclpy relay.
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
ECHO_IN, ECHO_OUT = "/bench_echo_in", "/bench_echo_out"
RCL_ECHO_IN, RCL_ECHO_OUT = "/bench_rcl_echo_in", "/bench_rcl_echo_out"
PATHS = ("cpp", "python")
"""The policy node's control paths, the default first."""
OBJECT_PERIOD_NS = 100_000_000  # object states at 10 Hz, like a perception stream
ANSWER_TIMEOUT_NS = 500_000_000  # latency phase: an answer later than this counts as lost
DEADLINE_RATES = (100.0, 500.0)
TARGETS: dict[str, tuple[str, float]] = {
    "latency_us_p50": ("<=", 800.0),
    "latency_us_p99": ("<=", 1500.0),
    "ratio_to_rclpy_relay_p50": ("<", 0.5),
    "misses_100hz": ("<=", 0.0),
    "misses_500hz": ("<=", 0.0),
}


@dataclass
class ControlBenchConfig:
    """Settings of one benchmark run."""

    ticks: int = 5000
    """Observations timed per target for the latency percentiles."""
    seconds: float = 60.0
    """Duration at 100 Hz and again at 500 Hz, per path, for the deadline misses, s."""
    executor: str = "events"
    """Executor of the Python path and the rclpy relay: 'events' or 'single'."""
    latency_rate_hz: float = 200.0
    """Rate of the latency observations per target (the targets' round trips are interleaved within a period)."""
    warmup_ticks: int = 200
    """Observations sent per target (and not counted) before timing starts."""
    startup_timeout: float = 300.0
    """Longest wait for each node's first command that runs the network (loading torch and MiniLM), s."""
    family: str = "reach"
    """Task family of the nodes' stage tracking."""
    busy_poll_s: float = 0.0
    """The Python path's ``busy_poll_s`` parameter: after each command it polls this long instead of sleeping, s."""
    realtime_priority: int = 0
    """The C++ path's ``realtime_priority`` parameter (SCHED_FIFO priority of its loop thread; 0: normal)."""

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
        if not 0 <= self.realtime_priority <= 99:
            errors.append(f"ControlBenchConfig.realtime_priority={self.realtime_priority} must be in [0, 99]")
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

    ``cpp``: coda_core_cpp.ObjectTokenActor; ``numpy``: coda_policy.action_mean.NumpyActionMean (its reference);
    ``eager``: the torch network (1 thread, inference mode). ``objects`` objects are present in the scene.
    """
    import torch

    from coda_policy.action_mean import compiled_action_mean, numpy_action_mean
    from coda_policy.config import PolicyConfig
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

    from coda_engine.ros.spin import shutdown_context

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
        shutdown_context()
    return 0


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


def scene_cdr() -> bytes:
    """Return the benchmark scene's ``ObjectStates`` as CDR bytes, unstamped (a node takes it as received now)."""
    from rclpy.serialization import serialize_message

    from coda_msgs.msg import ObjectState, ObjectStates

    return serialize_message(ObjectStates(objects=[
        _object("red_cube", ObjectState.SHAPE_BOX, ObjectState.ROLE_TARGET, "red", (0.9, 0.0, 0.0), 0.02,
                (0.5, 0.05, 0.42)),
        _object("blue_ball", ObjectState.SHAPE_SPHERE, ObjectState.ROLE_DISTRACTOR, "blue", (0.0, 0.0, 0.9),
                0.025, (0.45, -0.1, 0.425)),
    ]))


def rcl_relay_executable() -> Path:
    """Return the path of ``coda_rcl_relay`` (installed by coda_core_cpp); RuntimeError if it is not built."""
    from ament_index_python.packages import PackageNotFoundError, get_package_prefix

    try:
        path = Path(get_package_prefix("coda_core_cpp")) / "lib" / "coda_core_cpp" / "coda_rcl_relay"
    except PackageNotFoundError as exc:
        raise RuntimeError("coda_core_cpp is not installed (run make setup)") from exc
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is missing: coda_core_cpp was built without its rcl parts (run make setup)")
    return path


class _Instructions:
    """Publishes the instruction to each policy node (rclpy, in a context of its own; nothing to spin)."""

    def __init__(self, namespaces: list[str]) -> None:
        import rclpy
        from rclpy.context import Context
        from std_msgs.msg import String

        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("coda_bench_control_instructions", context=self.context)
        self.publishers = {ns: self.node.create_publisher(String, f"{ns}/instruction", 10) for ns in namespaces}
        self.msg = String(data=INSTRUCTION)

    def matched(self, ns: str) -> bool:
        return self.publishers[ns].get_subscription_count() > 0

    def send(self, ns: str) -> None:
        self.publishers[ns].publish(self.msg)

    def close(self) -> None:
        import rclpy

        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


def _wait_ready(probe: Any, route: int, instructions: _Instructions, ns: str, proc: subprocess.Popen, log: Path,
                timeout: float) -> None:
    """Feed one policy node until it answers an observation with a command that ran the network."""
    from coda_core_cpp import _rt

    end = time.monotonic() + timeout
    instruction_sent = -1e9
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the policy node {ns} exited with {proc.returncode}; its output:\n{_log_tail(log)}")
        if time.monotonic() > end:
            raise RuntimeError(f"the policy node {ns} gave no command that ran the network within {timeout:.0f} s "
                               f"(its output:\n{_log_tail(log)})")
        if not probe.matched(route) or not instructions.matched(ns):
            probe.idle(_rt.steady_now_ns() + 100_000_000)
            continue
        if time.monotonic() - instruction_sent > 30.0:  # once, again only if the node still has none
            instructions.send(ns)
            instruction_sent = time.monotonic()
        latency, hold, _ = probe.round_trip(route, _rt.steady_now_ns(), 100_000_000)
        if latency >= 0 and not hold:
            return
        probe.idle(_rt.steady_now_ns() + 100_000_000)  # 10 Hz: leave the starting node its CPU


def _wait_relay(probe: Any, route: int, name: str, timeout: float = 60.0) -> None:
    from coda_core_cpp import _rt

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if probe.matched(route) and probe.round_trip(route, _rt.steady_now_ns(), 100_000_000)[0] >= 0:
            return
        probe.idle(_rt.steady_now_ns() + 100_000_000)
    raise RuntimeError(f"the {name} relay did not echo within {timeout:.0f} s")


def _latency_phase(probe: Any, routes: list[int], ticks: int, rate_hz: float) -> list[list[tuple[int, bool]]]:
    """``ticks`` periods at ``rate_hz``; in each, one round trip per route, spread evenly over the period.

    Each round trip is waited for (up to ``ANSWER_TIMEOUT_NS``) before the next message is sent, so no two are ever
    in flight together; a slow answer delays the schedule instead. Returns per route (latency ns or -1, hold).
    """
    from coda_core_cpp import _rt

    period = int(1e9 / rate_hz)
    slot = period // len(routes)
    out: list[list[tuple[int, bool]]] = [[] for _ in routes]
    due = _rt.steady_now_ns() + period
    for _ in range(ticks):
        for k, route in enumerate(routes):
            latency, hold, _ = probe.round_trip(route, due + k * slot, ANSWER_TIMEOUT_NS)
            out[k].append((latency, hold))
        due = max(due + period, _rt.steady_now_ns())
    return out


def _stats(trips: list[tuple[int, bool]]) -> dict[str, Any]:
    """Percentiles of the answered round trips that ran the network (policy) or echoed (relay)."""
    answered = [(lat, hold) for lat, hold in trips if lat >= 0]
    ran = [lat for lat, hold in answered if not hold]
    p50, p99 = percentiles_us(ran)
    return {
        "latency_us_p50": round(p50, 1), "latency_us_p99": round(p99, 1),
        "latency_us_max": round(max(ran) / 1e3, 1) if ran else float("nan"),
        "ticks": len(ran), "ticks_sent": len(trips), "lost": sum(lat < 0 for lat, _ in trips),
        "hold_fraction": round(sum(hold for lat, hold in answered) / max(1, len(answered)), 4),
    }


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure(cfg: ControlBenchConfig) -> dict[str, Any]:
    """Start the nodes and relays, run the phases of the module docstring and return the figures."""
    from coda_core_cpp import _rt
    from coda_engine.sim import panda

    load_start = _load()
    means = action_mean_timings()  # in this process, before anything else runs
    work = Path(tempfile.mkdtemp(prefix="coda-bench-control-"))
    write_version(work)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    namespaces = {path: f"/bench_{path}" for path in PATHS}
    commands: dict[str, list[str]] = {}
    for path in PATHS:
        commands[f"policy_{path}"] = [
            sys.executable, "-m", "coda_policy.ros.policy_node", "--ros-args", "-r", f"__ns:={namespaces[path]}",
            "-p", f"control_path:={path}", "-p", "trigger:=joint_states", "-p", f"executor:={cfg.executor}",
            "-p", f"busy_poll_s:={cfg.busy_poll_s}", "-p", f"family:={cfg.family}",
            "-p", f"checkpoint_root:={work}", "-p", f"initial_version:={VERSION}",
            "-p", f"realtime_priority:={cfg.realtime_priority if path == 'cpp' else 0}",
        ]
    commands["relay_rclpy"] = [sys.executable, "-m", "coda_policy.bench_control", "--relay", "--executor",
                               cfg.executor]
    commands["relay_rcl"] = [str(rcl_relay_executable()), RCL_ECHO_IN, RCL_ECHO_OUT]
    if cfg.realtime_priority:  # the C++ path's node sets its loop thread itself; its Python side stays normal
        chrt = [shutil.which("chrt") or "chrt", "-f", str(cfg.realtime_priority)]
        for name in ("policy_python", "relay_rclpy", "relay_rcl"):
            commands[name] = chrt + commands[name]
    procs: dict[str, subprocess.Popen] = {}
    logs = {name: work / f"{name}.log" for name in commands}
    probe = instructions = None
    ok = False
    try:
        for name, cmd in commands.items():
            with logs[name].open("w") as out:
                procs[name] = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        if cfg.realtime_priority:  # this thread, and the probe's middleware threads made from it
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(cfg.realtime_priority))
        probe = _rt.Probe("coda_bench_control", [*panda.ARM_JOINTS, *panda.FINGER_JOINTS],
                          [*map(float, panda.HOME_QPOS), 0.04, 0.04])
        cdr = scene_cdr()
        routes = {path: probe.add_policy(f"{ns}/joint_states", f"{ns}/object_states", f"{ns}/arm_command", cdr,
                                         OBJECT_PERIOD_NS) for path, ns in namespaces.items()}
        routes["rclpy"] = probe.add_relay(ECHO_IN, ECHO_OUT)
        routes["rcl"] = probe.add_relay(RCL_ECHO_IN, RCL_ECHO_OUT)
        instructions = _Instructions(list(namespaces.values()))
        for path, ns in namespaces.items():
            _wait_ready(probe, routes[path], instructions, ns, procs[f"policy_{path}"], logs[f"policy_{path}"],
                        cfg.startup_timeout)
        for name in ("rclpy", "rcl"):
            _wait_relay(probe, routes[name], name)
        order = [*PATHS, "rclpy", "rcl"]
        _latency_phase(probe, [routes[name] for name in order], cfg.warmup_ticks, cfg.latency_rate_hz)
        gc.collect()
        gc.disable()  # keep this process's own pauses out of the figures (the nodes keep their collectors)
        trips = dict(zip(order, _latency_phase(probe, [routes[name] for name in order], cfg.ticks,
                                               cfg.latency_rate_hz), strict=True))
        deadline: dict[str, dict[float, Any]] = {}
        for name in [*PATHS, "rcl"]:  # the paths, then the C relay: the transport's own misses on this machine
            deadline[name] = {rate: probe.periodic(routes[name], rate, max(1, round(cfg.seconds * rate)))
                              for rate in DEADLINE_RATES}
        gc.enable()
        for path in PATHS:
            if not any(lat >= 0 and not hold for lat, hold in trips[path]):
                raise RuntimeError(f"the {path} path only held: no latency of the network was measured; its "
                                   f"output:\n{_log_tail(logs[f'policy_{path}'])}")
        ok = True
    finally:
        gc.enable()
        if cfg.realtime_priority:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        if instructions is not None:
            instructions.close()
        del probe
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            sys.stderr.write(f"coda bench control: logs kept in {work}\n")
    def deadline_figures(name: str) -> dict[str, Any]:
        """Misses, ticks and answered p99 of each deadline phase of ``name``."""
        figures: dict[str, Any] = {}
        for rate in DEADLINE_RATES:
            latency, _ = deadline[name][rate]
            figures[f"misses_{rate:g}hz"] = int(np.sum(latency < 0))
            figures[f"ticks_{rate:g}hz"] = int(latency.size)
            figures[f"latency_us_p99_{rate:g}hz"] = round(percentiles_us(latency[latency >= 0].tolist())[1], 1)
        return figures

    paths = {path: {**_stats(trips[path]), **deadline_figures(path)} for path in PATHS}
    relays = {}
    for name in ("rclpy", "rcl"):
        figures = _stats(trips[name])
        relays[name] = {key: figures[key] for key in ("latency_us_p50", "latency_us_p99", "latency_us_max", "lost")}
    relays["rcl"].update(deadline_figures("rcl"))
    default = paths[PATHS[0]]
    result: dict[str, Any] = {
        "latency_us_p50": default["latency_us_p50"],
        "latency_us_p99": default["latency_us_p99"],
        "latency_us_max": default["latency_us_max"],
        "ratio_to_rclpy_relay_p50": round(default["latency_us_p50"] / relays["rclpy"]["latency_us_p50"], 3),
        "misses_100hz": default["misses_100hz"],
        "misses_500hz": default["misses_500hz"],
        "ticks": default["ticks"],
        "ticks_sent": default["ticks_sent"],
        "default_path": PATHS[0],
        "paths": paths,
        "relays": relays,
        "action_mean_us_cpp": means["cpp"],
        "action_mean_us_numpy": means["numpy"],
        "action_mean_us_eager": means["eager"],
        "executor": cfg.executor,
        "busy_poll_s": cfg.busy_poll_s,
        "realtime_priority": cfg.realtime_priority,
        "seconds": cfg.seconds,
        "load_avg": {"start": load_start, "end": _load()},
        "cpus": os.cpu_count(),
    }
    result["targets"] = {key: f"{cmp} {bound:g}" for key, (cmp, bound) in TARGETS.items()}
    result["targets_met"] = {
        key: bool(result[key] <= bound if cmp == "<=" else result[key] < bound) for key, (cmp, bound) in TARGETS.items()
    }
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
        help="duration at 100 Hz and again at 500 Hz, per path, for the deadline misses, s",
    )
    parser.add_argument(
        "--executor",
        choices=("events", "single"),
        default=defaults.executor,
        help="executor of the Python path and of the rclpy relay",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=defaults.startup_timeout,
        help="longest wait for each node's first command that runs the network, s",
    )
    parser.add_argument(
        "--busy-poll",
        type=float,
        default=defaults.busy_poll_s,
        help="the Python path polls this long after each command instead of sleeping (costs a core while it polls), s",
    )
    parser.add_argument("--realtime-priority", type=int, default=defaults.realtime_priority,
                        help="SCHED_FIFO priority of the C++ path's loop thread (1-99; 0: normal scheduling)")
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
            realtime_priority=args.realtime_priority,
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
        rows = [(f"{key}.{name}", item) for name, item in value.items()] if isinstance(value, dict) else [(key, value)]
        for label, item in rows:
            target = result["targets"].get(label, "")
            status = "" if not target else ("  ok" if result["targets_met"][label] else "  MISSED")
            print(f"{label:32s} {json.dumps(item):>16}  {target}{status}")
    print(f"config {json.dumps(asdict(cfg))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
