# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Typed step results: every step's result survives its JSON form, and what does not fit is named."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from coda_loop.rounds import ROUND0_STEPS, ROUND_STEPS
from coda_loop.step_results import (
    STEP_RESULTS,
    AllocationSummary,
    BCGate,
    CorrectiveStats,
    CriticFineTune,
    DiagnoseResult,
    EpisodesResult,
    EvaluateResult,
    GenerateResult,
    LearnedCriticRound,
    ProgramsResult,
    RealArmsRound,
    Recall,
    RLResult,
    Score,
    StepResult,
    StepResultError,
    TrainResult,
)

FULL: list[StepResult] = [
    GenerateResult(program_id="gp", scene_ids=["s1", "s2"], probe_ids=["p"], unmet=1, families={"push": 2},
                   replayed_scenes=1, generator="/generate_scenes"),
    EpisodesResult(version="r001-bc", episode_ids=["e1"], success=1.0, by_family={"push": 1.0}, remote={"sim_0": 1},
                   real_arms=RealArmsRound(by_source={"real": {"episodes": 1, "success": 1.0}},
                                           by_robot={"panda": {"episodes": 1}}, real_allocation={"/arm": 2},
                                           arm_notes={"panda": "late"}, unfinished_ids=["u"],
                                           intervention_ids=["i"])),
    DiagnoseResult(diagnosis_ids=["d1"], failures=1, modes={"missed_grasp": 1}, critic="grounded",
                   critic_version="grounded-abc", recalled=[Recall(diagnosis_id="d1", similar="d0", score=0.9,
                                                                   effect={"rounds": [1]})],
                   real_diagnosis_ids=["d1"],
                   learned=LearnedCriticRound(version="c0", agreement={"episodes": 1, "failure_mode": 1.0},
                                              episode_ids=["e1"], verdicts=[["missed_grasp", 1]], next_version="c1",
                                              next_folder="critics/c1",
                                              fine_tune=CriticFineTune(parent="c0", round=1, train_examples=4,
                                                                       held_out_examples=1,
                                                                       held_out_mode_accuracy_before=0.5,
                                                                       held_out_mode_accuracy_after=1.0, kept=True))),
    ProgramsResult(failure_rate={"push": 0.5}, rl_family="push", generation_program_id="gp",
                   training_program_id="tp", potentials={"push": "pp"}, rejects=1, rl_stage=2,
                   allocations=[AllocationSummary(kind="targeted", family="push", conditions=["mass=heavy"],
                                                  count=3)]),
    TrainResult(version="r001-rl", new_demos=5, seconds=3.5, bc_version="r001-bc", new_steps=400, demo_episodes=55,
                bc_val_loss=0.1, new_demo_steps=380, focus_share=0.5,
                corrective=CorrectiveStats(failed_scenes=2, recovered=1, by_mode={"missed_grasp:recovered": 1},
                                           takeover_steps=[40], relabel=1000),
                bc_gate=BCGate(before=0.5, after=0.6, kept=True, per_family_before={"push": 0.5}),
                rl=RLResult(version="r001-rl", family="push", shaped=True, start_stage=1, kept=True)),
    EvaluateResult(version="r001-rl", rates={"id": {"push": 1.0}}, per_split={"id": 1.0}, ood=0.25,
                   episodes_per_family={"id": 1}, outcomes={"id": {"s": 1}},
                   validation=Score(rates={}, per_split={"position": 0.5}, ood=0.5, episodes_per_family={}),
                   reused_from="runs/sft"),
]


def test_every_step_of_a_round_has_one_result_class() -> None:
    assert set(STEP_RESULTS) == set(ROUND_STEPS) == set(ROUND0_STEPS)
    assert sorted(type(r).STEP for r in FULL) == sorted(STEP_RESULTS)


@pytest.mark.parametrize("result", FULL, ids=lambda r: type(r).STEP)
def test_a_result_reads_back_from_its_json_as_written(result: StepResult) -> None:
    text = json.dumps(result.to_dict())
    data = json.loads(text)
    assert data["schema"] == type(result).SCHEMA
    assert type(result).read(data) == result
    # every field of every nested part is in the JSON: nothing is carried only in memory
    assert set(data) - {"schema"} == {f.name for f in dataclasses.fields(result)}


def test_nan_success_survives_and_a_minimal_result_takes_defaults() -> None:
    done = EvaluateResult.read({"version": "v", "rates": {}, "per_split": {}, "ood": float("nan"),
                                "episodes_per_family": {}, "schema": 1})
    assert math.isnan(done.ood) and done.validation is None and done.outcomes == {}
    assert TrainResult.read({"version": "r000-sft", "schema": 1}).rl is None


@pytest.mark.parametrize(("data", "message"), [
    ([], r"step 'train': expected an object, got list"),
    ({"schema": 1}, r"step 'train': required field 'version' is missing"),
    ({"version": "v", "schema": 1, "bogus": 1}, r"unknown field\(s\) \['bogus'\]"),
    ({"version": "v", "schema": -1}, r"schema must be a non-negative integer, got -1"),
    ({"version": "v", "schema": 9}, r"written with schema 9, this code reads up to 1"),
    ({"version": "v", "schema": 1, "bc_gate": {"before": 0.5, "kept": True}},
     r"step 'train'.bc_gate: required field 'after' is missing"),
    ({"version": "v", "schema": 1, "rl": [1]}, r"step 'train'.rl: expected an object, got list"),
])
def test_what_does_not_fit_is_refused_by_name(data: object, message: str) -> None:
    with pytest.raises(StepResultError, match=message):
        TrainResult.read(data)


def test_a_list_of_parts_is_checked_item_by_item() -> None:
    with pytest.raises(StepResultError, match=r"step 'diagnose'.recalled\[1\]: required field 'similar' is missing"):
        DiagnoseResult.read({"diagnosis_ids": [], "schema": 1,
                             "recalled": [{"diagnosis_id": "a", "similar": "b", "score": 1.0},
                                          {"diagnosis_id": "c", "score": 1.0}]})
    with pytest.raises(StepResultError, match=r"step 'programs'.allocations: expected a list, got dict"):
        ProgramsResult.read({"failure_rate": {}, "allocations": {}, "schema": 1})


def test_schema_0_is_read_leniently_and_moved_to_the_current_layout() -> None:
    """Records of runs before typed results: extra fields dropped, older layouts migrated."""
    train = TrainResult.read({"version": "r001-bc", "bc_gate": {"before": 0.1, "after": 0.2, "kept": True,
                                                                "old_field": 1}, "legacy": True})
    assert train.bc_gate == BCGate(before=0.1, after=0.2, kept=True)
    programs = ProgramsResult.read({"failure_rate": {}, "allocations": [["open", "reach", [], 4]]})
    assert programs.allocations == [AllocationSummary(kind="open", family="reach", conditions=[], count=4)]
    episodes = EpisodesResult.read({"version": "v", "episode_ids": [], "success": 0.0, "by_source": {},
                                    "by_robot": {}, "intervention_ids": ["i"]})
    assert episodes.real_arms == RealArmsRound(by_source={}, by_robot={}, intervention_ids=["i"])
    assert EpisodesResult.read({"version": "v", "episode_ids": [], "success": 0.0}).real_arms is None
