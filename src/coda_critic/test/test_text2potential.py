# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Text2potential: grammar translation of real diagnoses, compile gate and rejects, shaping invariance."""

import dataclasses

import pytest

from coda_critic.diagnosis import stage_names
from coda_critic.grounded import GroundedCritic
from coda_critic.shaping import check_shaping
from coda_critic.text2potential import (
    ProgramSpec,
    Reject,
    Text2Potential,
    compile_checked,
    default_program,
    parse,
)
from coda_engine.sim.layout import LAYOUT, scene_layout


@pytest.fixture(scope="module")
def diagnosed(episodes):
    eps = list(episodes.values())
    return list(zip(eps, GroundedCritic().diagnose(eps), strict=True))


def test_real_diagnoses_become_compiling_programs(diagnosed):
    translator = Text2Potential()
    modes = set()
    for ep, d in diagnosed:
        for layout in (None, scene_layout(ep.scene)):
            program = translator.translate(d, layout)
            assert isinstance(program, ProgramSpec), program
            compiled = program.compile()
            assert compiled.num_stages == len(program.stages) >= 1
            assert program.family == d.family and program.source_diagnosis_id == d.diagnosis_id
            assert program.parsed["mode"] == d.failure_mode
            default = default_program(d.family)
            if d.failure_mode == "success":
                assert program.source == default.source and program.translator == "default"
                continue
            modes.add(d.failure_mode)
            assert program.translator == "grammar" and program.source != default.source
            assert program.parsed["stage"] == d.failed_stage_name
            # Every stage of the library is kept, in order; the rewrite adds or reweights around the failed one.
            names = [s.name for s in program.stages]
            library = stage_names(d.family)
            assert [n for n in names if n in library] == library
    assert modes >= {"never_approached", "wrong_object", "missed_grasp", "dropped", "misplaced", "knocked_over",
                     "timed_out"}


def test_rewrites_follow_the_mode():
    t = Text2Potential()
    assert [s.name for s in t.rewrite("pick_place", "missed_grasp", 0)] == ["reach", "center", "grasp", "lift", "place"]
    assert [s.name for s in t.rewrite("pick_place", "dropped", 2)] == ["reach", "grasp", "secure", "lift", "place"]
    assert [s.name for s in t.rewrite("push", "misplaced", 1)] == ["approach", "align_goal", "push"]
    assert [s.name for s in t.rewrite("stack", "knocked_over", 0)] == ["reach_above", "reach", "grasp", "lift", "place"]
    assert [s.name for s in t.rewrite("reach", "timed_out", 1)] == ["align", "touch_half", "touch"]
    guarded = t.rewrite("reach", "wrong_object", 0, "blue_ball")[0]
    assert "dist(ee_pos, blue_ball_pos)" in guarded.progress
    generic = t.rewrite("reach", "wrong_object", 0)[0]
    assert "obj2_present" in generic.progress and "obj6_pos" in generic.progress
    with pytest.raises(ValueError, match="outside the push stage library"):
        t.rewrite("push", "timed_out", 5)


def test_grammar_reads_other_phrasings():
    p = parse("The robot stayed away from the red_cube for the whole episode.", "pick_place", ["red_cube"])
    assert (p.mode, p.stage, p.objects) == ("never_approached", 0, ("red_cube",))
    p = parse("Grasp failed: the fingers closed beside the ball.", "stack")
    assert (p.mode, p.stage) == ("missed_grasp", stage_names("stack").index("grasp"))
    p = parse("It picked up the blue_cube instead of the red_cube; stage 2 of 4 never finished.", "pick_place",
              ["red_cube", "blue_cube"])
    assert (p.mode, p.stage, p.objects) == ("wrong_object", 1, ("blue_cube", "red_cube"))
    p = parse("The cube slipped out while lifting, the lift stage did not complete", "pick_place")
    assert (p.mode, p.stage) == ("dropped", 2)


def test_wrong_object_program_names_the_object_from_the_text(diagnosed):
    ep, d = next((ep, d) for ep, d in diagnosed if d.failure_mode == "wrong_object")
    program = Text2Potential().translate(d, scene_layout(ep.scene))
    other = program.parsed["other_object"]
    assert other and other != d.target_object and other in [o.name for o in ep.scene.distractors]
    assert f"{other}_pos" in program.source
    # Against the generic layout the same text guards every distractor slot instead.
    generic = Text2Potential().translate(d)
    assert "obj2_present" in generic.source


