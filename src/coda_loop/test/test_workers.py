# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The loop's EpisodeRunner on the ROS domain: the run's checkpoint service, and a real arm that dies mid-batch.

The arm side is the engine's stand-in (``fake_ros2_control_arm``) behind ``arm_bridge``, each its own process, driven
with the helpers of coda_engine's ``test_arm_bridge.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coda_engine.ros.spin import spin_until
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams

pytestmark = pytest.mark.ros


def test_the_runs_checkpoint_service_answers_while_the_loop_does_not_spin(rclpy_node: Any, tmp_path: Any,
                                                                         save_policy_version: Any) -> None:
    """The runner's node is spun only during batches; its get_checkpoint service answers at any time of the run."""
    import rclpy

    from coda_loop.workers import EpisodeRunner
    from coda_msgs.srv import GetCheckpoint

    run = tmp_path / "checkpoints"
    sha = save_policy_version(run / "r002-bc", 0.8)
    owner = rclpy.create_node("coda_run_under_test", context=rclpy_node.context)
    runner = EpisodeRunner(0, run, node=owner)
    try:
        assert runner.checkpoint_server.name == "/coda_run_under_test/get_checkpoint"
        client = rclpy_node.create_client(GetCheckpoint, runner.checkpoint_server.name)
        assert spin_until(rclpy_node, client.service_is_ready, 15.0), "the run's get_checkpoint did not appear"
        for version, digest in (("r002-bc", sha), ("r009-bc", "")):
            future = client.call_async(GetCheckpoint.Request(version=version, sha256=digest))
            assert spin_until(rclpy_node, future.done, 15.0), f"no answer for {version}"  # only the caller spins
            answer = future.result()
            if version == "r002-bc":
                assert answer.success and answer.sha256 == sha
                assert {f.name for f in answer.files} == {"model.safetensors", "config.json", "evaluation.json"}
            else:
                assert not answer.success and "r009-bc" in answer.error
        assert runner.checkpoint_server.sent == {"r002-bc": 1}
    finally:
        runner.close()
        owner.destroy_node()
    assert runner.checkpoint_server is None


def test_killed_stand_in_mid_episode_is_recorded_and_rescheduled(tmp_path: Path, start_process: Any,
                                                                 rclpy_node: Any,
                                                                 engine_test_helpers: Any) -> None:
    bridge_test = engine_test_helpers("test_arm_bridge")
    from coda_loop.fleet import ArmSpec
    from coda_loop.workers import EpisodeRunner

    arm = bridge_test.start_arm(start_process)  # SIGKILLed below (conftest gives the next test another domain id)
    bridge_test.start_bridge(start_process, bridge_test.ROBOT_FILE)
    probe = bridge_test.Probe(rclpy_node)
    assert probe.spin(20.0, lambda: probe.q is not None and probe.episodes.server_is_ready())
    from trajectory_msgs.msg import JointTrajectory

    sent = []

    def kill_mid_episode(msg: JointTrajectory) -> None:  # the 20th command of the first episode: the arm dies
        sent.append(1)
        if len(sent) == 20:
            arm.kill()

    rclpy_node.create_subscription(JointTrajectory, f"/{bridge_test.NS}/joint_trajectory_controller/joint_trajectory",
                                   kill_mid_episode, 50)
    # The runner's clients live on a node of its own; the given node (here the test's, with the subscription that
    # kills the arm) is spun by its owner for the whole batch, as the loop spins its coda_run / coda_loop node.
    import threading

    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor(context=rclpy_node.context)
    executor.add_node(rclpy_node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)

    spinner = threading.Thread(target=spin)
    spinner.start()
    runner = EpisodeRunner(1, tmp_path, rclpy_node, arms=[ArmSpec(robot_id=bridge_test.NS, episodes_per_round=2)])
    scenes = [generate_seeded("pick_place", 30 + i, SceneParams()) for i in range(3)]
    jobs = [(s, f"r001-e{i:04d}") for i, s in enumerate(scenes)]
    try:
        episodes = runner.run(jobs, "expert", real={bridge_test.NS: 2})
    finally:
        runner.close()
        stop.set()
        spinner.join()
        executor.remove_node(rclpy_node)
        executor.shutdown()
    assert arm.poll() is not None, "the stand-in was not killed"
    assert [e.scene.scene_id for e in episodes] == [s.scene_id for s in scenes]  # nothing lost
    assert all(e.status == 0 for e in episodes)
    assert len(runner.unfinished) == 1
    aborted = runner.unfinished[0]
    assert aborted.status == 1 and aborted.episode_id == "r001-e0000" and aborted.robot_id == bridge_test.NS
    assert "watchdog" in aborted.status_detail, aborted.status_detail
    assert episodes[0].episode_id == "r001-e0000-retry1" and episodes[0].robot_id.startswith("local_")
    assert bridge_test.NS in runner.arm_notes and "ABORTED" in runner.arm_notes[bridge_test.NS]
    assert any(e["kind"] == "watchdog" for e in runner.safety_events.values())
