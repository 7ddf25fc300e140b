# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Every service (and the run_episode action) of the workspace's nodes, sent random and boundary requests over DDS.

The nodes run as real processes on one reserved domain, started once for the module: ``scene_generator``,
``sim_bridge``, ``critic``, ``memory`` and a run's checkpoint server (``BackgroundCheckpointServer``, as the loop runs
it). Each request is a seeded mix of a valid request and random field values: empty, huge and control-character
strings, NaN and infinite floats, integer bounds, sequences of odd lengths, unknown ids and names. Each must be
answered, as an error (``success``/``accepted`` false with a message) or validly, in bounded time; afterwards the node
is still running and still answers a valid request. ``arm_bridge``'s services (``estop``, ``reset_estop``,
``operator_verdict``) carry no fields; ``src/coda_engine/test/test_arm_bridge.py`` calls them in every order.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rosidl_parser.definition import (
    AbstractNestedType,
    AbstractString,
    Array,
    BasicType,
    NamespacedType,
)

pytestmark = pytest.mark.ros

SEED = 24
"""Seed of every request (a failure replays exactly)."""
ANSWER_TIMEOUT_S = 30.0
"""Longest wait for one answer; none came near it."""
STRINGS = ("", " ", "\x00", "x" * 100_000, "é🤖", "../../etc/passwd", "nan", "{}", "[", "expert", "reach", "id",
           "r001-bc", "/", "a" * 256)
FIELD_STRINGS: dict[str, tuple[str, ...]] = {
    # values that reach past the first check of a field (the names and formats the nodes know, slightly wrong)
    "params_json": ('{"num_distractors": "two"}', '{"position_shift": 1e999}', '{"position_shift": "far"}',
                    '{"num_distractors": [1, 2, 3]}', '{"split": 5}', '{"size_scale": {}}', '[1]', "null",
                    '{"max_attempts": -1}', '{"settle_time": NaN}', "[" * 100_000, '{"synonyms": true}'),
    "family": ("reach", "pick_place", "push", "stack", "fly", "REACH"),
    "split": ("id", "position", "instruction", "object", "distractor", "ood"),
    "query": ("records", "similar_diagnoses", "fixed_conditions", "generation_effect", "progress", "nope"),
    "kind": ("scene", "episode", "diagnosis", "progress", "policy_version", "nope"),
    "backend": ("grounded", "learned", "vlm", "auto", "nope"),
    "policy_version": ("expert", "r001-bc", "../r001-bc", "nope"),
    "encoding": ("rgb8", "bgr8", "mono8", "rgba8", "16UC1"),
    "mjcf": ("<mujoco/>", "<mujoco><worldbody><geom size='nan'/></worldbody></mujoco>", "<", "<!DOCTYPE x [<!ENTITY a "
             "'aaaaaaaaaa'><!ENTITY b '&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;'>]><mujoco>&b;</mujoco>"),
}
"""Per field name, values tried besides ``STRINGS`` (half of the time)."""
FLOATS = (0.0, -1.0, 1.0, math.nan, math.inf, -math.inf, 3.4e38, -3.4e38, 1e-45, 0.5)
INT_BOUNDS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


def _int_values(kind: str) -> list[int]:
    if kind in ("octet", "uint8", "char", "byte"):
        return [0, 1, 255]
    if kind.startswith("uint"):
        top = 2 ** int(kind[4:]) - 1
        return [0, 1, 2, 1001, top]
    bits = INT_BOUNDS[kind]
    return [0, 1, -1, -(2**bits), 2**bits - 1]


