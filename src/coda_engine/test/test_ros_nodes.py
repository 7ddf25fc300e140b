# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The engine's ROS 2 nodes, started as real processes and driven over DDS on an isolated domain."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest
from rclpy.action import ActionClient
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from coda_engine.ros.convert import dict_to_msg
from coda_engine.ros.images import msg_to_image
from coda_engine.ros.spin import call_spinning, spin_until
from coda_engine.sim.generator import generate_seeded, scenes_of_seeds
from coda_engine.sim.scene import SceneParams
from coda_msgs.action import RunEpisode
from coda_msgs.msg import EpisodeResult, ObjectStates, SceneSpec
from coda_msgs.srv import GenerateScenes

pytestmark = pytest.mark.ros




def call(node: Any, client: Any, request: Any, timeout: float = 60.0) -> Any:
    """Call a service and wait for the response."""
    assert client.wait_for_service(timeout_sec=30.0), "service did not appear"
    response = call_spinning(node, client, request, timeout)
    assert response is not None, "no response"
    return response


def node_cmd(module: str, *ros_args: str) -> list[str]:
    return [sys.executable, "-m", f"coda_engine.ros.{module}", "--ros-args", *ros_args]


# ---------------------------------------------------------------- scene_generator
def test_scene_generator_serves_scenes_and_rejects_bad_requests(rclpy_node: Any, start_process: Any) -> None:
    proc = start_process(node_cmd("scene_generator_node"))
    received: list[SceneSpec] = []
    qos = QoSProfile(depth=100, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    rclpy_node.create_subscription(SceneSpec, "scene_specs", received.append, qos)
    client = rclpy_node.create_client(GenerateScenes, "generate_scenes")

    ok = call(rclpy_node, client, GenerateScenes.Request(family="pick_place", split="id", count=2, seed=11, round=3))
    assert ok.success, ok.error
    assert len(ok.scenes) == 2
    assert {s.family for s in ok.scenes} == {"pick_place"}
    assert all(s.round == 3 and s.instruction and s.mjcf and len(s.objects) >= 2 for s in ok.scenes)
    assert ok.scenes[0].seed != ok.scenes[1].seed
    again = call(rclpy_node, client, GenerateScenes.Request(family="pick_place", split="id", count=2, seed=11, round=3))
    assert [s.instruction for s in again.scenes] == [s.instruction for s in ok.scenes]
    assert [s.objects for s in again.scenes] == [s.objects for s in ok.scenes]
    assert spin_until(rclpy_node, lambda: len(received) >= 4)
    # explicit seeds: exactly the scenes generate_seeded gives those seeds in this process (the loop's two deployments)
    seeds = [5, 2**63 - 2]
    params = SceneParams(split="id", num_distractors=(1, 3))
    seeded = call(rclpy_node, client, GenerateScenes.Request(family="push", params_json=json.dumps(
        params.to_json_dict()), seeds=seeds, round=2))
    assert seeded.success, seeded.error
    here = scenes_of_seeds("push", seeds, params, 2)
    assert [(s.seed, s.scene_id, s.mjcf_sha256, s.round) for s in seeded.scenes] == \
        [(s.seed, s.scene_id, s.mjcf_sha256, s.round) for s in here]

    bad_requests = {
        "257 seeds: at most 256": GenerateScenes.Request(family="reach", seeds=list(range(257))),
        "unknown task family 'fly'": GenerateScenes.Request(family="fly", count=1),
        "params_json is not valid JSON": GenerateScenes.Request(family="reach", count=1, params_json="{nope"),
        "count=0": GenerateScenes.Request(family="reach", count=0),
        "position_shift": GenerateScenes.Request(family="reach", count=1, params_json='{"position_shift": 3}'),
        "unknown SceneParams fields": GenerateScenes.Request(family="reach", count=1, params_json='{"colour": 1}'),
    }
    for expected, request in bad_requests.items():
        response = call(rclpy_node, client, request)
        assert not response.success
        assert expected in response.error, response.error
        assert not response.scenes
    still = call(rclpy_node, client, GenerateScenes.Request(family="reach", count=1, seed=1))
    assert still.success and proc.poll() is None


# ---------------------------------------------------------------- sim_bridge
@pytest.fixture
def sim_bridge(start_process: Any) -> Any:
    return start_process(node_cmd("sim_bridge_node", "-r", "__ns:=/sim_t", "-p", "camera_rate_hz:=0.0"))


def test_sim_bridge_behaves_like_a_ros2_control_arm(rclpy_node: Any, sim_bridge: Any) -> None:
    states: list[JointState] = []
    objects: list[ObjectStates] = []
    rclpy_node.create_subscription(JointState, "/sim_t/joint_states", states.append, 10)
    rclpy_node.create_subscription(ObjectStates, "/sim_t/object_states", objects.append, 10)
    assert spin_until(rclpy_node, lambda: len(states) >= 3 and objects, timeout=60)
    assert states[-1].name[:7] == [f"panda_joint{i}" for i in range(1, 8)]
    assert len(states[-1].position) == 9 and all(math.isfinite(p) for p in states[-1].position)
    assert objects[-1].objects and objects[-1].objects[0].name

    commands = rclpy_node.create_publisher(JointTrajectory, "/sim_t/joint_trajectory_controller/joint_trajectory", 10)

    def trajectory(names: list[str], positions: list[float]) -> JointTrajectory:
        return JointTrajectory(joint_names=names, points=[JointTrajectoryPoint(positions=positions)])

    start_q1 = states[-1].position[0]
    goal_q1 = start_q1 + 0.3
    for bad in (
        trajectory(["elbow"], [0.1]),
        trajectory(["panda_joint1"], [float("nan")]),
        trajectory(["panda_joint1"], [9.0]),
    ):
        commands.publish(bad)
    states.clear()
    assert spin_until(rclpy_node, lambda: len(states) >= 10)
    assert abs(states[-1].position[0] - start_q1) < 0.02, "a rejected command moved the arm"

    commands.publish(trajectory(["panda_joint1"], [goal_q1]))
    assert spin_until(rclpy_node, lambda: bool(states) and abs(states[-1].position[0] - goal_q1) < 0.02, timeout=30)
    assert sim_bridge.poll() is None


def _goal(scene_seed: int, family: str, policy_version: str = "expert") -> RunEpisode.Goal:
    scene = generate_seeded(family, scene_seed, SceneParams())
    return RunEpisode.Goal(
        scene=dict_to_msg(SceneSpec, scene.to_dict()), policy_version=policy_version, record_keyframes=True
    )


def _run(node: Any, client: ActionClient, goal: RunEpisode.Goal) -> tuple[RunEpisode.Result, list[Any]]:
    feedback: list[Any] = []
    assert client.wait_for_server(timeout_sec=60.0)
    send = client.send_goal_async(goal, feedback_callback=lambda f: feedback.append(f.feedback))
    assert spin_until(node, send.done, 30)
    result_future = send.result().get_result_async()
    assert spin_until(node, result_future.done, 120)
    return result_future.result().result, feedback


def test_sim_bridge_runs_expert_episodes_and_rejects_bad_goals(rclpy_node: Any, sim_bridge: Any) -> None:
    client = ActionClient(rclpy_node, RunEpisode, "/sim_t/run_episode")
    result, feedback = _run(rclpy_node, client, _goal(5, "reach"))
    assert result.accepted, result.error
    episode = result.result
    assert episode.status == EpisodeResult.STATUS_COMPLETED
    assert episode.success
    assert episode.robot_id == "sim_t" and episode.policy_version == "expert"
    assert episode.length == len(feedback) > 0
    assert episode.stage_reached == episode.num_stages >= 1
    assert episode.trajectory[0].step == 0 and episode.trajectory[-1].step == episode.length
    assert episode.trajectory[-1].objects, "simulated episodes carry privileged object states"
    assert len(episode.keyframes) == len(episode.keyframe_steps) >= 2
    frame = msg_to_image(episode.keyframes[-1])
    assert frame.shape == (64, 64, 3) and frame.std() > 1.0
    assert [s.step for s in episode.trajectory] == list(range(episode.length + 1)), "sample_every 0: every step"
    goal = _goal(5, "reach")
    goal.sample_every = 3  # the loop's goals ask for its sampling (local workers record the same samples)
    sparse, _ = _run(rclpy_node, client, goal)
    steps = [s.step for s in sparse.result.trajectory]
    assert steps[:-1] == list(range(0, sparse.result.length, 3)) and steps[-1] == sparse.result.length

    unknown, _ = _run(rclpy_node, client, _goal(5, "reach", policy_version="r001-does-not-exist"))
    assert not unknown.accepted
    assert unknown.result.status == EpisodeResult.STATUS_REJECTED
    assert "r001-does-not-exist" in unknown.error

    broken = _goal(6, "push")
    broken.scene.family = "juggle"
    rejected, _ = _run(rclpy_node, client, broken)
    assert not rejected.accepted and "juggle" in rejected.error

    again, _ = _run(rclpy_node, client, _goal(7, "pick_place"))
    assert again.accepted and again.result.length > 0
    assert sim_bridge.poll() is None


# ---------------------------------------------------------------- stopping
@pytest.mark.parametrize("module,name", [("scene_generator_node", "scene_generator"), ("sim_bridge_node", "sim_bridge"),
                                         ("fake_arm_node", "fake_ros2_control_arm"), ("arm_bridge_node", "arm_bridge")])
@pytest.mark.parametrize("gap_s", [0.05, 0.5])
def test_a_node_stops_cleanly_on_ctrl_c_and_the_signal_launch_sends_after_it(rclpy_node: Any, stand_in_robot: Any,
                                                                             module: str, name: str,
                                                                             gap_s: float) -> None:
    """A Ctrl-C in the terminal of ``ros2 launch`` reaches every process, then ``ros2 launch`` sends SIGINT again.

    The second signal comes while the first one's clean-up runs (executor, simulator, node) or while the
    interpreter exits: it must interrupt neither. The node exits 0 without a traceback.
    """
    import signal
    import subprocess
    import time

    extra = ["-p", f"robot_config:={stand_in_robot()}"] if module == "arm_bridge_node" else []
    proc = subprocess.Popen(node_cmd(module, "-r", "__ns:=/stop_t", *extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert spin_until(rclpy_node, lambda: (name, "/stop_t") in rclpy_node.get_node_names_and_namespaces(), 60.0)
        proc.send_signal(signal.SIGINT)
        time.sleep(gap_s)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]


_SHUTDOWN_LOOP = """
import os
import signal
import sys

import rclpy
from rclpy.signals import SignalHandlerOptions

from coda_engine.ros.spin import shutdown_context, stop_on_first_signal

stop_on_first_signal()
os.kill(os.getpid(), signal.SIGINT)  # the first signal: from now on SIGINT and SIGTERM are ignored
print("ready", flush=True)
for _ in range(int(sys.argv[1])):
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    shutdown_context()
"""


def test_shutting_the_context_down_never_gives_the_signals_their_default_action_back() -> None:
    """SIGINTs sent without pause while the context is shut down again and again: none may kill the process.

    rclpy's own shutdown sets SIGINT and SIGTERM to their default action for a moment (to "uninstall" handlers
    that were never installed); a second Ctrl-C landing there killed the loop node in its clean-up.
    """
    import os
    import signal
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", _SHUTDOWN_LOOP, "400"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        sent = 0
        while proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGINT)
                sent += 1
            except ProcessLookupError:
                break
        out = proc.stdout.read()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sent > 100, f"only {sent} signals were sent while the process ran"
    assert proc.returncode == 0, (proc.returncode, out[-2000:])
