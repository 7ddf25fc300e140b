# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Held-out suites: shipped files, entry <-> scene, validation messages, feasibility, evaluation, ``coda eval``."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest
import torch
import yaml

from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import run_expert
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SPLITS, SceneParams
from coda_policy import eval_command
from coda_policy.checkpoint import save_checkpoint
from coda_policy.evaluation import evaluate_suites
from coda_policy.model import CodaPolicyNet
from coda_policy.suite import (
    FAMILY_ORDER,
    SUITES_DIR,
    Suite,
    SuiteError,
    default_suites,
    entry_from_scene,
    load_suite,
    save_suite,
    scene_from_entry,
)


@pytest.fixture(scope="module")
def shipped() -> dict[str, Suite]:
    return default_suites()


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, tiny_policy_config):
    with torch.random.fork_rng():
        torch.manual_seed(3)
        net = CodaPolicyNet(tiny_policy_config)
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-0001", net, "tiny-0001")


def _small_suite(shipped: dict[str, Suite], split: str, per_family: int) -> Suite:
    suite = shipped[split]
    return Suite(name=suite.name, split=split, entries=[suite.entries[i] for i in suite.select(per_family)])


def test_shipped_suites_hold_25_entries_per_family_with_seeds_disjoint_from_training(shipped):
    assert list(shipped) == list(SPLITS)
    ids = set()
    for split, suite in shipped.items():
        assert suite.split == split and suite.path == SUITES_DIR / f"{split}.yaml"
        assert suite.families == list(FAMILY_ORDER)
        assert [suite.count(f) for f in FAMILY_ORDER] == [25] * 4
        # Every training seed is drawn below 2**63; the suites use [2**63, 2**64).
        assert all(2**63 <= e["seed"] < 2**64 for e in suite.entries)
        ids |= {e["id"] for e in suite.entries}
        assert len(suite.select(10)) == 40 and suite.select(0) == list(range(100))
    assert len(ids) == 500
    assert "split:object" in shipped["object"].entries[0]["tags"]
    assert shipped["distractor"].scene(0).distractors and len(shipped["distractor"].scene(0).distractors) >= 3


def test_entry_scene_entry_round_trip_is_exact(shipped, tmp_path):
    for suite in shipped.values():
        for i in suite.select(2):
            scene = suite.scene(i)
            assert entry_from_scene(scene) == suite.entries[i]
            assert scene.split == suite.split and scene.scene_id == suite.entries[i]["id"]
            assert scene.to_dict() == suite.scene(i).to_dict()  # deterministic
    # scene -> entry -> scene keeps every object field of a generated scene (float32 fields included)
    generated = generate_seeded("stack", 2**63 + 12345, SceneParams(split="object"))
    rebuilt = scene_from_entry(entry_from_scene(generated), split="object")
    assert [o.to_dict() for o in rebuilt.objects] == [o.to_dict() for o in generated.objects]
    assert (rebuilt.instruction, rebuilt.target_object, rebuilt.goal_object) == (
        generated.instruction,
        generated.target_object,
        generated.goal_object,
    )
    # a whole file written and read back
    path = save_suite(shipped["position"], tmp_path / "copy.yaml", "a copy")
    again = load_suite(path)
    assert again.entries == shipped["position"].entries and again.provenance == shipped["position"].provenance


