# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The engine's bridges with what the packages above it bring: trained versions, their loader, the critic.

``sim_bridge`` and ``arm_bridge`` (coda_engine) run trained versions through the policy loader coda_policy registers,
fetch them from a run's ``get_checkpoint`` service, gate them on a real arm, and return episodes the critic
(coda_critic) reads. Each node is its own process on an isolated domain, driven with the helpers of coda_engine's
``test_arm_bridge.py`` and ``test_ros_nodes.py``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rclpy.action import ActionClient

from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams
from coda_msgs.action import RunEpisode
from coda_msgs.msg import EpisodeResult

pytestmark = pytest.mark.ros


@pytest.fixture
def arm(engine_test_helpers: Any) -> Any:
    """coda_engine's test_arm_bridge.py: Probe, start_arm, start_bridge, ROBOT_FILE, NS."""
    return engine_test_helpers("test_arm_bridge")


@pytest.fixture
def ros(engine_test_helpers: Any) -> Any:
    """coda_engine's test_ros_nodes.py: _goal, _run, node_cmd."""
    return engine_test_helpers("test_ros_nodes")


def test_bridge_drives_the_stand_in_through_full_episodes(tmp_path: Path, start_process: Any, rclpy_node: Any,
                                                          arm: Any) -> None:
    """Expert episodes on the stand-in through arm_bridge are complete for the critic; the gate and bad goals."""
    from coda_critic.episode_input import SceneBook, episode_from_result
    from coda_engine.ros.convert import msg_to_dict
    from coda_engine.ros.images import msg_to_image
    from coda_engine.sim.families import get_family

    arm.start_arm(start_process)
    bridge = arm.start_bridge(start_process, arm.ROBOT_FILE, tmp_path)
    probe = arm.Probe(rclpy_node)
    book = SceneBook()
    for family, seed in (("reach", 11), ("pick_place", 12)):
        scene = generate_seeded(family, seed, SceneParams())
        book.add(scene.to_dict())
        # twice the family's step limit: on a shared machine the stand-in lags its commands and the expert needs more
        response = probe.run_episode(scene, max_steps=2 * get_family(family).max_steps)
        result = response.result
        assert response.accepted, response.error
        assert result.status == result.STATUS_COMPLETED, result.status_detail
        assert result.success, f"{family}: the expert on perceived state failed ({result.length} steps)"
        assert result.source == result.SOURCE_REAL and result.robot_id == arm.NS
        assert result.keyframes and all(s.objects == [] for s in result.trajectory)
        data = msg_to_dict(result)
        data["keyframes"] = [msg_to_image(m) for m in result.keyframes]
        assert episode_from_result(data, book).success  # what the learned critic reads is complete

    # the sim-first gate: an unknown version and one evaluated below the robot's threshold are refused
    response = probe.run_episode(generate_seeded("reach", 13, SceneParams()), version="v-never-evaluated")
    assert not response.accepted and "sim-first gate" in response.error
    assert response.result.status == response.result.STATUS_REJECTED
    assert probe.wait_for_event("gate").robot_id == arm.NS
    # bad goals are answered and the node keeps serving
    bad = generate_seeded("reach", 14, SceneParams())
    response = probe.run_episode(dataclasses.replace(bad, target_object="no_such_object"))
    assert not response.accepted and "bad scene" in response.error
    assert bridge.poll() is None


