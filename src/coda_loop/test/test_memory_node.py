# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The memory node as a real process over DDS: durable history for late joiners, live events, QueryMemory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message

from coda_engine.ros.spin import call_spinning, spin_until
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams
from coda_engine.text_embedding import TextEmbedder
from coda_loop.memory import MemoryStore
from coda_msgs.msg import Diagnosis, MemoryEvent, SceneSpec
from coda_msgs.srv import QueryMemory

pytestmark = pytest.mark.ros

DURABLE = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=100,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
TEXT = "Missed the grasp: the gripper closed beside the red cube in the left_far region and never held it."


def node_cmd(*ros_args: str) -> list[str]:
    return [sys.executable, "-m", "coda_loop.ros.memory_node", "--ros-args", *ros_args]


def call(node: Any, client: Any, request: QueryMemory.Request) -> QueryMemory.Response:
    assert client.wait_for_service(timeout_sec=30.0), "query_memory did not appear"
    response = call_spinning(node, client, request, 30.0)
    assert response is not None, "no response"
    return response


def prefill(path: Path) -> MemoryStore:
    """Five records: two critic versions, a scene, a diagnosis and a progress row (sequences 1..5)."""
    store = MemoryStore(path, embedder=TextEmbedder())
    store.put_critic_version(0, version_id="c0", backend="grounded", info={})
    store.put_critic_version(0, version_id="c1", backend="learned", info={"accuracy": 0.8})
    scene = generate_seeded("pick_place", 5, SceneParams(), scene_id="r000-pick_place-5-0000")
    store.put_scene(0, scene.to_dict(), origin="probe")
    store.put_diagnosis(
        0,
        {
            "header": {"stamp": {"sec": 0, "nanosec": 0}, "frame_id": ""},
            "diagnosis_id": "dx-1",
            "episode_ids": ["ep-1"],
            "scene_id": scene.scene_id,
            "family": "pick_place",
            "failure_mode": "missed_grasp",
            "failed_stage": 1,
            "failed_stage_name": "grasp",
            "target_object": scene.target_object,
            "conditions": [{"key": "family", "value": "pick_place"}, {"key": "position_region", "value": "left_far"}],
            "text": TEXT,
            "confidence": 0.9,
            "critic_backend": "grounded",
            "critic_version": "",
        },
    )
    store.put_progress(0, family="pick_place", split="id", success=0.25, episodes=8, policy_version="sft-0")
    return store