def test_hand_written_minimal_entry_gets_documented_defaults(tmp_path):
    entry = {
        "family": "push",
        "instruction": "push the red cube onto the marked area",
        "target": "red_cube",
        "goal": "area",
        "objects": [
            {
                "name": "red_cube",
                "shape": "box",
                "color": "red",
                "size": [0.025, 0.025, 0.025],
                "position": [0.45, 0.05],
                "yaw": 0.3,
            },
            {
                "name": "area",
                "shape": "region",
                "rgba": [0.2, 0.8, 0.2],
                "size": [0.06, 0.06, 0.001],
                "position": [0.6, 0.05],
            },
        ],
    }
    scene = scene_from_entry(entry, split="id", suite_name="mine", index=4)
    cube, area = scene.objects
    assert scene.scene_id == "mine-004" and scene.seed == 0 and scene.target is cube and scene.goal is area
    assert cube.position[2] == pytest.approx(0.025) and cube.mass == pytest.approx(0.15) and area.mass == 0.0
    assert cube.orientation[2] == pytest.approx(np.sin(0.15)) and cube.rgba[0] == pytest.approx(0.85)
    canonical = entry_from_scene(scene)
    assert entry_from_scene(scene_from_entry(canonical, split="id", suite_name="mine", index=4)) == canonical
    # the README's example is a valid suite, and the expert solves its scene
    text = (SUITES_DIR / "README.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    (tmp_path / "readme.yaml").write_text(example)
    suite = load_suite(tmp_path / "readme.yaml")
    assert run_expert(SimArm(), suite.scene(0)).success


def test_building_scenes_never_calls_the_generator(shipped, monkeypatch):
    import coda_engine.sim.generator as generator

    def forbidden(*args, **kwargs):
        raise AssertionError("the scene generator was called")

    monkeypatch.setattr(generator.Generator, "generate_seeded", forbidden)
    monkeypatch.setattr(generator.Generator, "draft", forbidden)
    monkeypatch.setattr(np.random, "default_rng", forbidden)
    for suite in shipped.values():
        assert len(suite.scenes(per_family=1)) == 4


def _write(tmp_path, data, name="bad.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        (lambda e: e.update(family="juggle"), "family", "not one of"),
        (lambda e: e["objects"][1].update(size=[0.02, 0.02]), "objects[1].size", "3 numbers"),
        (lambda e: e["objects"][0].update(size=[0.3, 0.02, 0.02]), "objects[0].size[0]", "outside"),
        (lambda e: e.update(target="purple_blob"), "target", "not one of the objects"),
        (lambda e: e["objects"][0].update(colour="red"), "objects[0].colour", "unknown field"),
        (lambda e: e["objects"][0].update(position=[1.5, 0.0]), "objects[0].position", "workspace"),
        (lambda e: e["objects"][0].update(shape="cone"), "objects[0].shape", "not one of"),
        (lambda e: e.update(goal=e["target"]), "goal", "differ"),
        (lambda e: e.pop("instruction"), "instruction", "missing"),
        (lambda e: e.update(seed=-1), "seed", "integer"),
        (lambda e: e["objects"][0].update(orientation=[0, 0, 0.5, 0.5]), "objects[0].orientation", "norm"),
        (lambda e: e["objects"][0].update(mass=0), "objects[0].mass", "outside"),
        (lambda e: e["objects"][2].update(position=e["objects"][0]["position"]), "objects[2].position", "intersects"),
    ],
)
def test_validation_errors_name_file_entry_and_field(shipped, tmp_path, mutate, field, words):
    data = copy.deepcopy(_small_suite(shipped, "id", 3).to_dict())
    stack = next(i for i, e in enumerate(data["entries"]) if e["family"] == "stack" and len(e["objects"]) >= 3)
    mutate(data["entries"][stack])
    path = _write(tmp_path, data)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    message = str(info.value)
    assert message.startswith(f"{path}: entry {stack} ("), message
    assert f": {field}: " in message and words in message, message


def test_header_and_file_errors(shipped, tmp_path):
    good = _small_suite(shipped, "id", 1).to_dict()
    cases = [
        ({**good, "format": 2}, "format"),
        ({**good, "split": "moon"}, "split"),
        ({**good, "entries": []}, "entries"),
        ({k: v for k, v in good.items() if k != "name"}, "name"),
        ({**good, "entries": [good["entries"][0], good["entries"][0]]}, "id"),
    ]
    for data, field in cases:
        path = _write(tmp_path, data)
        with pytest.raises(SuiteError, match=re.escape(str(path)) + f".*: {field}: "):
            load_suite(path)
    (tmp_path / "broken.yaml").write_text("format: 1\nentries: [\n")
    with pytest.raises(SuiteError, match="not valid YAML"):
        load_suite(tmp_path / "broken.yaml")
    with pytest.raises(SuiteError, match="no such suite file"):
        load_suite(tmp_path / "absent.yaml")


def test_expert_solves_the_shipped_id_entries(shipped):
    arm = SimArm()
    scenes = shipped["id"].scenes(per_family=3) + shipped["position"].scenes(per_family=1)
    wins = [run_expert(arm, scene).success for scene in scenes]
    assert np.mean(wins) >= 0.9, wins


