# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The e-stop's transitions on a real arm reach the run's memory: one record each, in the order they happened.

The arm side is the engine's stand-in (``fake_ros2_control_arm``) behind ``arm_bridge``, each its own process, driven
with the helpers of coda_engine's ``test_arm_bridge.py``; the loop side is the EpisodeRunner's ``safety_events``
subscription and the loop's own step that stores what it collected.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.ros


def test_each_estop_transition_is_its_own_memory_record_in_order(tmp_path: Path, start_process: Any,
                                                                 rclpy_node: Any, engine_test_helpers: Any) -> None:
    from std_msgs.msg import Bool

    from coda_loop.fleet import ArmSpec
    from coda_loop.memory import MemoryStore
    from coda_loop.report.data import all_records
    from coda_loop.rounds import CoevolutionLoop
    from coda_loop.workers import EpisodeRunner

    bridge_test = engine_test_helpers("test_arm_bridge")
    bridge_test.start_arm(start_process)
    bridge_test.start_bridge(start_process, bridge_test.ROBOT_FILE)
    probe = bridge_test.Probe(rclpy_node)
    assert probe.spin(20.0, lambda: probe.q is not None and probe.commands.get_subscription_count() > 0)
    bridge_test.drive_away_from_home(probe)
    probe.estop_topic.publish(Bool(data=True))
    probe.wait_for_event("estop", timeout=20.0, detail="estop topic")
    refused = [probe.call(probe.reset)]  # the topic still says stop
    assert not refused[0].success and "latest message is true" in refused[0].message, refused[0].message
    probe.estop_topic.publish(Bool(data=False))
    more, released = bridge_test.release_when_quiet(probe)
    refused += more
    assert released.success, released.message
    probe.wait_for_event("home", timeout=60.0)
    expected = ["estop", *["estop_release_refused"] * len(refused), "estop_released", "rehoming", "home"]
    assert bridge_test.transitions(probe.events) == expected

    # the loop's runner subscribes afterwards (transient local: it still gets them all) and the loop stores them
    runner = EpisodeRunner(0, tmp_path / "checkpoints", rclpy_node,
                           arms=[ArmSpec(robot_id=bridge_test.NS, episodes_per_round=1)])
    store = MemoryStore(tmp_path / "memory.db")
    try:
        deadline = time.monotonic() + 30.0
        while len(runner.safety_events) < len(probe.events) and time.monotonic() < deadline:
            runner.collect_events(0.5)
        assert len(runner.safety_events) == len(probe.events), "events deduplicated away or not received"
        loop = SimpleNamespace(store=store, runner=runner)  # what CoevolutionLoop's storing step reads
        stored = CoevolutionLoop._store_interventions(loop, 3)
        assert len(stored) == len(probe.events)
        assert CoevolutionLoop._store_interventions(loop, 4) == []  # each once, however often it is collected
        records = all_records(store, "intervention")
        assert [r.record_id for r in records] == stored
        assert [r.payload["kind"] for r in records] == [e.kind for e in probe.events]  # the order they happened
        assert bridge_test.transitions([SimpleNamespace(kind=r.payload["kind"]) for r in records]) == expected
        assert [r.payload["detail"] for r in records] == [e.detail for e in probe.events]
        assert all(r.round == 3 and r.payload["robot_id"] == bridge_test.NS for r in records)
    finally:
        runner.close()
        store.close()
