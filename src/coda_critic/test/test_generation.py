# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Generation programs from real diagnoses: budget split, explainable allocations, replay, generator mapping."""

import re

import numpy as np
import pytest

from coda_critic.actors import make_actor
from coda_critic.diagnosis import FAILURE_MODES, Condition
from coda_critic.generation import (
    EDITS_FOR_MODE,
    GenerationConfig,
    GenerationPlanner,
    GenerationProgram,
    matches,
    replay_candidates,
    replayed_scene,
    scene_edits,
    scene_params,
    split_counts,
    trainable,
)
from coda_critic.grounded import GroundedCritic
from coda_engine.episodes import RecordingConfig, run_recorded_episode
from coda_engine.sim.generator import generate, generate_seeded
from coda_engine.sim.scene import SceneParams


def _run(arm, family, actor, seeds, params=None):
    eps = []
    for seed in seeds:
        scene = generate_seeded(family, seed, params or SceneParams())
        eps.append(run_recorded_episode(arm, scene, make_actor(actor, scene, np.random.default_rng(seed)),
                                        episode_id=f"g-{family}-{actor}-{seed}", policy_version=actor,
                                        robot_id="sim_test", config=RecordingConfig(keyframes=False)))
    return GroundedCritic().diagnose(eps)


@pytest.fixture(scope="module")
def batches(arm):
    """Round 1: pick_place drops (one distractor), push never approached, reach passes; round 2: all pass."""
    one = SceneParams(num_distractors=(1, 1))
    round1 = (_run(arm, "pick_place", "drop", range(100, 106), one) + _run(arm, "push", "wander", range(200, 203))
              + _run(arm, "reach", "expert", range(300, 304)))
    round2 = _run(arm, "pick_place", "expert", range(400, 404), one) + _run(arm, "reach", "expert", range(500, 502))
    return round1, round2


def test_split_counts_sum_and_proportion():
    assert split_counts(10, [3, 1]) == [8, 2]
    assert split_counts(7, [1, 1, 1]) == [3, 2, 2]
    assert sum(split_counts(13, [0.2, 0.5, 0.3])) == 13
    assert split_counts(0, [1, 2]) == [0, 0]


def test_targeted_allocations_name_their_causes(batches):
    round1, _ = batches
    failures = {d.diagnosis_id: d for d in round1 if d.is_failure}
    assert {d.failure_mode for d in failures.values()} == {"dropped", "never_approached"}
    program = GenerationPlanner().plan(round1, budget=50, round_index=2)
    assert sum(a.count for a in program.allocations) == 50 and program.budget == 50
    assert program.counts("exploration") == 10 and program.counts("replay") == 5
    targeted = [a for a in program.allocations if a.kind == "targeted"]
    cited = [i for a in targeted for i in a.cause_diagnosis_ids]
    assert sorted(cited) == sorted(failures)  # every failure causes exactly one allocation
    for a in targeted:
        assert a.family in ("pick_place", "push") and a.conditions[0] == Condition("family", a.family)
        for cause in a.cause_diagnosis_ids:
            d = failures[cause]
            assert d.family == a.family and all(d.condition(c.key) == c.value for c in a.conditions[1:])
        assert a.reason.startswith("targeted: ") and str(len(a.cause_diagnosis_ids)) in a.reason
    by_family = {f: sum(a.count for a in targeted if a.family == f) for f in ("pick_place", "push")}
    assert abs(by_family["pick_place"] - 2 * by_family["push"]) <= 1  # 6 failures vs 3, rounded
    # All six pick_place failures share "num_distractors=1" (100% failure rate): one targeted line.
    pick = [a for a in targeted if a.family == "pick_place"]
    assert len(pick) == 1 and Condition("num_distractors", "1") in pick[0].conditions
    # Nothing failed in reach: it gets exploration and replay (it passes), never targeted scenes.
    assert all(a.kind != "targeted" for a in program.allocations if a.family == "reach")
    replay = [a for a in program.allocations if a.kind == "replay"]
    assert replay and all(a.family == "reach" and "no fixed condition" in a.reason for a in replay)
    assert all(a.cause_diagnosis_ids == [] for a in program.allocations if a.kind == "exploration")


def test_fixed_conditions_are_replayed(batches):
    round1, round2 = batches
    program = GenerationPlanner().plan(round2, budget=40, round_index=3, history=round1)
    assert program.counts("targeted") == 0 and program.counts("replay") == 4
    replay = [a for a in program.allocations if a.kind == "replay"]
    fixed = [a for a in replay if a.family == "pick_place"]
    assert fixed, [a.reason for a in replay]
    old_failures = {d.diagnosis_id for d in round1 if d.is_failure and d.family == "pick_place"}
    for a in fixed:
        assert old_failures & set(a.cause_diagnosis_ids)
        assert re.search(r"failed (\d+) of \1 before and 0 of \d+ now; kept so it stays fixed", a.reason), a.reason
    assert any(Condition("num_distractors", "1") in a.conditions for a in fixed)