def random_value(slot: Any, rng: np.random.Generator, depth: int = 0, name: str = "") -> Any:
    """Return a random or boundary value for one field ``name`` of a ROS message (its ``SLOT_TYPES`` entry)."""
    if isinstance(slot, AbstractString):
        pool = FIELD_STRINGS[name] if name in FIELD_STRINGS and rng.random() < 0.5 else STRINGS
        return pool[int(rng.integers(len(pool)))]
    if isinstance(slot, BasicType):
        kind = slot.typename
        if kind == "boolean":
            return bool(rng.integers(2))
        if kind in ("float", "double"):
            return float(FLOATS[int(rng.integers(len(FLOATS)))])
        values = _int_values(kind)
        return values[int(rng.integers(len(values)))]
    if isinstance(slot, NamespacedType):
        return random_message(_message_class(slot), rng, depth + 1)
    if isinstance(slot, AbstractNestedType):
        count = slot.size if isinstance(slot, Array) else int(rng.choice([0, 0, 1, 2, 3, 300 if depth == 0 else 3]))
        items = [random_value(slot.value_type, rng, depth + 1, name) for _ in range(count)]
        if isinstance(slot.value_type, BasicType) and slot.value_type.typename in ("octet", "uint8"):
            return bytes(int(v) & 0xFF for v in items) if not isinstance(slot, Array) else items
        return items
    raise AssertionError(f"no random value for {slot}")


def _message_class(slot: NamespacedType) -> type:
    module = __import__(".".join(slot.namespaces), fromlist=[slot.name])
    return getattr(module, slot.name)


def random_message(cls: type, rng: np.random.Generator, depth: int = 0, base: Any = None) -> Any:
    """Return ``base`` (or an empty ``cls``) with random fields set to random values (all fields without a base)."""
    msg = base if base is not None else cls()
    names = list(cls.get_fields_and_field_types())
    chosen = names if base is None else [names[int(i)] for i in rng.choice(len(names), size=int(rng.integers(1, 4)))]
    for name, slot in zip(names, cls.SLOT_TYPES, strict=True):
        if name in chosen and depth < 4:
            setattr(msg, name, random_value(slot, rng, depth, name))
    return msg


# ---------------------------------------------------------------- the nodes
NODES = {
    "scene_generator": ["-m", "coda_engine.ros.scene_generator_node"],
    "sim_bridge": ["-m", "coda_engine.ros.sim_bridge_node", "--ros-args", "-r", "__ns:=/fz", "-p",
                   "camera_rate_hz:=0.0"],
    "critic": ["-m", "coda_critic.ros.critic_node", "--ros-args", "-p", "publish_programs:=false"],
    "memory": ["-m", "coda_loop.ros.memory_node", "--ros-args", "-p", "db_path:={db}"],
    "checkpoint_server": ["-c", textwrap.dedent("""
        import sys, rclpy
        from pathlib import Path
        from coda_engine.ros.checkpoints import BackgroundCheckpointServer
        from coda_engine.ros.spin import spin_until
        rclpy.init()
        owner = rclpy.create_node("fuzz_run")
        server = BackgroundCheckpointServer(owner, Path(sys.argv[1]))
        try:
            while rclpy.ok():
                spin_until(owner, lambda: False, 1.0)
        except Exception:
            pass
        finally:
            server.close()
            owner.destroy_node()
            rclpy.try_shutdown()
        """), "{checkpoints}"],
}