def test_evaluate_suites_same_result_with_one_and_two_workers(shipped, tiny_checkpoint, embedder):
    suites = [_small_suite(shipped, "id", 1), _small_suite(shipped, "position", 1)]
    one = evaluate_suites(tiny_checkpoint, suites, embedder=embedder)
    two = evaluate_suites(tiny_checkpoint, suites, workers=2, embedder=embedder)
    assert len(one.episodes) == 8 and one.episodes == two.episodes
    assert one.rates == two.rates and one.per_split == two.per_split
    row = one.episodes[0]
    assert set(row) >= {"scene_id", "family", "split", "success", "stage_reached", "num_stages", "steps"}
    assert row["scene_id"] == "id-reach-000" and row["num_stages"] >= 1 and 0.0 <= row["progress"] <= 1.0
    assert set(one.rates) == {"id", "position"} and list(one.rates["id"]) == list(FAMILY_ORDER)
    for split, fam in one.rates.items():
        for family, rate in fam.items():
            mine = [r["success"] for r in one.episodes if r["split"] == split and r["family"] == family]
            assert rate == np.mean(mine)
        assert one.per_split[split] == pytest.approx(np.mean(list(fam.values())))
    assert json.loads(json.dumps(one.to_dict()))["episodes"] == one.episodes
    with pytest.raises(ValueError, match="same split"):
        evaluate_suites(tiny_checkpoint, [suites[0], suites[0]], embedder=embedder)


@pytest.fixture
def coda_eval(coda_subcommand):
    """``coda eval ARGS``."""
    return lambda argv: coda_subcommand(eval_command, argv)


def test_coda_eval_prints_json(shipped, tiny_checkpoint, tmp_path, capsys, embedder, coda_eval):
    path = save_suite(_small_suite(shipped, "instruction", 1), tmp_path / "mine.yaml")
    assert coda_eval(["--policy", str(tiny_checkpoint), "--suite", str(path), "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == str(tiny_checkpoint) and out["episodes"] == 4 and out["seconds"] > 0
    assert out["kind"] == "files"
    assert set(out["results"]) == {"instruction"}
    assert set(out["results"]["instruction"]) == {*FAMILY_ORDER, "mean"}
    outcomes = out["outcomes"]["instruction"]
    assert len(outcomes) == 4 and set(outcomes.values()) <= {0, 1}
    for family in FAMILY_ORDER:  # the per-scene outcomes are what the rates are computed from
        assert [v for k, v in outcomes.items() if f"-{family}-" in k] == [out["results"]["instruction"][family]]
    assert coda_eval(["--policy", str(tiny_checkpoint), "--validation", "--split", "object", "--per-family", "1",
                      "--json", "--no-progress"]) == 0
    validation = json.loads(capsys.readouterr().out)
    assert validation["suites"]["object"].endswith("validation/object.yaml") and validation["kind"] == "validation"
    assert len(validation["outcomes"]["object"]) == 4
    assert not set(validation["outcomes"]["object"]) & {e["id"] for e in _small_suite(shipped, "object", 1).entries}
    assert (
        coda_eval(["--policy", str(tiny_checkpoint), "--split", "object", "--per-family", "1", "--no-progress"]) == 0
    )
    table = capsys.readouterr().out
    assert "4 episodes" in table and re.search(r"^object +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$", table, re.M)


def test_coda_eval_bad_inputs_exit_2(shipped, tiny_checkpoint, tmp_path, capsys, coda_eval):
    (tmp_path / "empty").mkdir()
    broken = tmp_path / "broken-0001"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"format": 1, "policy": {"d_model": -1}}))
    (broken / "model.safetensors").write_bytes(b"not weights")
    data = copy.deepcopy(_small_suite(shipped, "id", 2).to_dict())
    data["entries"][5]["objects"][0]["size"] = "big"
    bad_suite = _write(tmp_path, data)
    cases = [
        (["--policy", str(tmp_path / "absent")], "no such folder"),
        (["--policy", str(tmp_path / "empty")], "needs config.json"),
        (["--policy", str(tiny_checkpoint.parent)], "pass one of them"),
        (["--policy", str(broken)], "cannot be loaded"),
        (["--policy", str(tiny_checkpoint), "--suite", str(bad_suite)], "entry 5 ("),
        (["--policy", str(tiny_checkpoint), "--suite", str(tmp_path / "nope.yaml")], "no such suite file"),
        (["--policy", str(tiny_checkpoint), "--split", "moon"], "--split 'moon'"),
        (["--policy", str(tiny_checkpoint), "--per-family", "-1"], "--per-family"),
        (["--policy", str(tiny_checkpoint), "--workers", "0"], "--workers"),
        (["--policy", str(tiny_checkpoint), "--validation", "--suite", str(bad_suite)], "--validation"),
    ]
    for argv, words in cases:
        assert coda_eval([*argv, "--json", "--no-progress"]) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "" and words in captured.err, (argv, captured.err)
