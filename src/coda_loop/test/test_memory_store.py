# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The memory store on real SQLite files: migrations, every write and read, blobs, retrieval, queries, two processes."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coda_engine.episodes import run_recorded_episode
from coda_engine.policies import resolve
from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams
from coda_engine.text_embedding import TextEmbedder
from coda_loop.memory import KINDS, MemoryQueryError, MemoryRecord, MemoryStore, parse_uri
from coda_loop.memory import records as memory_records
from coda_loop.memory import schema as memory_schema
from coda_loop.step_results import (
    AllocationSummary,
    EpisodesResult,
    GenerateResult,
    ProgramsResult,
    RLResult,
    StepResultError,
    TrainResult,
)


@pytest.fixture(scope="module")
def embedder() -> TextEmbedder:
    """Load the real offline MiniLM embedder once for the module."""
    return TextEmbedder()


@pytest.fixture
def store(tmp_path: Path, embedder: TextEmbedder) -> Any:
    with MemoryStore(tmp_path / "run" / "memory.db", embedder=embedder) as memory:
        yield memory


@pytest.fixture(scope="module")
def recorded() -> Any:
    """One real recorded reach episode (expert) with its scene and keyframes."""
    scene = generate_seeded("reach", 3, SceneParams(), scene_id="r000-reach-3-0000")
    act = resolve("expert", scene, None)
    episode = run_recorded_episode(SimArm(), scene, act, episode_id="ep-0", policy_version="expert", robot_id="w0")
    assert episode.keyframes, "the recording took no keyframes"
    return episode