class Cell:
    """The started node processes and a client node in this process."""

    def __init__(self, root: Path) -> None:
        """Start the nodes (all at once) with a run's checkpoint and memory under ``root``."""
        import rclpy
        from rclpy.context import Context

        (root / "checkpoints" / "r001-bc").mkdir(parents=True)
        (root / "checkpoints" / "r001-bc" / "model.safetensors").write_bytes(b"weights")
        (root / "checkpoints" / "r001-bc" / "config.json").write_text("{}")
        fill = {"db": str(root / "memory.db"), "checkpoints": str(root / "checkpoints")}
        self.logs: dict[str, Path] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        for name, args in NODES.items():
            self.logs[name] = root / f"{name}.log"
            cmd = [sys.executable, *(a.format(**fill) if "{" in a and "import" not in a else a for a in args)]
            self.procs[name] = subprocess.Popen(cmd, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                                stdout=self.logs[name].open("w"), stderr=subprocess.STDOUT)
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("service_fuzzer", context=self.context)

    def alive(self, name: str) -> None:
        """Assert the node process ``name`` still runs (its log's end when it does not)."""
        proc = self.procs[name]
        assert proc.poll() is None, f"{name} exited with {proc.returncode}:\n{self.logs[name].read_text()[-3000:]}"

    def call(self, srv: type, service: str, request: Any, timeout: float = ANSWER_TIMEOUT_S) -> Any:
        """Send one request and return the answer (asserting it came within ``timeout``)."""
        from coda_engine.ros.spin import call_spinning

        client = self.clients.get(service) if hasattr(self, "clients") else None
        if client is None:
            self.clients = getattr(self, "clients", {})
            client = self.clients[service] = self.node.create_client(srv, service)
            assert client.wait_for_service(timeout_sec=120.0), f"{service} did not appear"
        response = call_spinning(self.node, client, request, timeout)
        if response is None:
            tails = "".join(f"--- {name}.log:\n{log.read_text()[-1500:]}\n" for name, log in self.logs.items())
            raise AssertionError(f"{service}: no answer in {timeout:g} s; the nodes' logs end:\n{tails}")
        return response

    def close(self) -> None:
        import rclpy

        self.node.destroy_node()
        rclpy.shutdown(context=self.context)
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(2)
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode not in (0, -2):
                sys.stderr.write(f"--- {name} exited {proc.returncode}:\n{self.logs[name].read_text()[-3000:]}\n")


@pytest.fixture(scope="module")
def cell(hold_ros_domain: Any) -> Iterator[Cell]:
    with hold_ros_domain(), tempfile.TemporaryDirectory(prefix="coda-fuzz-") as folder:
        started = Cell(Path(folder))
        try:
            yield started
        finally:
            started.close()


def _fuzz(cell: Cell, node: str, srv: type, service: str, valid: Callable[[], Any], count: int,
          ok: Callable[[Any], bool], field: str = "") -> dict[str, int]:
    """Send fuzzed requests, then a valid one; return how many were refused and how many answered.

    First one valid request per ``FIELD_STRINGS[field]`` value with ``field`` set to it, then ``count`` requests
    with random fields (every other one a valid request with one to three fields changed).
    """
    rng = np.random.default_rng(SEED)
    outcome = {"refused": 0, "answered": 0}
    planned = []
    for value in FIELD_STRINGS.get(field, ()):
        planned.append(valid())
        setattr(planned[-1], field, value)
    for i in range(len(planned) + count):
        request = planned[i] if i < len(planned) else random_message(srv.Request, rng, base=valid() if i % 2 else None)
        response = cell.call(srv, service, request)
        if ok(response):
            outcome["answered"] += 1
        else:
            assert response.error, f"{service}: request {i} refused without a message"
            outcome["refused"] += 1
        cell.alive(node)
    assert ok(cell.call(srv, service, valid())), f"{service}: the valid request after the fuzzing failed"
    cell.alive(node)
    return outcome


def test_generate_scenes_answers_every_request(cell: Cell) -> None:
    from coda_msgs.srv import GenerateScenes

    def valid() -> Any:
        return GenerateScenes.Request(family="reach", split="id", count=1, seed=3)

    outcome = _fuzz(cell, "scene_generator", GenerateScenes, "generate_scenes", valid, 16, lambda r: r.success,
                    field="params_json")
    assert outcome["refused"] > 10, outcome


def test_query_memory_answers_every_request(cell: Cell) -> None:
    from coda_msgs.srv import QueryMemory

    outcome = _fuzz(cell, "memory", QueryMemory, "query_memory", lambda: QueryMemory.Request(query="progress"), 40,
                    lambda r: r.success)
    assert outcome["refused"] > 10, outcome


