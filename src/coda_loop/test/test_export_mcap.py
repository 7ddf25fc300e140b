# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda export --mcap``: a real run folder -> rosbag2 MCAP, read back by rosbags, mcap_ros2 and rclpy."""

from __future__ import annotations

import importlib
import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from rosbags.highlevel import AnyReader

from coda_loop.cli import main
from coda_loop.export_mcap import (
    TOPIC_COMMANDS,
    TOPIC_DIAGNOSES,
    TOPIC_EPISODES,
    TOPIC_KEYFRAMES,
    TOPIC_TRAJECTORY,
    TOPIC_TYPES,
    CdrEncoder,
    ExportError,
    MessageDefinitions,
)
from coda_loop.memory import MemoryStore
from coda_loop.report.data import all_records

_spec = importlib.util.spec_from_file_location("coda_test_report_builder", Path(__file__).with_name("test_report.py"))
_builder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_builder)
SCRIPT = _builder.SCRIPT


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("export")
    run_dir = root / "run-b"
    _builder.build_run(run_dir)
    path = root / "out" / "run.mcap"
    assert main(["export", str(run_dir), "--mcap", str(path)]) == 0
    store = MemoryStore(run_dir / "memory.db")
    try:
        episodes = all_records(store, "episode")
        frames = {r.record_id: store.load_keyframes(r) for r in episodes}
        diagnoses = all_records(store, "diagnosis")
        models = {r.payload["version_id"]: r.payload["model_sha256"] for r in all_records(store, "policy_version")}
    finally:
        store.close()
    return {"run_dir": run_dir, "path": path, "episodes": episodes, "frames": frames, "diagnoses": diagnoses,
            "models": models}


def _expected_counts(episodes, diagnoses) -> dict[str, int]:
    samples = [s for r in episodes for s in r.payload["trajectory"]]
    return {
        TOPIC_TRAJECTORY: len(samples),
        TOPIC_COMMANDS: sum(int(s["step"]) > 0 for s in samples),
        TOPIC_KEYFRAMES: sum(len(r.payload["keyframe_hashes"]) for r in episodes),
        TOPIC_EPISODES: len(episodes),
        TOPIC_DIAGNOSES: len(diagnoses),
    }