def test_program_fills_the_message(batches):
    from coda_engine.ros.convert import dict_to_msg, msg_to_dict
    from coda_msgs.msg import GenerationProgram as GenerationProgramMsg

    program = GenerationPlanner().plan(batches[0], budget=30, round_index=1)
    msg = dict_to_msg(GenerationProgramMsg, program.to_dict())
    assert msg.budget == 30 and sum(a.count for a in msg.allocations) == 30
    from coda_msgs.msg import BudgetAllocation

    kinds = {BudgetAllocation.KIND_TARGETED, BudgetAllocation.KIND_EXPLORATION, BudgetAllocation.KIND_REPLAY}
    assert {a.kind for a in msg.allocations} == kinds
    assert GenerationProgram.from_dict(msg_to_dict(msg)).to_dict() == program.to_dict()


def test_bad_settings_and_inputs_are_named(batches):
    with pytest.raises(ValueError, match="sum <= 1"):
        GenerationConfig(exploration_share=0.7, replay_share=0.5)
    with pytest.raises(ValueError, match="budget"):
        GenerationPlanner().plan(batches[0], budget=0, round_index=1)
    with pytest.raises(ValueError, match="not unique"):
        GenerationPlanner().plan(batches[0] + batches[0][:1], budget=10, round_index=1)
    with pytest.raises(ValueError, match="sum to"):
        GenerationProgram("p", 1, 5, 0.0, 0.0, [])


def test_only_training_conditions_are_targeted():
    assert trainable("target_color", "red") and not trainable("target_color", "purple")
    assert trainable("num_distractors", "2") and not trainable("num_distractors", "4")
    assert trainable("phrasing", "color_shape") and not trainable("phrasing", "relative")
    assert not trainable("target_size", "large") and not trainable("split", "id")


def test_allocations_map_to_generator_parameters(batches):
    program = GenerationPlanner().plan(batches[0], budget=50, round_index=2)
    line = next(a for a in program.allocations if a.family == "pick_place" and a.kind == "targeted")
    params = scene_params(line)
    assert params.num_distractors == (1, 1)
    rng = np.random.default_rng(0)
    scene = generate(line.family, rng, params)
    assert matches(scene, line.conditions)
    assert not matches(scene, [Condition("family", "push")])


def test_failed_scenes_are_replayed_by_priority(batches):
    """Scene replay: the latest attempt failed, fewest successes and the longest wait first; given up after 3."""
    round1, round2 = batches
    drops = [d for d in round1 if d.family == "pick_place"]  # six failed pick_place scenes
    passes = [d for d in round1 if d.family == "reach"]
    history = [(1, d) for d in round1]
    candidates = {c.scene_id: c for c in replay_candidates(history)}
    assert len(candidates) == len(round1)
    drop = candidates[drops[0].scene_id]
    assert (drop.attempts, drop.failures, drop.last_round, drop.last_failed) == (1, 1, 1, True)
    assert drop.failed_diagnosis_ids == (drops[0].diagnosis_id,)
    assert not candidates[passes[0].scene_id].last_failed
    planner = GenerationPlanner(GenerationConfig(scene_replay_share=0.25))
    program = planner.plan(round2, budget=16, round_index=3, replay=list(candidates.values()))
    replays = [a for a in program.allocations if replayed_scene(a)]
    assert len(replays) == 4 and all(a.kind == "replay" and a.count == 1 for a in replays)
    replayed = [replayed_scene(a) for a in replays]
    failed_in_round1 = {d.scene_id for d in round1 if d.is_failure}
    assert set(replayed) <= failed_in_round1  # only scenes whose latest attempt failed
    assert all(a.cause_diagnosis_ids == list(candidates[replayed_scene(a)].failed_diagnosis_ids) for a in replays)
    assert sum(a.count for a in program.allocations) == 16
    # priority: a scene that also succeeded once (1 of 2 failed) comes after the ones that always failed, and
    # one waiting since round 0 comes first
    mixed = replay_candidates([*history, (0, _as_success(drops[0]))])
    assert {c.scene_id: c for c in mixed}[drops[0].scene_id].attempts == 2
    picked = [replayed_scene(a) for a in planner.plan(round2, 16, 3, replay=mixed).allocations if replayed_scene(a)]
    assert drops[0].scene_id not in picked
    stale = replay_candidates([(k, d) for k, d in history if d.scene_id != drops[5].scene_id] + [(0, drops[5])])
    picked = [replayed_scene(a) for a in planner.plan(round2, 16, 3, replay=stale).allocations if replayed_scene(a)]
    assert picked[0] == drops[5].scene_id
    # ... a scene that passed at its latest attempt is not replayed, and three failures give up on it
    fixed = replay_candidates([*history, (2, _as_success(drops[0]))])
    assert drops[0].scene_id not in {replayed_scene(a) for a in planner.plan(round2, 16, 3, replay=fixed).allocations}
    thrice = replay_candidates([*history, (2, drops[0]), (3, drops[0])])
    assert drops[0].scene_id not in {replayed_scene(a) for a in planner.plan(round2, 16, 4, replay=thrice).allocations}
    # without candidates (a run without memory) nothing is replayed and the share goes to the targeted scenes
    plain = planner.plan(round2, budget=16, round_index=3)
    assert not any(replayed_scene(a) for a in plain.allocations)
    # the allocation picks out exactly its scene
    scene = generate("pick_place", np.random.default_rng(1), SceneParams())
    assert matches(scene, [Condition("family", "pick_place"), Condition("scene", scene.scene_id)])
    assert not matches(scene, [Condition("scene", "another")])


