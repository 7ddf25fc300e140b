# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Model-backed Text2potential: program extraction, the compile gate, and a tiny random causal LM.

The random model (conftest: built, saved, loaded through the real loading code) writes text that does not
compile: each attempt is rejected with the compiler's error and the grammar translator's program is
used instead.
"""

import pytest

from coda_critic.diagnosis import MODE_SUCCESS
from coda_critic.grounded import GroundedCritic
from coda_critic.model_translator import (
    ModelTranslator,
    ModelTranslatorConfig,
    build_program_prompt,
    extract_program,
    load_causal_lm,
    observation_names,
)
from coda_critic.text2potential import ProgramSpec, Reject, Text2Potential, compile_checked, training_plan
from coda_engine.sim.families import get_family
from coda_engine.sim.layout import LAYOUT


@pytest.fixture(scope="module")
def diagnoses(episodes):
    return GroundedCritic().diagnose(list(episodes.values()))


def test_extract_program_and_prompt(diagnoses):
    program = get_family("pick_place").program
    answer = f"Here is the program:\n```\n{program}```\nDiagnosis: done"
    assert extract_program(answer) == program.strip() + "\n"
    assert extract_program("no program here ") == "no program here\n" and extract_program("  ") == ""
    # What the model writes goes through the same gate as the grammar's programs.
    accepted = compile_checked(extract_program(answer), "pick_place", translator="model", diagnosis_id="dx-1")
    assert isinstance(accepted, ProgramSpec) and accepted.translator == "model" and len(accepted.stages) == 4
    rejected = compile_checked(extract_program("stage reach:\n  progress = dist(ee_pos)\n"), "pick_place",
                               translator="model")
    assert isinstance(rejected, Reject) and (rejected.line, rejected.translator) == (2, "model") and rejected.message
    names = observation_names(LAYOUT)
    assert names.startswith("ee_pos, ee_vel, gripper")
    assert "obj0..obj6 with _pos, _present, _rgb, _shape, _size" in names
    failure = next(d for d in diagnoses if d.is_failure)
    prompt = build_program_prompt(failure, LAYOUT)
    assert failure.text in prompt and get_family(failure.family).program in prompt and prompt.endswith("Program:\n")


def test_config_and_loading_errors(tmp_path):
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        ModelTranslatorConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="threads=-1"):
        ModelTranslatorConfig(threads=-1)
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        load_causal_lm(ModelTranslatorConfig(model_path=str(tmp_path)))


def test_random_model_is_rejected_and_grammar_takes_over(tiny_lm, diagnoses):
    translator = ModelTranslator(ModelTranslatorConfig(model_path=str(tiny_lm), max_new_tokens=48, threads=1))
    failures = [d for d in diagnoses if d.is_failure]
    assert failures and any(d.failure_mode == MODE_SUCCESS for d in diagnoses)
    programs, rejects = translator.translate_all(diagnoses)
    grammar = Text2Potential()
    assert len(programs) == len(diagnoses) and len(rejects) == len(failures) == len(translator.rejects)
    assert translator.counts == {"asked": len(failures), "compiled": 0} and translator.compile_rate == 0.0
    for reject, d, output in zip(rejects, failures, translator.outputs, strict=True):
        # The recorded error is the compiler's, for the text extracted from the model's answer.
        assert reject.translator == "model" and reject.diagnosis_id == d.diagnosis_id and reject.message
        assert reject.source == extract_program(output)
        again = compile_checked(reject.source, d.family, translator="model")
        assert isinstance(again, Reject) and (again.line, again.column, again.message) == (
            reject.line, reject.column, reject.message)
    for d, program in zip(diagnoses, programs, strict=True):
        program.compile()  # every emitted program compiles
        reference = grammar.translate(d)
        assert isinstance(reference, ProgramSpec) and program.source == reference.source
        if d.is_failure:
            reject = next(r for r in rejects if r.diagnosis_id == d.diagnosis_id)
            assert program.translator == "grammar" and program.parsed["mode"] == d.failure_mode
            assert program.parsed["model_reject"] == f"line {reject.line}, column {reject.column}: {reject.message}"
        else:
            assert program.translator == "default"
    # It plugs into a round's training plan like the grammar translator.
    plan = training_plan(diagnoses, 3, translator=translator)
    assert plan.potentials and all(isinstance(p, ProgramSpec) for p in plan.potentials)
    assert {p.family for p in plan.potentials} == {d.family for d in failures}