def test_rejects_carry_the_reason(diagnosed):
    translator = Text2Potential()
    _, d = next((ep, d) for ep, d in diagnosed if d.failure_mode == "misplaced")
    unreadable = dataclasses.replace(d, text="Everything about this episode was unusual.")
    reject = translator.translate(unreadable)
    assert isinstance(reject, Reject) and "no failure mode recognised" in reject.message
    assert reject.diagnosis_id == d.diagnosis_id
    no_goal = {k: v for k, v in LAYOUT.items() if not k.startswith("goal_")}
    reject = translator.translate(d, no_goal)
    assert isinstance(reject, Reject) and "goal_pos" in reject.message and reject.line >= 1 and reject.column >= 1
    assert "stage align_goal" in reject.source
    bad = compile_checked("stage reach:\n  progress = dist(ee_pos, 3)\n  done = 1\n", "reach", translator="model",
                          diagnosis_id="d9")
    assert isinstance(bad, Reject) and bad.translator == "model" and bad.line == 2 and bad.message
    programs, rejects = translator.translate_all([d, unreadable])
    assert len(programs) == 1 and len(rejects) == 1


def test_program_fills_the_message(diagnosed):
    from coda_engine.ros.convert import dict_to_msg, msg_to_dict
    from coda_msgs.msg import PotentialProgram as PotentialProgramMsg

    _, d = next((ep, d) for ep, d in diagnosed if d.failure_mode == "dropped")
    program = Text2Potential().translate(d)
    msg = dict_to_msg(PotentialProgramMsg, program.to_dict())
    assert msg.translator == "grammar" and len(msg.stages) == len(program.stages)
    assert {e.name for e in msg.layout} == set(LAYOUT)
    back = ProgramSpec.from_dict(msg_to_dict(msg))
    assert back.source == program.source and back.layout == program.layout and back.program_id == program.program_id


def test_shaping_keeps_the_optimal_policy_for_programs_from_real_diagnoses(diagnosed):
    translator = Text2Potential()
    checked = 0
    for _, d in diagnosed:
        program = translator.translate(d)
        compiled = program.compile()
        result = check_shaping(compiled, gamma=0.95)
        assert result.same_policy, (d.failure_mode, d.family, result)
        assert result.max_q_gap < 1e-8
        assert result.stages_visited >= 3  # the grid task walks through the program's stages
        # Control: a bonus that is not a potential difference changes the optimal policy on the same MDP.
        control = check_shaping(compiled, gamma=0.95, potential_based=False)
        assert not control.same_policy and control.differing_states > 0
        checked += 1
    assert checked == len(diagnosed)


def test_training_plan_one_potential_per_failing_family(diagnosed):
    from coda_critic.text2potential import training_plan
    from coda_engine.ros.convert import dict_to_msg
    from coda_msgs.msg import TrainingProgram

    diagnoses = [d for _, d in diagnosed]
    plan = training_plan(diagnoses, round_index=4, rl_env_steps=1000)
    failing = {d.family for d in diagnoses if d.is_failure}
    assert sorted(p.family for p in plan.potentials) == sorted(failing)
    assert set(plan.cause_diagnosis_ids) <= {d.diagnosis_id for d in diagnoses if d.is_failure}
    assert all(p.source_diagnosis_id in plan.cause_diagnosis_ids for p in plan.potentials)
    assert plan.rejects == [] and "shaped by" in plan.text
    msg = dict_to_msg(TrainingProgram, plan.to_dict())
    assert msg.round == 4 and len(msg.potentials) == len(failing) and msg.rl_env_steps == 1000
    # An unreadable text is rejected and the next diagnosis of the same failure is used instead.
    drops = [d for d in diagnoses if d.failure_mode == "dropped" and d.family == "stack"]
    broken = dataclasses.replace(drops[0], diagnosis_id="broken", text="???")
    plan = training_plan([broken, *drops], round_index=5)
    assert [r.diagnosis_id for r in plan.rejects] == ["broken"]
    assert len(plan.potentials) == 1 and plan.potentials[0].source_diagnosis_id == drops[0].diagnosis_id


def test_a_source_that_is_not_utf8_text_is_a_reject_not_an_exception() -> None:
    """Found by fuzzing: lone surrogates in a comment compiled, then hashing the source for the id raised."""
    source = "stage touch:\n  progress = 1  # \udcff\udcff\n  done = dist(ee_pos, target_pos) < 0.03\n"
    result = compile_checked(source, "reach")
    assert isinstance(result, Reject)
    assert (result.line, result.column, result.message) == (2, 19, "invalid UTF-8 byte '\\xed' in a comment")
