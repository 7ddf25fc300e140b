# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Launch test of the loop's bring-up: ``launch/coda_sim.launch.py`` as ``ros2 launch`` runs it.

    launch_test src/coda_loop/test/test_launch_sim.py          # or: colcon test --packages-select coda_loop
    python -m pytest src/coda_loop/test/test_launch_sim.py     # (launch_testing's pytest plugin collects it)

The launch file starts five processes on an isolated ROS domain: the ``coda_loop`` node, the ``scene_generator``
and ``critic`` nodes it asks for scenes and diagnoses, the ``memory`` node and one ``sim_bridge`` worker. The run
is small (one family, two generated scenes per round) but its round-1 behaviour cloning is long, so the run is
still going when the tests below are done. While it runs: each node is in the graph once, with the parameters
the launch file gave it; the memory topic, the memory query service, the loop's checkpoint service and the
worker's episode action are there; round 0 ends and round 1's episodes
run on the ``sim_bridge`` process (memory events say which robot ran each episode). Then launch_testing stops
the launch as a Ctrl-C does (SIGINT to every process): each process exits 0 without a traceback, the loop says
how to resume, and the run folder keeps round 0 and round 1's episodes. When the test process exits, the test's
folder in the temporary directory goes, with any parameter file launch_ros wrote for the launched processes.

Needs ``launch``, ``launch_ros`` and ``launch_testing`` (a ROS 2 install); elsewhere ``conftest.py`` leaves this
file out of the collection and says so in the test summary.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import unittest
from pathlib import Path
from typing import Any

import launch_testing
import launch_testing.asserts
import pytest
import rclpy
from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription, RegisterEventHandler, SetEnvironmentVariable
from launch.event_handlers import OnProcessStart
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch_testing_ros import WaitForTopics
from rcl_interfaces.srv import GetParameters
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState

from coda_engine.ros.spin import call_spinning
from coda_msgs.msg import MemoryEvent, ObjectStates
from coda_msgs.srv import QueryMemory

REPO = Path(__file__).resolve().parents[3]
LAUNCH_FILE = REPO / "launch" / "coda_sim.launch.py"
RUN = {
    "rounds": 2, "budget": 2, "families": ["reach"], "base_demos_per_family": 3, "base_sft_steps": 30,
    "probe_per_family": 1, "finetune_steps": 5000, "rl_env_steps": 0, "eval_per_family": 1,
    "final_eval_per_family": 1, "eval_splits": ["id"], "progress": False,
}
"""LoopConfig fields of the run: small, but its round-1 behaviour cloning (5000 steps) outlasts the tests."""
WAIT_S = 420.0
"""Longest wait for one thing to happen (round 0 trains, runs, diagnoses and evaluates first)."""

