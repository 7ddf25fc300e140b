# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""A participant SIGKILLed on the domain must not stall the other processes' action results.

A ``sim_bridge`` serves ``run_episode``; a client in another process sends it a goal and is SIGKILLed while the
episode runs, and so are a third process that only listens to the bridge's topics and the bridge itself (a worker or
driver that crashes). A new bridge comes up under the same name. Measured: how long the killed bridge stays in the
graph (while it does, a client still sees its server, and a goal sent to it is lost without an answer: with Fast
DDS's default 20 s lease, a goal sent right after such a kill got no answer in 300 s and the loop's runner waits its
timeout, minutes), and how long results then take for the client that was there before the kills and for a client
process started after them. The workspace's Fast DDS profile (``src/coda_engine/config/dds/fastdds.xml``, exported by
``scripts/env.sh``) shortens the lease to 3 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from coda_engine.ros.convert import dict_to_msg
from coda_engine.ros.spin import spin_until
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams
from coda_msgs.action import RunEpisode
from coda_msgs.msg import EpisodeResult, SceneSpec

pytestmark = pytest.mark.ros

LEASE_BOUND_S = 10.0
"""Longest time a SIGKILLed participant may stay in the graph (Fast DDS's default lease: 20 s; the profile's: 3 s)."""
RESULT_BOUND_S = 20.0
"""Longest time from a goal to its result after the kills: a stall of minutes breaks it, a busy machine does not."""
NAMESPACE = "/sk"

VICTIM = textwrap.dedent("""
    import sys, rclpy
    from rclpy.action import ActionClient
    from coda_engine.ros.convert import dict_to_msg
    from coda_engine.sim.generator import generate_seeded
    from coda_engine.sim.scene import SceneParams
    from coda_msgs.action import RunEpisode
    from coda_msgs.msg import SceneSpec
    rclpy.init()
    node = rclpy.create_node("victim_client")
    client = ActionClient(node, RunEpisode, sys.argv[1] + "/run_episode")
    client.wait_for_server(timeout_sec=120.0)
    scene = dict_to_msg(SceneSpec, generate_seeded("stack", 4, SceneParams()).to_dict())
    seen = []
    goal = RunEpisode.Goal(scene=scene, policy_version="expert", record_keyframes=True)
    future = client.send_goal_async(goal, feedback_callback=lambda f: seen.append(f))
    while not seen:
        rclpy.spin_once(node, timeout_sec=0.1)
    print("RUNNING", flush=True)
    while True:
        rclpy.spin_once(node, timeout_sec=0.1)
    """)
LISTENER = textwrap.dedent("""
    import sys, rclpy
    from sensor_msgs.msg import JointState
    from coda_msgs.msg import ObjectStates
    rclpy.init()
    node = rclpy.create_node("victim_listener")
    got = []
    node.create_subscription(JointState, sys.argv[1] + "/joint_states", got.append, 10)
    node.create_subscription(ObjectStates, sys.argv[1] + "/object_states", got.append, 10)
    while not got:
        rclpy.spin_once(node, timeout_sec=0.1)
    print("LISTENING", flush=True)
    while True:
        rclpy.spin_once(node, timeout_sec=0.1)
    """)
LATE_CLIENT = textwrap.dedent("""
    import json, sys, time, rclpy
    from rclpy.action import ActionClient
    from coda_engine.ros.convert import dict_to_msg
    from coda_engine.ros.spin import spin_until
    from coda_engine.sim.generator import generate_seeded
    from coda_engine.sim.scene import SceneParams
    from coda_msgs.action import RunEpisode
    from coda_msgs.msg import SceneSpec
    rclpy.init()
    node = rclpy.create_node("late_client")
    client = ActionClient(node, RunEpisode, sys.argv[1] + "/run_episode")
    start = time.monotonic()
    assert client.wait_for_server(timeout_sec=120.0)
    found = time.monotonic() - start
    times = []
    for seed in (21, 22):
        scene = dict_to_msg(SceneSpec, generate_seeded("reach", seed, SceneParams()).to_dict())
        t0 = time.monotonic()
        sent = client.send_goal_async(RunEpisode.Goal(scene=scene, policy_version="expert", max_steps=8))
        assert spin_until(node, sent.done, 300.0)
        result = sent.result().get_result_async()
        assert spin_until(node, result.done, 300.0)
        times.append(time.monotonic() - t0)
    print(json.dumps({"discovery_s": found, "results_s": times}), flush=True)
    """)