def test_get_checkpoint_answers_every_request(cell: Cell) -> None:
    from coda_msgs.srv import GetCheckpoint

    def ok(response: Any) -> bool:
        return response.success and {f.name for f in response.files} >= {"model.safetensors", "config.json"}

    outcome = _fuzz(cell, "checkpoint_server", GetCheckpoint, "/fuzz_run/get_checkpoint",
                    lambda: GetCheckpoint.Request(version="r001-bc"), 40, ok)
    assert outcome["refused"] > 10, outcome


def _episode(cell: Cell) -> Any:
    """Run one expert episode on the sim_bridge (a valid goal) and return its result."""
    from rclpy.action import ActionClient

    from coda_msgs.action import RunEpisode
    from coda_msgs.srv import GenerateScenes

    scene = cell.call(GenerateScenes, "generate_scenes", GenerateScenes.Request(family="reach", count=1, seed=5))
    client = getattr(cell, "action_client", None) or ActionClient(cell.node, RunEpisode, "/fz/run_episode")
    cell.action_client = client
    assert client.wait_for_server(timeout_sec=120.0)
    goal = RunEpisode.Goal(scene=scene.scenes[0], policy_version="expert", max_steps=12, record_keyframes=True)
    return _send(cell, goal)


def _send(cell: Cell, goal: Any) -> Any:
    from coda_engine.ros.spin import spin_until

    sent = cell.action_client.send_goal_async(goal)
    assert spin_until(cell.node, sent.done, ANSWER_TIMEOUT_S), "run_episode: the goal was not answered"
    handle = sent.result()
    assert handle.accepted, "run_episode: the goal was refused outright"
    result = handle.get_result_async()
    assert spin_until(cell.node, result.done, ANSWER_TIMEOUT_S), "run_episode: no result"
    return result.result().result


def test_run_episode_answers_every_goal(cell: Cell) -> None:
    from coda_msgs.action import RunEpisode
    from coda_msgs.msg import EpisodeResult

    first = _episode(cell)
    assert first.accepted and first.result.status == EpisodeResult.STATUS_COMPLETED, first.error
    rng = np.random.default_rng(SEED)
    refused = 0
    for i in range(12):
        base = RunEpisode.Goal(scene=first_scene(cell), policy_version="expert", max_steps=10) if i % 2 else None
        goal = random_message(RunEpisode.Goal, rng, base=base)
        goal.max_steps = min(goal.max_steps, 10) if goal.max_steps else 10  # an episode's length is the goal's right
        goal.checkpoint_service = ""  # a service that never answers costs its fetch timeout (60 s), by design
        result = _send(cell, goal)
        if not result.accepted:
            assert result.error, f"run_episode: goal {i} refused without a message"
            assert result.result.status == EpisodeResult.STATUS_REJECTED
            refused += 1
        cell.alive("sim_bridge")
    assert refused > 5
    again = _episode(cell)
    assert again.accepted and again.result.status == EpisodeResult.STATUS_COMPLETED, again.error
    cell.alive("sim_bridge")
    cell.episode = again.result


def first_scene(cell: Cell) -> Any:
    """Return a valid scene (generated once)."""
    from coda_msgs.srv import GenerateScenes

    if not hasattr(cell, "scene"):
        cell.scene = cell.call(GenerateScenes, "generate_scenes",
                               GenerateScenes.Request(family="pick_place", count=1, seed=9)).scenes[0]
    return cell.scene


def test_diagnose_episodes_answers_every_request(cell: Cell) -> None:
    from coda_msgs.srv import DiagnoseEpisodes

    episode = getattr(cell, "episode", None) or _episode(cell).result

    def valid() -> Any:
        return DiagnoseEpisodes.Request(episodes=[episode], backend="grounded")

    def ok(response: Any) -> bool:
        return response.success and len(response.diagnoses) >= 1

    outcome = _fuzz(cell, "critic", DiagnoseEpisodes, "diagnose_episodes", valid, 30, ok)
    assert outcome["refused"] > 10, outcome