def test_edited_replays_ask_for_the_edits_of_the_latest_failure(batches):
    """GenerationConfig.edit_replays: each replayed scene comes with the edits its latest diagnosed mode asks for."""
    import dataclasses

    from coda_critic.diagnosis import pass_fail

    round1, round2 = batches
    drops = [d for d in round1 if d.family == "pick_place"]
    assert {d.failure_mode for d in drops} == {"dropped"}
    history = [(1, d) for d in round1] + [(2, dataclasses.replace(drops[1], diagnosis_id="later",
                                                                  failure_mode="missed_grasp"))]
    candidates = {c.scene_id: c for c in replay_candidates(history)}
    assert candidates[drops[0].scene_id].last_mode == "dropped"
    assert candidates[drops[1].scene_id].last_mode == "missed_grasp"  # the latest failure decides
    assert candidates[next(d for d in round1 if d.family == "reach").scene_id].last_mode == ""
    edits = GenerationPlanner(GenerationConfig(scene_replay_share=0.25, edit_replays=True))
    program = edits.plan(round2, budget=48, round_index=3, replay=list(candidates.values()))
    replays = [a for a in program.allocations if replayed_scene(a)]
    assert len(replays) == 9  # every scene whose latest attempt failed: six drops, three pushes never approached
    for a in replays:
        assert scene_edits(a) == EDITS_FOR_MODE[candidates[replayed_scene(a)].last_mode]
        assert a.reason.startswith("edit scene: ")
    assert {scene_edits(a) for a in replays} == {("target_yaw", "target_shift"), ("target_mass", "target_shift"),
                                                ("target_shift",)}
    # the same program without the option plays every scene exactly
    exact = GenerationPlanner(GenerationConfig(scene_replay_share=0.25)).plan(
        round2, budget=48, round_index=3, replay=list(candidates.values()))
    assert [replayed_scene(a) for a in exact.allocations if replayed_scene(a)] == [replayed_scene(a) for a in replays]
    assert not any(scene_edits(a) for a in exact.allocations)
    # pass/fail diagnoses name no cause: every edit they ask for is a move of the target
    reduced = replay_candidates([(1, pass_fail(d, max(d.failed_stage, 0))) for d in round1])
    blind = edits.plan(round2, budget=16, round_index=3, replay=reduced)
    assert {scene_edits(a) for a in blind.allocations if replayed_scene(a)} == {("target_shift",)}
    assert set(EDITS_FOR_MODE) == set(FAILURE_MODES)  # every failure mode has its edits


def _as_success(d):
    import dataclasses

    return dataclasses.replace(d, diagnosis_id=d.diagnosis_id + "-ok", failure_mode="success", failed_stage=-1,
                               failed_stage_name="", failure_step=-1)