def _wait_line(proc: subprocess.Popen, word: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if word in line:
            return
        assert proc.poll() is None, f"exited {proc.returncode} before saying {word}"
    pytest.fail(f"no {word} within {timeout:g} s")


def _endpoints(node: Any) -> set[bytes]:
    """Return the endpoint ids of the bridges subscribed to the arm's trajectory topic (one set per bridge process)."""
    infos = node.get_subscriptions_info_by_topic(f"{NAMESPACE}/joint_trajectory_controller/joint_trajectory")
    return {bytes(info.endpoint_gid) for info in infos}


def _goal(seed: int) -> RunEpisode.Goal:
    scene = dict_to_msg(SceneSpec, generate_seeded("reach", seed, SceneParams()).to_dict())
    return RunEpisode.Goal(scene=scene, policy_version="expert", max_steps=8)


def _result_time(node: Any, client: Any, goal: RunEpisode.Goal) -> float:
    start = time.monotonic()
    sent = client.send_goal_async(goal)
    assert spin_until(node, sent.done, 300.0), "the goal was never answered"
    future = sent.result().get_result_async()
    assert spin_until(node, future.done, 300.0), "no result in 300 s"
    assert future.result().result.result.status == EpisodeResult.STATUS_COMPLETED
    return time.monotonic() - start


def test_results_keep_arriving_after_participants_are_sigkilled(rclpy_node: Any, start_process: Any) -> None:
    from rclpy.action import ActionClient

    py = sys.executable
    bridge_cmd = [py, "-m", "coda_engine.ros.sim_bridge_node", "--ros-args", "-r", f"__ns:={NAMESPACE}", "-p",
                  "camera_rate_hz:=0.0"]
    first = start_process(bridge_cmd)
    client = ActionClient(rclpy_node, RunEpisode, f"{NAMESPACE}/run_episode")
    assert client.wait_for_server(timeout_sec=120.0)
    before = _result_time(rclpy_node, client, _goal(11))
    dead = _endpoints(rclpy_node)
    assert dead, "the bridge's endpoints are not in the graph"

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    victims = [subprocess.Popen([py, "-c", script, NAMESPACE], env=env, stdout=subprocess.PIPE, text=True)
               for script in (VICTIM, LISTENER)]
    try:
        _wait_line(victims[1], "LISTENING", 120.0)
        _wait_line(victims[0], "RUNNING", 120.0)  # its episode runs on the bridge now
        killed_at = time.monotonic()
        for proc in (*victims, first):  # the bridge mid-episode too: a driver or worker that crashes
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        for victim in victims:
            if victim.poll() is None:
                victim.kill()
                victim.wait()

    # Who comes next on the domain: a new bridge under the same name, the old client, a new client process.
    second = start_process(bridge_cmd)
    late = subprocess.Popen([py, "-c", LATE_CLIENT, NAMESPACE], env=env, stdout=subprocess.PIPE, text=True)
    assert spin_until(rclpy_node, lambda: not (_endpoints(rclpy_node) & dead), 300.0), "the killed bridge stayed"
    gone = time.monotonic() - killed_at
    assert spin_until(rclpy_node, lambda: bool(_endpoints(rclpy_node)) and client.server_is_ready(), 300.0)
    after = [_result_time(rclpy_node, client, _goal(seed)) for seed in (12, 13, 14)]
    out, _ = late.communicate(timeout=400)
    assert late.returncode == 0, out
    late_figures = json.loads(out.strip().splitlines()[-1])
    sys.stderr.write(
        f"run_episode: result before the kills {before:.2f} s; the killed bridge left the graph {gone:.1f} s after "
        f"the kills; then results in {[round(t, 2) for t in after]} s (client from before); a client started after "
        f"the kills found the new bridge in {late_figures['discovery_s']:.2f} s, results in "
        f"{[round(t, 2) for t in late_figures['results_s']]} s\n")
    assert second.poll() is None
    assert gone < LEASE_BOUND_S, f"the killed bridge stayed in the graph for {gone:.1f} s (its goals get lost)"
    assert max(after) < RESULT_BOUND_S, after
    assert late_figures["discovery_s"] < RESULT_BOUND_S, late_figures
    assert max(late_figures["results_s"]) < RESULT_BOUND_S, late_figures