def diagnosis(
    diagnosis_id: str,
    *,
    family: str = "pick_place",
    mode: str = "missed_grasp",
    text: str = "",
    conditions: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Build a diagnosis dict with the fields and nesting of ``Diagnosis.to_dict()``."""
    conditions = {"family": family, **(conditions or {})}
    return {
        "header": {"stamp": {"sec": 0, "nanosec": 0}, "frame_id": ""},
        "diagnosis_id": diagnosis_id,
        "episode_ids": [f"ep-{diagnosis_id}"],
        "scene_id": f"scene-{diagnosis_id}",
        "family": family,
        "failure_mode": mode,
        "failed_stage": -1 if mode == "success" else 1,
        "failed_stage_name": "" if mode == "success" else "grasp",
        "target_object": "red_cube",
        "conditions": [{"key": k, "value": v} for k, v in conditions.items()],
        "text": text or f"{mode} in {family} with {conditions}",
        "confidence": 1.0,
        "critic_backend": "grounded",
        "critic_version": "",
    }


# ---------------------------------------------------------------- file, schema, migrations
def test_new_memory_is_versioned_and_in_wal_mode(store: MemoryStore, tmp_path: Path) -> None:
    assert store.schema_version == memory_schema.LATEST_VERSION == 2
    assert store.path == (tmp_path / "run" / "memory.db").resolve()
    assert store.blob_dir.is_dir()
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(1,), (2,)]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {t.table for t in memory_schema.TABLES.values()} | {"events", "blobs", "loop_steps", "run_starts"} <= tables
    conn.close()
    store.close()
    reopened = MemoryStore(store.path, embedder=store._embedder)
    assert reopened.schema_version == 2
    assert reopened.conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 2, "a migration applied twice"
    reopened.close()


def test_rollback_journal_when_wal_is_off(tmp_path: Path, embedder: TextEmbedder) -> None:
    with MemoryStore(tmp_path / "plain.db", embedder=embedder, wal=False) as memory:
        assert memory.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_second_migration_upgrades_an_existing_file(
    tmp_path: Path, embedder: TextEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MemoryStore(tmp_path / "memory.db", embedder=embedder) as memory:
        memory.put_critic_version(0, version_id="c1", backend="grounded", info={})
    v3 = memory_schema.Migration(3, "critic notes", "ALTER TABLE critic_versions ADD COLUMN note TEXT DEFAULT ''")
    monkeypatch.setattr(memory_records, "MIGRATIONS", (*memory_schema.MIGRATIONS, v3))
    monkeypatch.setattr(memory_records, "LATEST_VERSION", 3)
    with MemoryStore(tmp_path / "memory.db", embedder=embedder) as memory:
        assert memory.schema_version == 3
        assert memory.conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall() == [
            (1,), (2,), (3,)]
        assert memory.conn.execute("SELECT version_id, note FROM critic_versions").fetchall() == [("c1", "")]
        assert memory.get("critic_version", "c1") is not None


def test_a_v1_memory_gets_run_starts_and_keeps_its_records(
    tmp_path: Path, embedder: TextEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run folder written before v2 opens with the current code: upgraded in place, nothing lost."""
    with monkeypatch.context() as v1_code:
        v1_code.setattr(memory_records, "MIGRATIONS", memory_schema.MIGRATIONS[:1])
        v1_code.setattr(memory_records, "LATEST_VERSION", 1)
        with MemoryStore(tmp_path / "memory.db", embedder=embedder) as memory:
            assert memory.schema_version == 1
            memory.put_critic_version(0, version_id="c1", backend="grounded", info={})
            memory.finish_step(0, TrainResult(version="r000-sft"))
    with MemoryStore(tmp_path / "memory.db", embedder=embedder) as memory:
        assert memory.schema_version == 2 and memory.starts() == []
        assert memory.get("critic_version", "c1") is not None
        assert memory.finished_step(0, TrainResult) == TrainResult(version="r000-sft")
        assert memory.record_start(0, {"commit": "a" * 40, "dirty": False}) == 1
        assert memory.record_start(3, {"commit": "b" * 40, "dirty": True}) == 2
        starts = memory.starts()
    assert [(s["start_id"], s["first_round"], s["commit"][0], s["dirty"]) for s in starts] == [
        (1, 0, "a", False), (2, 3, "b", True)]
    assert all(s["started"] > 0 for s in starts)
    with MemoryStore(tmp_path / "memory.db", embedder=embedder) as memory, pytest.raises(ValueError, match="round"):
        memory.record_start(-1, {})


def test_a_file_from_newer_code_is_refused(tmp_path: Path, embedder: TextEmbedder) -> None:
    MemoryStore(tmp_path / "memory.db", embedder=embedder).close()
    conn = sqlite3.connect(tmp_path / "memory.db")
    conn.execute("INSERT INTO schema_version VALUES (7, 'future', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError, match="schema v7, newer than this code's v2"):
        MemoryStore(tmp_path / "memory.db", embedder=embedder)


# ---------------------------------------------------------------- writes and reads
def test_every_kind_round_trips_and_re_puts_are_idempotent(store: MemoryStore, recorded: Any, tmp_path: Path) -> None:
    scene = recorded.scene.to_dict()
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"weights-v1")
    (checkpoint / "config.json").write_text('{"d": 1}')
    writes = {
        "scene": lambda: store.put_scene(0, scene, origin="probe", program_id="gp-0"),
        "episode": lambda: store.put_episode(0, recorded.to_result_dict(), recorded.keyframes, purpose="probe"),
        "diagnosis": lambda: store.put_diagnosis(0, diagnosis("dx-1", conditions={"position_region": "left_far"})),
        "generation_program": lambda: store.put_program(
            0,
            "generation_program",
            {"program_id": "gp-1", "allocations": [{"cause_diagnosis_ids": ["dx-1"]}]},
            record_id="gp-1",
        ),
        "training_program": lambda: store.put_program(
            0, "training_program", {"program_id": "tp-1"}, record_id="tp-1", diagnosis_ids=["dx-1"]
        ),
        "potential_program": lambda: store.put_program(
            0, "potential_program", {"program_id": "pp-1", "source_diagnosis_id": "dx-1"}, record_id="pp-1"
        ),
        "progress": lambda: store.put_progress(
            1, family="reach", split="id", success=0.75, episodes=8, policy_version="p1"
        ),
        "policy_version": lambda: store.put_policy_version(
            1, version_id="p1", checkpoint_dir=checkpoint, parent="expert", metrics={"success": 0.75}
        ),
        "critic_version": lambda: store.put_critic_version(0, version_id="c1", backend="learned", info={"acc": 0.9}),
        "intervention": lambda: store.put_intervention(1, intervention_id="stop-1", info={"reason": "e-stop"}),
    }
    assert set(writes) == set(KINDS)
    records = {kind: write() for kind, write in writes.items()}
    assert [r.sequence for r in records.values()] == list(range(1, len(KINDS) + 1))
    for kind, record in records.items():
        assert record.kind == kind
        assert store.get(kind, record.record_id) == record
        path, table, record_id = parse_uri(record.uri)
        assert path == store.path and table == memory_schema.TABLES[kind].table and record_id == record.record_id
    assert records["scene"].payload == {**json.loads(json.dumps(scene)), "origin": "probe", "program_id": "gp-0"}
    assert records["episode"].payload["trajectory"] == json.loads(json.dumps(recorded.samples))
    assert records["progress"].record_id == "r001/reach/id/p1"
    assert {r.record_id for r in (records[k] for k in memory_schema.PROGRAM_KINDS)} == {"gp-1", "tp-1", "pp-1"}
    assert all(records[k].payload["diagnosis_ids"] == ["dx-1"] for k in memory_schema.PROGRAM_KINDS)
    policy = records["policy_version"].payload
    assert policy["model_sha256"] == hashlib.sha256(b"weights-v1").hexdigest()
    assert set(policy["files"]) == {"model.safetensors", "config.json"} and len(policy["checkpoint_sha256"]) == 64

    events = store.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    for kind, write in writes.items():
        assert write() == records[kind], f"re-putting the {kind} changed it"
    assert store.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == events
    assert store.get("scene", "nope") is None
    assert store.counts() == dict.fromkeys(KINDS, 1)

    (checkpoint / "model.safetensors").write_bytes(b"weights-v2")
    other = store.put_policy_version(2, version_id="p2", checkpoint_dir=checkpoint, parent="p1", metrics={})
    assert other.payload["checkpoint_sha256"] != policy["checkpoint_sha256"]


def test_records_filter_by_kind_and_round_and_tail_in_order(store: MemoryStore) -> None:
    for r in range(4):
        store.put_progress(r, family="reach", split="id", success=r / 4, episodes=4, policy_version=f"p{r}")
        store.put_critic_version(r, version_id=f"c{r}", backend="grounded", info={})
    newest_first = store.records("progress")
    assert [r.round for r in newest_first] == [3, 2, 1, 0]
    assert [r.round for r in store.records("progress", round_min=1, round_max=2)] == [2, 1]
    assert [r.kind for r in store.records(limit=3)] == ["critic_version", "progress", "critic_version"]
    tail = store.records(after_sequence=5)
    assert [r.sequence for r in tail] == [6, 7, 8]
    assert store.last_sequence() == 8
    assert store.progress()[0] == {
        "round": 0,
        "family": "reach",
        "split": "id",
        "success": 0.0,
        "episodes": 4,
        "policy_version": "p0",
    }
    summaries = store.event_summaries(after_sequence=6)
    assert [(e["sequence"], e["kind"]) for e in summaries] == [(7, "progress"), (8, "critic_version")]
    assert json.loads(summaries[0]["payload_json"])["success"] == 0.75


def test_keyframes_are_hash_named_blobs_that_round_trip_byte_exact(store: MemoryStore, recorded: Any) -> None:
    scene = recorded.scene.to_dict()
    record = store.put_episode(0, recorded.to_result_dict(), recorded.keyframes, purpose="eval", scene=scene)
    assert store.get("scene", scene["scene_id"]).payload["origin"] == "eval", "scene not stored with the episode"
    hashes = record.payload["keyframe_hashes"]
    assert len(hashes) == len(recorded.keyframes) and len(set(hashes)) == len(hashes)
    assert sorted(p.name for p in store.blob_dir.iterdir()) == sorted(f"{h}.npz" for h in hashes), "stray files"
    frames = store.load_keyframes(store.get("episode", "ep-0"))
    for got, want in zip(frames, recorded.keyframes, strict=True):
        assert got.dtype == np.uint8 and got.shape == want.shape and got.tobytes() == want.tobytes()
    steps = store.conn.execute("SELECT step FROM episode_keyframes ORDER BY idx").fetchall()
    assert [s for (s,) in steps] == recorded.keyframe_steps

    (store.blob_dir / f"{hashes[0]}.npz").write_bytes(b"garbage")
    with pytest.raises(Exception, match=hashes[0][:16]):
        store.load_keyframes(record)
    np.savez_compressed(store.blob_dir / f"{hashes[0]}.npz", frame=recorded.keyframes[0] ^ 1)
    with pytest.raises(RuntimeError, match="does not match its hash"):
        store.load_keyframes(record)


def test_bad_writes_name_the_problem(store: MemoryStore, recorded: Any) -> None:
    result = recorded.to_result_dict()
    cases = [
        (lambda: store.put_episode(0, result, purpose="fun"), "purpose='fun' must be one of probe, train"),
        (
            lambda: store.put_episode(0, result, [np.zeros((4, 4, 3), np.float32)], purpose="probe"),
            r"keyframes\[0\] must be a non-empty uint8 \(H, W, 3\) array",
        ),
        (lambda: store.put_episode(-1, result, purpose="probe"), "round=-1 must be an integer >= 0"),
        (lambda: store.put_episode(0, {**result, "keyframes": []}, purpose="probe"), "pass the frames as"),
        (lambda: store.put_scene(0, {"family": "reach"}, origin="probe"), r"scene\['scene_id'\] must be"),
        (lambda: store.put_program(0, "plan", {}, record_id="x"), "kind='plan' must be one of generation_program"),
        (
            lambda: store.put_progress(0, family="reach", split="id", success=1.5, episodes=1, policy_version="p"),
            r"success=1.5 must be in \[0, 1\]",
        ),
        (
            lambda: store.put_policy_version(
                0, version_id="p", checkpoint_dir="/nonexistent/ckpt", parent="", metrics={}
            ),
            "is not a folder",
        ),
        (lambda: store.put_diagnosis(0, {**diagnosis("dx-b"), "conditions": ["left"]}), "conditions"),
        (lambda: store.put_intervention(0, intervention_id="i", info={"at": object()}), "cannot be stored as JSON"),
    ]
    for write, message in cases:
        with pytest.raises(ValueError, match=message):
            write()
    assert store.last_sequence() == 0, "a rejected write left an event"


def _generated(n: int) -> GenerateResult:
    return GenerateResult(program_id="gp", scene_ids=[f"s{i}" for i in range(n)], probe_ids=["p"])


def test_loop_steps_survive_reopening(store: MemoryStore, embedder: TextEmbedder) -> None:
    store.finish_step(0, _generated(4))
    ran = EpisodesResult(version="r000-sft", episode_ids=["a", "b"], success=0.5, by_family={"push": 0.5})
    store.finish_step(0, ran)
    store.finish_step(1, _generated(5))
    store.finish_step(0, _generated(6))
    assert store.finished_step(0, GenerateResult) == _generated(6)
    assert store.finished_step(1, TrainResult) is None
    store.close()
    with MemoryStore(store.path, embedder=embedder) as reopened:
        assert reopened.finished_steps() == [(0, "episodes"), (1, "generate"), (0, "generate")]
        assert reopened.finished_step(0, EpisodesResult) == ran


def test_a_step_result_is_read_back_as_written_and_a_bad_one_is_named(store: MemoryStore) -> None:
    """Typed step results: only results are stored; an unreadable stored one names its round, step and field."""
    with pytest.raises(ValueError, match="takes a step result"):
        store.finish_step(0, {"version": "r000-sft"})  # type: ignore[arg-type]
    store.finish_step(2, TrainResult(version="r002-bc", rl=RLResult(version="r002-rl", family="push", shaped=True)))
    assert store.finished_step(2, TrainResult).rl == RLResult(version="r002-rl", family="push", shaped=True)
    with store._write() as conn:  # a record written by newer code, and one with a field this code does not know
        conn.execute("UPDATE loop_steps SET outputs = ? WHERE round = 2",
                     (json.dumps({"version": "v", "schema": TrainResult.SCHEMA + 1}),))
    with pytest.raises(StepResultError, match=r"round 2 step 'train': written with schema 2, this code reads up to 1"):
        store.finished_step(2, TrainResult)
    with store._write() as conn:
        conn.execute("UPDATE loop_steps SET outputs = ? WHERE round = 2",
                     (json.dumps({"version": "v", "schema": 1, "rl": {"version": "x", "family": "push",
                                                                        "shaped": True, "epochs": 3}}),))
    with pytest.raises(StepResultError, match=r"round 2 step 'train'.rl: unknown field\(s\) \['epochs'\]"):
        store.finished_step(2, TrainResult)


def test_step_results_of_runs_before_typed_results_are_migrated(store: MemoryStore) -> None:
    """Schema 0 (no ``schema`` key): extra fields dropped, old layouts moved to the current one."""
    old = {
        ("programs", 0): {"failure_rate": {"push": 0.5}, "rl_family": "push", "generation_program_id": "gp-1",
                          "allocations": [["targeted", "push", ["lighting=dim"], 3]], "note": "dropped"},
        ("episodes", 1): {"version": "r000-sft", "episode_ids": ["e"], "success": 1.0, "by_family": {"push": 1.0},
                          "by_source": {"real": {"episodes": 1, "success": 1.0}}, "by_robot": {},
                          "arm_notes": {"panda": "ok"}, "unfinished_ids": []},
    }
    with store._write() as conn:
        for (step, r), body in old.items():
            conn.execute("INSERT INTO loop_steps VALUES (?, ?, ?, ?)", (r, step, json.dumps(body), 0.0))
    programs = store.finished_step(0, ProgramsResult)
    assert programs.allocations == [AllocationSummary(kind="targeted", family="push", conditions=["lighting=dim"],
                                                      count=3)]
    assert programs.generation_program_id == "gp-1" and programs.rejects == 0
    episodes = store.finished_step(1, EpisodesResult)
    assert episodes.real_arms is not None and episodes.real_arms.arm_notes == {"panda": "ok"}
    assert episodes.real_arms.by_source["real"]["episodes"] == 1 and episodes.remote == {}
    store.finish_step(1, episodes)  # written again: the current schema, read strictly
    assert store.finished_step(1, EpisodesResult) == episodes


# ---------------------------------------------------------------- retrieval
def test_similar_diagnoses_ranks_a_paraphrase_first(store: MemoryStore) -> None:
    texts = {
        "dx-grasp": "Missed the grasp: the gripper closed beside the red cube and never held it.",
        "dx-never": "Never approached: the arm did not move toward the blue ball on the left side of the table.",
        "dx-drop": "Dropped the target: the green cylinder slipped out of the gripper while it was being lifted.",
        "dx-slow": "Timed out: the arm pushed the yellow box very slowly and ran out of steps.",
    }
    for i, (diagnosis_id, text) in enumerate(texts.items()):
        store.put_diagnosis(i % 2, diagnosis(diagnosis_id, mode="dropped", text=text))
    store.put_diagnosis(1, diagnosis("dx-ok", mode="success", text="The green cylinder was lifted and held firmly."))
    ranked = store.similar_diagnoses("the green cylinder fell out of the hand during the lift", limit=3)
    assert ranked[0][0].record_id == "dx-drop"
    assert len(ranked) == 3 and all(-1.0 <= s <= 1.0 for _, s in ranked)
    assert ranked[0][1] > ranked[1][1] >= ranked[2][1]
    assert "dx-ok" not in {r.record_id for r, _ in store.similar_diagnoses("green cylinder lifted", limit=10)}
    everything = store.similar_diagnoses("green cylinder lifted and held", limit=10, failures_only=False)
    assert "dx-ok" in {r.record_id for r, _ in everything}
    records, result = store.query("similar_diagnoses", text="the arm pushed the yellow box too slowly", round_min=1)
    assert records[0].record_id == "dx-slow" and all(r.round >= 1 for r in records)
    assert result["scores"][0]["record_id"] == "dx-slow"


def _history(store: MemoryStore) -> None:
    """Round 0: left_far (red) always fails, right_near (blue) always fails; round 1: left_far passes."""
    for r, left_far_mode in ((0, "missed_grasp"), (1, "success")):
        for i in range(3):
            store.put_diagnosis(
                r,
                diagnosis(
                    f"d{r}-lf{i}", mode=left_far_mode, conditions={"position_region": "left_far", "target_color": "red"}
                ),
            )
        for i in range(2):
            store.put_diagnosis(
                r,
                diagnosis(
                    f"d{r}-rn{i}", mode="dropped", conditions={"position_region": "right_near", "target_color": "blue"}
                ),
            )
        store.put_diagnosis(
            r,
            diagnosis(
                f"d{r}-reach",
                family="reach",
                mode="timed_out" if r == 0 else "success",
                conditions={"position_region": "center_far"},
            ),
        )


def test_fixed_conditions_on_a_constructed_history(store: MemoryStore) -> None:
    _history(store)
    fixed = store.fixed_conditions()
    assert [(f["family"], f["key"], f["value"]) for f in fixed] == [
        ("pick_place", "position_region", "left_far"),
        ("pick_place", "target_color", "red"),
    ]
    assert fixed[0] == {
        "family": "pick_place",
        "key": "position_region",
        "value": "left_far",
        "failed_round": 0,
        "failure_rate_then": 1.0,
        "fixed_round": 1,
        "failure_rate_now": 0.0,
    }
    _, result = store.query("fixed_conditions")
    assert result["fixed_conditions"] == fixed


def test_generation_effect_follows_programs_scenes_and_later_success(store: MemoryStore) -> None:
    _history(store)
    allocation = {
        "kind": "targeted",
        "family": "pick_place",
        "count": 3,
        "reason": "left_far failures",
        "conditions": [{"key": "family", "value": "pick_place"}, {"key": "position_region", "value": "left_far"}],
        "cause_diagnosis_ids": ["d0-lf0", "d0-lf1", "d0-lf2"],
    }
    store.put_program(
        0,
        "generation_program",
        {"program_id": "gp-0", "round": 1, "budget": 3, "allocations": [allocation]},
        record_id="gp-0",
    )
    store.put_program(
        0, "training_program", {"program_id": "tp-0", "cause_diagnosis_ids": ["d0-lf0"]}, record_id="tp-0"
    )
    for i in range(3):
        scene = generate_seeded("pick_place", 100 + i, SceneParams(), scene_id=f"r001-pp-{i}", round_index=1)
        store.put_scene(1, scene.to_dict(), origin="generated", program_id="gp-0")
        if i < 2:
            store.put_episode(
                1, {"episode_id": f"ep-pp-{i}", "scene_id": scene.scene_id, "success": i == 0}, purpose="train"
            )
    effect = store.generation_effect("d0-lf0")
    assert [(p["kind"], p["program_id"]) for p in effect["programs"]] == [
        ("generation_program", "gp-0"),
        ("training_program", "tp-0"),
    ]
    assert effect["scenes"] == {"count": 3, "scene_ids": ["r001-pp-0", "r001-pp-1", "r001-pp-2"], "by_round": {"1": 3}}
    assert effect["episodes"] == {"count": 2, "successes": 1, "success_rate": 0.5}
    assert effect["conditions"] == [
        {
            "family": "pick_place",
            "key": "position_region",
            "value": "left_far",
            "before": {"round": 0, "success": 0.0, "diagnoses": 3},
            "after": {"round": 1, "success": 1.0, "diagnoses": 3},
        }
    ]
    assert effect["helped"] is True
    untreated = store.generation_effect("d0-rn0")
    assert untreated["programs"] == [] and untreated["scenes"]["count"] == 0
    assert untreated["helped"] is False, "right_near failed in both rounds"
    records, result = store.query("generation_effect", record_id="d0-lf0")
    assert [r.record_id for r in records] == ["d0-lf0", "gp-0", "tp-0"] and result == effect


# ---------------------------------------------------------------- queries
def test_every_bad_query_names_the_field_and_the_allowed_values(store: MemoryStore) -> None:
    store.put_progress(0, family="reach", split="id", success=0.5, episodes=2, policy_version="p0")
    bad = [
        (
            {"query": "nearest"},
            "query='nearest' is not a query kind; allowed: records, similar_diagnoses, "
            "fixed_conditions, generation_effect, progress",
        ),
        ({"query": "records", "kind": "robot"}, "kind='robot' is not a record kind; allowed: scene, episode"),
        ({"query": "records", "limit": 1001}, "limit=1001 must be in 1..1000 (0 means 100)"),
        ({"query": "records", "round_min": 5, "round_max": 2}, "round_min=5 > round_max=2"),
        ({"query": "progress", "round_max": -3}, "round_max=-3 must be >= 0, or -1 for no bound"),
        ({"query": "similar_diagnoses"}, "text is required for query 'similar_diagnoses'"),
        ({"query": "generation_effect"}, "record_id is required for query 'generation_effect'"),
        ({"query": "generation_effect", "record_id": "dx-none"}, "record_id='dx-none' is not a stored diagnosis"),
    ]
    for request, message in bad:
        with pytest.raises(MemoryQueryError) as info:
            store.query(**request)
        assert message in str(info.value), str(info.value)
        assert isinstance(info.value, ValueError)
    records, result = store.query("progress", round_min=0, round_max=0, limit=0)
    assert [r.record_id for r in records] == ["r000/reach/id/p0"] and result["progress"][0]["success"] == 0.5
    records, result = store.query("records", kind="progress")
    assert result == {"count": 1} and isinstance(records[0], MemoryRecord)


# ---------------------------------------------------------------- processes
READER = textwrap.dedent("""
    import json, sys, time
    from coda_loop.memory import MemoryStore
    store = MemoryStore(sys.argv[1])
    expected = int(sys.argv[2])
    counts, tail, last, blob_errors = [], [], 0, []
    print("ready", flush=True)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        counts.append(len(store.records("episode", limit=1000)))
        for record in store.records(after_sequence=last, limit=1000) if last else sorted(
                store.records(limit=1000), key=lambda r: r.sequence):
            tail.append(record.sequence)
            last = record.sequence
            try:
                store.load_keyframes(record)
            except Exception as exc:
                blob_errors.append(repr(exc))
        if last >= expected:
            break
        time.sleep(0.002)
    counts.append(len(store.records("episode", limit=1000)))
    print(json.dumps({"counts": counts, "tail": tail, "blob_errors": blob_errors}), flush=True)
""")


def test_a_reader_process_sees_every_write_in_order_while_this_one_writes(store: MemoryStore) -> None:
    n = 40
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(store.path), str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
        rng = np.random.default_rng(0)
        for i in range(n):
            frames = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(2)]
            store.put_episode(
                0, {"episode_id": f"ep-{i:03d}", "scene_id": "s", "success": bool(i % 2)}, frames, purpose="train"
            )
            time.sleep(0.02)
        out, err = reader.communicate(timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert reader.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["tail"] == list(range(1, n + 1)), "the tail skipped or reordered events"
    assert report["blob_errors"] == [], "a record was visible before its keyframes"
    counts = report["counts"]
    assert counts == sorted(counts) and counts[-1] == n
    assert len(set(counts)) > 3, f"the reader never saw the file while it was being written: {set(counts)}"


def test_potential_sources_reads_a_rounds_programs_by_family(store: MemoryStore) -> None:
    for family, program_id in (("reach", "pp-a"), ("push", "pp-b")):
        store.put_program(1, "potential_program", {"program_id": program_id, "source": f"stage {family}:"},
                          record_id=program_id)
    assert store.potential_sources({"push": "pp-b", "reach": "pp-a"}) == {"push": "stage push:",
                                                                          "reach": "stage reach:"}
    with pytest.raises(ValueError, match="no potential program 'pp-c' \\(family stack\\)"):
        store.potential_sources({"stack": "pp-c"})