def test_bridge_fetches_versions_from_the_run_and_gates_them(tmp_path: Path, start_process: Any, rclpy_node: Any,
                                                            stand_in_robot: Any, save_policy_version: Any,
                                                            arm: Any) -> None:
    """The robot's computer does not see the run's disk: the bridge fetches versions and gates them."""
    from coda_engine.ros.checkpoints import CheckpointServer

    arm.start_arm(start_process)
    cache = tmp_path / "robot-pc-cache"
    robot = stand_in_robot(top={"gate": {"min_sim_success": 0.5, "allow_expert": True}})
    start_process([sys.executable, "-m", "coda_engine.ros.arm_bridge_node", "--ros-args", "-r", f"__ns:=/{arm.NS}",
                   "-p", f"robot_config:={robot}", "-p", f"checkpoint_cache:={cache}"])
    run = tmp_path / "run" / "checkpoints"
    good, poor = save_policy_version(run / "r001-rl", 0.9), save_policy_version(run / "r002-rl", 0.2)
    server = CheckpointServer(rclpy_node, run)
    probe = arm.Probe(rclpy_node)
    scene = generate_seeded("reach", 21, SceneParams())
    response = probe.run_episode(scene, "r001-rl", policy_sha256=good, checkpoint_service=server.name)
    assert response.accepted, response.error
    assert response.result.policy_version == "r001-rl" and response.result.length > 0
    assert (cache / good[:16] / "r001-rl" / "evaluation.json").is_file()
    refused = probe.run_episode(scene, "r002-rl", policy_sha256=poor, checkpoint_service=server.name)
    assert not refused.accepted and "sim-first gate" in refused.error and "20.0%" in refused.error, refused.error
    assert server.sent == {"r001-rl": 1, "r002-rl": 1}
    missing = probe.run_episode(scene, "r003-rl", checkpoint_service=server.name)  # the run does not have it
    assert not missing.accepted and "sim-first gate" in missing.error and "r003-rl" in missing.error, missing.error
    gates = lambda: [e.kind for e in probe.events].count("gate")  # noqa: E731
    assert probe.spin(5.0, lambda: gates() == 2), f"{gates()} gate events"  # events arrive on their own topic
    # live commands name their model: the bridge gates the copy of exactly that model it fetched for the episode
    assert probe.spin(20.0, lambda: probe.q is not None)
    before = probe.q.copy()
    probe.drive(2.0, dy=0.005, version="r001-rl", sha256=good)
    assert np.max(np.abs(probe.q - before)) > 0.02, "live commands of a gated-in, fetched version did not move the arm"
    assert gates() == 2
    probe.drive(1.0, dy=0.005, version="r002-rl", sha256=poor)  # fetched too, but below the gate
    probe.drive(1.0, dy=0.005, version="r001-rl")  # no hash, no checkpoint_root: which model is unknown
    assert probe.spin(5.0, lambda: gates() == 4), f"{gates()} gate events"
    details = [e.detail for e in probe.events if e.kind == "gate"][2:]
    assert len(details) == 2 and "20.0%" in details[0] and "not on this machine" in details[1], details



def test_sim_bridge_fetches_a_version_it_lacks_once_and_refuses_a_wrong_one(rclpy_node: Any, start_process: Any,
                                                                            tmp_path: Any,
                                                                            save_policy_version: Any, ros: Any) -> None:
    """A worker on "another machine": no checkpoint_root, its own cache; the run serves its versions over ROS."""
    from coda_engine.ros.checkpoints import CheckpointServer

    cache = tmp_path / "worker-cache"
    start_process(ros.node_cmd("sim_bridge_node", "-r", "__ns:=/sim_far", "-p", "camera_rate_hz:=0.0",
                           "-p", f"checkpoint_cache:={cache}"))
    run = tmp_path / "run" / "checkpoints"
    sha = save_policy_version(run / "r001-rl")
    server = CheckpointServer(rclpy_node, run)
    client = ActionClient(rclpy_node, RunEpisode, "/sim_far/run_episode")

    def goal(seed: int, version: str = "r001-rl", sha256: str = sha, service: str = server.name) -> RunEpisode.Goal:
        g = ros._goal(seed, "reach", policy_version=version)
        g.policy_sha256, g.checkpoint_service = sha256, service
        return g

    for seed in (1, 2):  # the second episode uses the cached copy
        result, _ = ros._run(rclpy_node, client, goal(seed))
        assert result.accepted, result.error
        assert result.result.status == EpisodeResult.STATUS_COMPLETED and result.result.policy_version == "r001-rl"
    assert server.sent == {"r001-rl": 1}
    cached = cache / sha[:16] / "r001-rl"
    assert sorted(p.name for p in cached.iterdir()) == ["config.json", "model.safetensors"]  # no trainer state
    assert (cached / "model.safetensors").read_bytes() == (run / "r001-rl" / "model.safetensors").read_bytes()

    refusals = {
        "not the": goal(3, sha256="0" * 64),  # another run's r001-rl: the server refuses it by hash
        "no model.safetensors": goal(3, version="r002-rl", sha256=""),
        "names no checkpoint_service": goal(3, version="r003-rl", service=""),
        "not a version id": goal(3, version="../r001-rl"),
    }
    for expected, bad in refusals.items():
        result, _ = ros._run(rclpy_node, client, bad)
        assert not result.accepted and result.result.status == EpisodeResult.STATUS_REJECTED
        assert expected in result.error, result.error
    assert server.sent == {"r001-rl": 1}