def test_learning_potential_targets_conditions_solved_sometimes():
    from coda_critic.generation import Outcome

    def outcome(i: int, region: str, distractors: str, success: bool) -> Outcome:
        return Outcome(f"e{i}", f"s{i}", "pick_place", success,
                       (Condition("position_region", region), Condition("num_distractors", distractors)))

    # left_far is never solved; num_distractors=1 half the time; right_near three times in four
    outcomes = ([outcome(i, "left_far", "1", False) for i in range(4)]
                + [outcome(4 + i, "right_near", "1", i < 4) for i in range(4)]
                + [outcome(8 + i, "right_near", "2", i > 0) for i in range(4)])
    by_rate = GenerationPlanner(GenerationConfig(replay_share=0.0)).plan(outcomes, budget=20, round_index=1)
    by_potential = GenerationPlanner(GenerationConfig(replay_share=0.0, target_rule="learning_potential")).plan(
        outcomes, budget=20, round_index=1)

    def lines(program: GenerationProgram) -> dict[tuple[str, ...], list[str]]:
        return {tuple(f"{c.key}={c.value}" for c in a.conditions[1:]): a.cause_diagnosis_ids
                for a in program.allocations if a.kind == "targeted"}

    # failure rate: the four left_far failures go to left_far (failed 4 of 4)
    assert lines(by_rate)[("position_region=left_far",)] == ["e0", "e1", "e2", "e3"]
    # learning potential: the same failures go to num_distractors=1 (solved 4 of 8: s (1 - s) = .25, the highest);
    # left_far, never solved, is no target of its own
    got = lines(by_potential)
    assert ("position_region=left_far",) not in got
    assert got[("num_distractors=1",)] == ["e0", "e1", "e2", "e3"]
    assert got[()] == ["e8"] == lines(by_rate)[()]  # its groups have one failure each: below min_support
    assert sum(a.count for a in by_potential.allocations) == 20
    with pytest.raises(ValueError, match="target_rule='most_failed' must be one of"):
        GenerationConfig(target_rule="most_failed")


def test_recent_rounds_join_the_rates_the_targeting_reads():
    """With memory, the diagnoses of earlier rounds steady the rates; only the last round's failures are assigned."""
    from coda_critic.generation import Outcome

    def outcome(i: int, region: str, success: bool) -> Outcome:
        return Outcome(f"e{i}", f"s{i}", "push", success, (Condition("position_region", region),))

    last = [outcome(i, "left_far", False) for i in range(2)] + [outcome(2, "left_far", True)]
    earlier = [outcome(10 + i, "left_far", False) for i in range(5)]
    config = GenerationConfig(replay_share=0.0, target_rule="learning_potential", rate_rounds=2)
    alone = GenerationPlanner(config).plan(last, budget=10, round_index=3)
    pooled = GenerationPlanner(config).plan(last, budget=10, round_index=3, recent=earlier)
    line = {tuple(c.value for c in a.conditions[1:]): a for a in alone.allocations if a.kind == "targeted"}
    assert line[("left_far",)].cause_diagnosis_ids == ["e0", "e1"]  # solved 1 of 3 in the last round
    assert "failed 2 of 3" in line[("left_far",)].reason
    line = {tuple(c.value for c in a.conditions[1:]): a for a in pooled.allocations if a.kind == "targeted"}
    assert line[("left_far",)].cause_diagnosis_ids == ["e0", "e1"]  # the earlier failures cause nothing
    assert "failed 7 of 8" in line[("left_far",)].reason
    with pytest.raises(ValueError, match="rate_rounds=0"):
        GenerationConfig(rate_rounds=0)


def test_one_planner_gives_the_next_rounds_scenes_this_rounds_training_and_the_rl_stage(batches):
    """``plan_programs``: what the loop's programs step and the critic node both publish."""
    from coda_critic.programs import plan_programs
    from coda_critic.text2potential import training_plan

    round1, _ = batches
    planned = plan_programs(round1, 1, 12, GenerationConfig(), families=["pick_place", "push", "reach"])
    assert planned.generation.round == 2 and planned.generation.budget == 12
    assert planned.generation.program_id == GenerationPlanner(
        GenerationConfig(), families=["pick_place", "push", "reach"]).plan(round1, 12, 2).program_id
    assert planned.training.round == 1 and planned.training.program_id == training_plan(round1, 1).program_id
    # pick_place fails 6 times (drops: the transport stage), push 3 times: RL practises pick_place's stage.
    drops = [d.failed_stage for d in round1 if d.family == "pick_place" and d.is_failure]
    assert planned.rl_family == "pick_place" and planned.rl_stage == max(set(drops), key=drops.count)
    assert planned.cause_diagnosis_ids and set(planned.cause_diagnosis_ids) <= {d.diagnosis_id for d in round1}
    passing = [d for d in round1 if not d.is_failure]
    calm = plan_programs(passing, 0, 4, GenerationConfig())
    assert (calm.rl_family, calm.rl_stage, calm.training.potentials) == ("", 0, [])
    with pytest.raises(ValueError, match="round_index=-1"):
        plan_programs(round1, -1, 12, GenerationConfig())