def _load_support() -> Any:
    """Return ``launch_support.py`` of this folder (``launch_test`` loads test files by path, not as a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("coda_launch_support", Path(__file__).with_name("launch_support.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_support = _load_support()
reserve_domain, scratch_folder = _support.reserve_domain, _support.scratch_folder
note_parameter_files, parameter_files = _support.note_parameter_files, _support.parameter_files


@pytest.mark.launch_test
@pytest.mark.ros
@pytest.mark.slow
def generate_test_description() -> tuple[LaunchDescription, dict[str, Any]]:
    domain = str(reserve_domain())
    os.environ["ROS_DOMAIN_ID"] = domain  # this test process too
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    run_dir = scratch_folder("coda-launch-sim-") / "run"
    config = run_dir.parent / "loop.json"
    config.write_text(json.dumps(RUN))
    return LaunchDescription([
        SetEnvironmentVariable("ROS_DOMAIN_ID", domain),
        SetEnvironmentVariable("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST"),
        SetEnvironmentVariable("PYTHONUNBUFFERED", "1"),
        RegisterEventHandler(OnProcessStart(on_start=note_parameter_files)),
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(str(LAUNCH_FILE)),
            launch_arguments={"run_dir": str(run_dir), "workers": "1", "config_file": str(config)}.items(),
        ),
        launch_testing.actions.ReadyToTest(),
    ]), {"run_dir": run_dir, "config": config}


def spin_until(node: Node, done: Any, timeout: float) -> bool:
    """Spin ``node`` (in its own context) until ``done()`` or ``timeout`` seconds; return ``done()``."""
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    end = time.monotonic() + timeout
    try:
        while not done() and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.1)
    finally:
        executor.remove_node(node)
        executor.shutdown()
    return bool(done())


def call(node: Node, client: Any, request: Any, timeout: float = 30.0) -> Any:
    """Call a service and return its response."""
    assert client.wait_for_service(timeout_sec=timeout), f"{client.srv_name} did not appear"
    answer = call_spinning(node, client, request, timeout)
    assert answer is not None, f"{client.srv_name} did not answer"
    return answer


def parameters(node: Node, fqn: str, names: list[str]) -> dict[str, Any]:
    """Return the values of ``names`` on the node ``fqn`` (its get_parameters service)."""
    from rclpy.parameter import parameter_value_to_python

    reply = call(node, node.create_client(GetParameters, f"{fqn}/get_parameters"), GetParameters.Request(names=names))
    return {name: parameter_value_to_python(value) for name, value in zip(names, reply.values, strict=True)}


class TestLoopBringUp(unittest.TestCase):
    """While the launch runs (methods run in name order)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.context = Context()
        rclpy.init(context=cls.context, domain_id=int(os.environ["ROS_DOMAIN_ID"]))
        cls.node = rclpy.create_node("launch_test_probe", context=cls.context)
        cls.events: list[MemoryEvent] = []
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
        cls.node.create_subscription(MemoryEvent, "/memory_events", cls.events.append, qos)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.node.destroy_node()
        rclpy.shutdown(context=cls.context)

    def test_1_each_node_comes_up_once_with_its_parameters(self, run_dir: Path, config: Path) -> None:
        # the loop's checkpoint server starts with the run, after the loop watched the graph for another loop
        expected = {("coda_loop", "/"), ("coda_loop_checkpoint_server", "/"), ("memory", "/"), ("sim_bridge", "/sim_0"),
                    ("scene_generator", "/"), ("critic", "/")}

        def names() -> list[tuple[str, str]]:
            return self.node.get_node_names_and_namespaces()

        assert spin_until(self.node, lambda: expected <= set(names()), 120.0), names()
        # one node per name: the loop's checkpoint server has a name of its own despite `-r __node:=coda_loop`
        listed = [n for n in names() if n[1] == "/"]
        assert listed.count(("coda_loop", "/")) == 1, listed
        loop = parameters(self.node, "/coda_loop", ["run_dir", "config_file", "discovery_wait_s", "generator_service",
                                                    "critic_service"])
        assert loop == {"run_dir": str(run_dir), "config_file": str(config), "discovery_wait_s": 5.0,
                        "generator_service": "/generate_scenes", "critic_service": "/diagnose_episodes"}
        assert parameters(self.node, "/critic", ["publish_programs"]) == {"publish_programs": False}
        memory = parameters(self.node, "/memory", ["db_path"])
        assert memory == {"db_path": str(run_dir / "memory.db")}
        worker = parameters(self.node, "/sim_0/sim_bridge", ["checkpoint_root", "camera_rate_hz", "control_rate_hz"])
        assert worker == {"checkpoint_root": str(run_dir / "checkpoints"), "camera_rate_hz": 0.0,
                          "control_rate_hz": 10.0}

    def test_2_topics_services_and_the_episode_action_are_there(self) -> None:
        def present() -> bool:
            services = dict(self.node.get_service_names_and_types())
            topics = dict(self.node.get_topic_names_and_types())
            return (services.get("/query_memory") == ["coda_msgs/srv/QueryMemory"]
                    and services.get("/coda_loop/get_checkpoint") == ["coda_msgs/srv/GetCheckpoint"]
                    and "/sim_0/run_episode/_action/send_goal" in services
                    and topics.get("/memory_events") == ["coda_msgs/msg/MemoryEvent"]
                    and "/sim_0/joint_states" in topics)

        assert spin_until(self.node, present, 30.0), (self.node.get_service_names_and_types(),
                                                      self.node.get_topic_names_and_types())
        # the worker streams its simulated arm's state between episodes
        waiter = WaitForTopics([("/sim_0/joint_states", JointState), ("/sim_0/object_states", ObjectStates)],
                               timeout=30.0)
        try:
            assert waiter.wait(), f"no messages on {waiter.topics_not_received()}"
            assert len(waiter.received_messages("/sim_0/joint_states")[-1].position) == 9  # 7 joints, 2 fingers
        finally:
            waiter.shutdown()

    def test_3_round_zero_ends_and_round_one_runs_on_the_worker(self) -> None:
        def round_one_episodes() -> list[dict[str, Any]]:
            return [json.loads(e.payload_json) for e in self.events if e.kind == MemoryEvent.KIND_EPISODE
                    and e.round == 1]

        def kinds() -> set[tuple[str, int]]:
            return {(e.kind, e.round) for e in self.events}

        # round 1's diagnoses come once all its episodes have come back
        assert spin_until(self.node, lambda: ("diagnosis", 1) in kinds(), WAIT_S), sorted(kinds())
        assert round_one_episodes(), sorted(kinds())
        assert {("policy_version", 0), ("diagnosis", 0), ("progress", 0), ("scene", 1)} <= kinds(), (
            sorted(kinds()))
        # every episode ran in the sim_bridge process (robot sim_0); the loop has no local workers
        assert {e["robot_id"] for e in round_one_episodes()} == {"sim_0"}
        assert all(e["status"] == 0 and e["length"] > 0 for e in round_one_episodes())

    def test_4_memory_answers_queries_over_ros(self) -> None:
        client = self.node.create_client(QueryMemory, "/query_memory")
        reply = call(self.node, client, QueryMemory.Request(query="records", kind="episode", round_min=1))
        assert reply.success, reply.error
        assert reply.records and {r.round for r in reply.records} == {1}
        progress = call(self.node, client, QueryMemory.Request(query="progress"))
        assert progress.success and '"id"' in progress.result_json, progress.result_json[:500]