def test_rosbags_reads_the_export(exported):
    expected = _expected_counts(exported["episodes"], exported["diagnoses"])
    assert expected[TOPIC_KEYFRAMES] >= 2 * len(exported["episodes"]) and expected[TOPIC_DIAGNOSES] == 9
    with AnyReader([exported["path"]]) as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == TOPIC_TYPES
        assert {c.topic: c.msgcount for c in reader.connections} == expected
        messages = [(c.topic, t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages()]
    times = [t for _, t, _ in messages]
    assert times == sorted(times)
    # keyframes decode to the stored pixels, in episode order
    first = exported["episodes"][0]
    images = [m for topic, _, m in messages if topic == TOPIC_KEYFRAMES][: len(first.payload["keyframe_hashes"])]
    for image, frame in zip(images, exported["frames"][first.record_id], strict=True):
        assert image.encoding == "rgb8" and image.step == image.width * 3
        assert np.array_equal(np.asarray(image.data).reshape(image.height, image.width, 3), frame)
    # diagnoses: the explanation with the script tag survives byte for byte
    texts = {m.diagnosis_id: m.text for topic, _, m in messages if topic == TOPIC_DIAGNOSES}
    stored = {r.record_id: r.payload["text"] for r in exported["diagnoses"]}
    assert texts == stored and any(t.startswith(SCRIPT) for t in texts.values())
    # episodes: results without images, keyframe blobs named by hash; samples laid end to end in time
    results = [(t, m) for topic, t, m in messages if topic == TOPIC_EPISODES]
    assert [m.episode_id for _, m in results] == [r.record_id for r in exported["episodes"]]
    for (t, m), rec in zip(results, exported["episodes"], strict=True):
        assert len(m.keyframes) == 0 and list(m.keyframe_uris) == rec.payload["keyframe_hashes"]
        assert m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec == t
        assert m.success == rec.payload["success"] and m.length == rec.payload["length"]
    samples = [(t, m) for topic, t, m in messages if topic == TOPIC_TRAJECTORY]
    assert samples[0][0] == results[0][0] - round(exported["episodes"][0].payload["length"] / 10 * 1e9)
    step_zero = [t for t, m in samples if m.step == 0]
    assert step_zero[1] == results[0][0]  # the second episode starts where the first ended
    # commands: the sample's action, with ArmCommand's gripper sign (< 0 closes; samples keep +1 = closes)
    actions = [list(m.action) for _, m in samples if m.step > 0]
    commands = [m for topic, _, m in messages if topic == TOPIC_COMMANDS]
    assert len(commands) == len(actions) and any(a[3] > 0 for a in actions) and any(a[3] < 0 for a in actions)
    for command, action in zip(commands, actions, strict=True):
        assert [command.delta.x, command.delta.y, command.delta.z] == pytest.approx(action[:3])
        assert command.gripper == pytest.approx(-action[3])
    # each command names the acting version's model as memory recorded it (empty for the expert)
    for command in commands:
        assert command.policy_sha256 == exported["models"].get(command.policy_version, "")
    assert any(command.policy_sha256 for command in commands), "no exported command names a trained model"


def test_mcap_ros2_decoder_and_rclpy_read_the_export(exported):
    from rclpy.serialization import deserialize_message

    def get_message(type_name: str) -> type:
        pkg, _, name = type_name.split("/")
        return getattr(importlib.import_module(f"{pkg}.msg"), name)

    expected = _expected_counts(exported["episodes"], exported["diagnoses"])
    counts: Counter[str] = Counter()
    first_raw: dict[str, bytes] = {}
    with exported["path"].open("rb") as stream:
        reader = make_reader(stream, decoder_factories=[DecoderFactory()])
        header = reader.get_header()
        assert header.profile == "ros2"
        for schema, channel, message, decoded in reader.iter_decoded_messages(log_time_order=False):
            assert schema.encoding == "ros2msg" and channel.message_encoding == "cdr"
            counts[channel.topic] += 1
            first_raw.setdefault(channel.topic, message.data)
            if channel.topic == TOPIC_DIAGNOSES and decoded.text.startswith(SCRIPT):
                script_diagnosis = decoded
        schemas = {s.name: s.data.decode() for s in reader.get_summary().schemas.values()}
    assert dict(counts) == expected
    assert script_diagnosis.failure_mode != "success" and len(script_diagnosis.conditions) > 0
    # the custom definitions travel with the file, dependencies included
    assert "MSG: coda_msgs/TrajectorySample" in schemas["coda_msgs/msg/EpisodeResult"]
    assert "MSG: coda_msgs/ObjectState" in schemas["coda_msgs/msg/EpisodeResult"]
    assert "MSG: sensor_msgs/Image" in schemas["coda_msgs/msg/EpisodeResult"]
    assert "MSG: coda_msgs/Condition" in schemas["coda_msgs/msg/Diagnosis"]
    # what `ros2 bag play` would publish: the bytes decode with rclpy's own type support
    for topic, type_name in TOPIC_TYPES.items():
        msg = deserialize_message(first_raw[topic], get_message(type_name))
        if topic == TOPIC_KEYFRAMES:
            first = exported["episodes"][0]
            frame = exported["frames"][first.record_id][0]
            assert np.array_equal(np.frombuffer(bytes(msg.data), np.uint8).reshape(frame.shape), frame)
        if topic == TOPIC_TRAJECTORY:
            assert len(msg.objects) > 0 and msg.step == 0


def test_export_one_round_and_bad_input(exported, tmp_path, capsys):
    path = tmp_path / "r1.mcap"
    assert main(["export", str(exported["run_dir"]), "--mcap", str(path), "--round", "1", "--json"]) == 0
    assert '"episodes": 5' in capsys.readouterr().out
    episodes = [r for r in exported["episodes"] if r.round == 1]
    diagnoses = [r for r in exported["diagnoses"] if r.round == 1]
    with AnyReader([path]) as reader:
        assert {c.topic: c.msgcount for c in reader.connections} == _expected_counts(episodes, diagnoses)
    assert main(["export", str(exported["run_dir"]), "--mcap", str(tmp_path / "r9.mcap"), "--round", "9"]) == 2
    assert "no episodes or diagnoses in round 9" in capsys.readouterr().err
    assert not (tmp_path / "r9.mcap").exists()
    assert main(["export", str(tmp_path / "nope"), "--mcap", str(tmp_path / "x.mcap")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_encoder_names_the_missing_field():
    encoder = CdrEncoder(MessageDefinitions.load(["coda_msgs/msg/ArmCommand"]))
    command = {
        "header": {"stamp": {"sec": 1, "nanosec": 2}, "frame_id": "world"},
        "policy_version": "v1",
        "policy_sha256": "",
        "delta": {"x": 0.01, "y": 0.0, "z": -0.02},
        "gripper": -1.0,
        "hold": False,
        "hold_reason": "",
        "stage": 2,
    }
    assert len(encoder.encode("coda_msgs/msg/ArmCommand", command)) > 40
    del command["delta"]["z"]
    with pytest.raises(ExportError, match=r"ArmCommand\.delta\.z: missing"):
        encoder.encode("coda_msgs/msg/ArmCommand", command)
    with pytest.raises(ExportError, match="not found under share/coda_msgs/msg"):
        MessageDefinitions.load(["coda_msgs/msg/NoSuchType"])