@pytest.mark.parametrize("bridge", ["sim_bridge", "arm_bridge"])
def test_ctrl_c_mid_episode_ends_the_episode_answers_it_and_exits_zero(tmp_path: Path, start_process: Any,
                                                                       rclpy_node: Any, save_policy_version: Any,
                                                                       stand_in_robot: Any, bridge: str) -> None:
    """SIGINT twice (a terminal's Ctrl-C, then ``ros2 launch``'s) while a bridge runs a trained version's episode.

    The episode stops (aborted, saying so), its result still reaches the caller, and the process exits 0 without
    a traceback.
    """
    import signal
    import subprocess
    import time

    from coda_engine.ros.convert import dict_to_msg
    from coda_engine.ros.spin import spin_until
    from coda_msgs.msg import SceneSpec

    root = tmp_path / "checkpoints"
    save_policy_version(root / "v-untrained", id_success=0.9)
    ns = "stop_mid"
    if bridge == "arm_bridge":
        start_process([sys.executable, "-m", "coda_engine.ros.fake_arm_node", "--ros-args", "-r", f"__ns:=/{ns}"])
        cmd = [sys.executable, "-m", "coda_engine.ros.arm_bridge_node", "--ros-args", "-r", f"__ns:=/{ns}",
               "-p", f"robot_config:={stand_in_robot()}", "-p", f"checkpoint_root:={root}"]
    else:
        cmd = [sys.executable, "-m", "coda_engine.ros.sim_bridge_node", "--ros-args", "-r", f"__ns:=/{ns}",
               "-p", f"checkpoint_root:={root}", "-p", "camera_rate_hz:=0.0"]
    log = tmp_path / "bridge.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        client = ActionClient(rclpy_node, RunEpisode, f"/{ns}/run_episode")
        assert spin_until(rclpy_node, client.server_is_ready, 60.0), log.read_text()[-2000:]
        steps: list[int] = []
        scene = generate_seeded("reach", 21, SceneParams())
        goal = RunEpisode.Goal(scene=dict_to_msg(SceneSpec, scene.to_dict()), policy_version="v-untrained",
                               max_steps=100_000)
        sent = client.send_goal_async(goal, feedback_callback=lambda msg: steps.append(msg.feedback.step))
        assert spin_until(rclpy_node, sent.done, 30.0) and sent.result().accepted
        result = sent.result().get_result_async()
        assert spin_until(rclpy_node, lambda: len(steps) >= 5, 120.0), f"the episode did not run: {steps}"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert spin_until(rclpy_node, result.done, 30.0), "the stopped episode was not answered"
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    answer = result.result().result
    assert answer.accepted, answer.error
    assert answer.result.status == EpisodeResult.STATUS_ABORTED, answer.result.status_detail
    assert "stop" in answer.result.status_detail and 5 <= answer.result.length < 100_000
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text and "never retrieved" not in text, text[-3000:]