def output_of(proc_output: Any, name: str) -> str:
    """Return everything the process ``name`` (``coda_loop``, not ``coda_loop-1``) wrote, stdout and stderr."""
    return "".join(io.text.decode(errors="replace") for io in proc_output if io.process_name.startswith(f"{name}-"))


@launch_testing.post_shutdown_test()
class TestLoopShutdown(unittest.TestCase):
    """After launch_testing stopped the launch with SIGINT (the run was in round 1's behaviour cloning)."""

    def test_every_process_exits_zero_without_a_traceback(self, proc_info: Any, proc_output: Any) -> None:
        names = proc_info.process_names()
        for name in ("coda_loop", "memory", "sim_bridge"):
            assert any(n.startswith(f"{name}-") for n in names), names
            assert "Traceback" not in output_of(proc_output, name), output_of(proc_output, name)[-3000:]
        launch_testing.asserts.assertExitCodes(proc_info)

    def test_the_loop_stopped_resumable(self, proc_output: Any, run_dir: Path) -> None:
        assert "the next start with run_dir" in output_of(proc_output, "coda_loop"), (
            output_of(proc_output, "coda_loop")[-3000:])
        with sqlite3.connect(f"file:{run_dir / 'memory.db'}?mode=ro", uri=True) as db:
            steps = set(db.execute("SELECT round, step FROM loop_steps"))
        round0 = {(0, s) for s in ("train", "generate", "episodes", "diagnose", "programs", "evaluate")}
        assert round0 | {(1, "generate"), (1, "episodes")} <= steps, sorted(steps)
        assert (2, "episodes") not in steps, "the run finished before the tests: it must still run at SIGINT"