def test_memory_node_announces_history_and_new_writes_and_answers_queries(
    rclpy_node: Any, start_process: Any, tmp_path: Path
) -> None:
    store = prefill(tmp_path / "memory.db")
    proc = start_process(node_cmd("-p", f"db_path:={store.path}", "-p", "history_depth:=4", "-p", "poll_hz:=50.0"))
    client = rclpy_node.create_client(QueryMemory, "query_memory")
    first = call(rclpy_node, client, QueryMemory.Request(query="records", kind="diagnosis", round_min=-1, round_max=-1))
    assert first.success, first.error

    # a late joiner with durable QoS gets the last history_depth events, in order
    events: list[MemoryEvent] = []
    rclpy_node.create_subscription(MemoryEvent, "memory_events", events.append, DURABLE)
    assert spin_until(rclpy_node, lambda: len(events) >= 4, 20.0), f"history: {[e.sequence for e in events]}"
    assert [(e.sequence, e.kind) for e in events] == [
        (2, "critic_version"),
        (3, "scene"),
        (4, "diagnosis"),
        (5, "progress"),
    ]
    critic, scene, diagnosis, progress = events
    assert json.loads(critic.payload_json)["version_id"] == "c1" and critic.payload_type == "" and not critic.payload
    assert diagnosis.payload_type == "coda_msgs/msg/Diagnosis"
    typed = deserialize_message(bytes(diagnosis.payload), Diagnosis)
    assert (typed.diagnosis_id, typed.text, typed.failed_stage_name) == ("dx-1", TEXT, "grasp")
    assert [(c.key, c.value) for c in typed.conditions] == [("family", "pick_place"), ("position_region", "left_far")]
    assert diagnosis.uri == f"sqlite://{store.path}#diagnoses/dx-1" and diagnosis.record_id == "dx-1"
    spec = deserialize_message(bytes(scene.payload), SceneSpec)
    assert spec.scene_id == "r000-pick_place-5-0000" and len(spec.objects) >= 2
    assert spec.mjcf == "" and spec.mjcf_uri == scene.uri, "the MJCF text should be left to the record"
    assert json.loads(progress.payload_json)["success"] == 0.25 and progress.header.stamp.sec > 0

    # a write from this process is announced
    store.put_progress(1, family="pick_place", split="id", success=0.5, episodes=8, policy_version="sft-1")
    assert spin_until(rclpy_node, lambda: len(events) >= 5, 20.0), "the new write was not announced"
    assert (events[4].sequence, events[4].kind, events[4].round) == (6, "progress", 1)
    assert events[4].record_id == "r001/pick_place/id/sft-1"

    # queries: good ones answer, bad ones name the problem, and the node keeps serving
    assert [r.record_id for r in first.records] == ["dx-1"] and first.records[0].payload_type.endswith("Diagnosis")
    progress_answer = call(rclpy_node, client, QueryMemory.Request(query="progress", round_min=1, round_max=-1))
    assert progress_answer.success, progress_answer.error
    assert [row["success"] for row in json.loads(progress_answer.result_json)["progress"]] == [0.5]
    # the message defaults (round_min = round_max = -1) put no bound on rounds
    assert (QueryMemory.Request().round_min, QueryMemory.Request().round_max) == (-1, -1)
    every_round = call(rclpy_node, client, QueryMemory.Request(query="progress"))
    assert every_round.success, every_round.error
    assert sorted(row["round"] for row in json.loads(every_round.result_json)["progress"]) == [0, 1]
    bad = {
        "query='closest' is not a query kind; allowed: records": QueryMemory.Request(query="closest"),
        "kind='robot' is not a record kind": QueryMemory.Request(query="records", kind="robot"),
        "limit=5000 must be in 1..1000": QueryMemory.Request(query="records", limit=5000),
        "round_min=3 > round_max=1": QueryMemory.Request(query="records", round_min=3, round_max=1),
        "text is required for query 'similar_diagnoses'": QueryMemory.Request(query="similar_diagnoses"),
        "record_id='dx-404' is not a stored diagnosis": QueryMemory.Request(
            query="generation_effect", record_id="dx-404"
        ),
    }
    for expected, request in bad.items():
        answer = call(rclpy_node, client, request)
        assert not answer.success and expected in answer.error, answer.error
        assert not answer.records
    again = call(rclpy_node, client, QueryMemory.Request(query="records", limit=2))
    assert again.success and [r.sequence for r in again.records] == [6, 5]
    assert proc.poll() is None, "the node stopped"
    store.close()


def test_memory_node_refuses_to_start_without_db_path(ros_domain: int, tmp_path: Path) -> None:
    done = subprocess.run(node_cmd(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "parameter db_path is empty" in done.stderr
    done = subprocess.run(
        node_cmd("-p", f"db_path:={tmp_path / 'm.db'}", "-p", "history_depth:=0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "history_depth=0 must be an integer in [1, 100000]" in done.stderr, done.stderr
    assert not (tmp_path / "m.db").exists()


def test_memory_node_made_in_process_takes_keyword_parameters(ros_domain: int, tmp_path: Path) -> None:
    import rclpy
    from rclpy.context import Context

    from coda_loop.ros.memory_node import MemoryNode, MemoryNodeError

    with MemoryStore(tmp_path / "memory.db", embedder=object()) as store:
        for r in range(3):
            store.put_progress(r, family="reach", split="id", success=0.5, episodes=2, policy_version=f"p{r}")
    context = Context()
    rclpy.init(context=context, domain_id=ros_domain)
    try:
        node = MemoryNode(db_path=str(tmp_path / "memory.db"), history_depth=2, poll_hz=5.0, context=context)
        assert node.param("history_depth") == 2 and node.param("poll_hz") == 5.0
        assert node.last_sequence == 3, "the last history_depth events were not announced"
        assert node.publisher.qos_profile.depth == 2
        node.destroy_node()
        with pytest.raises(RuntimeError, match="is closed"):
            node.store.last_sequence()
        with pytest.raises(MemoryNodeError, match="db_path is empty"):
            MemoryNode(context=context)
    finally:
        rclpy.shutdown(context=context)
