# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""VLM critic: schema checks on strings, and a tiny random LLaVA (conftest) saved and loaded by the real code.

The random model's free answers are garbage, so every episode is asked twice and then diagnosed by
a learned critic (trained here on grounded labels, saved and reloaded). With constrained decoding the
same random model fills the JSON slots and every answer validates.
"""

import dataclasses
import json

import pytest
import torch

from coda_critic.dataset import FeatureConfig, episode_features, label
from coda_critic.diagnosis import MODES, CriticInputError, stage_names
from coda_critic.grounded import GroundedCritic
from coda_critic.learned import LearnedConfig, embed_instructions, load_critic, save_model, train
from coda_critic.text2potential import ProgramSpec, Text2Potential
from coda_critic.vlm import VlmConfig, VlmCritic, load_vlm
from coda_critic.vlm_answer import SchemaError, build_prompt, extract_json, parse_answer, validate_answer
from coda_engine.text_embedding import TextEmbedder

OBJECTS = ["red_ball", "green_bin", "blue_cylinder"]
VALID = {"failure_mode": "missed_grasp", "stage": "grasp", "target": "red_ball",
         "conditions": {"position_region": "left_far", "num_distractors": 1},
         "explanation": "The fingers closed beside the ball.", "confidence": 0.7}
PICKS = [("pick_place", "expert"), ("pick_place", "offset_grasp"), ("reach", "wrong_object")]


@pytest.fixture(scope="module")
def picked(episodes):
    return [episodes[key] for key in PICKS]


@pytest.fixture(scope="module")
def learned_folder(tmp_path_factory, episodes):
    """Save a small learned critic trained on the grounded labels of the shared episodes, saved to a folder."""
    eps = list(episodes.values())
    features = FeatureConfig(num_frames=2, frame_size=16, proprio_points=4)
    examples = label(episode_features(eps, features), GroundedCritic().diagnose(eps), [e.scene.split for e in eps])
    text = embed_instructions(examples.instructions, TextEmbedder())
    model, _ = train(examples, text, LearnedConfig(features=features, frame_dim=8, hidden=16, epochs=3, seed=1))
    return save_model(model, tmp_path_factory.mktemp("learned"))


def test_extract_json():
    assert extract_json('Sure:\n```json\n{"a": 1, "b": {"c": 2}}\n```') == {"a": 1, "b": {"c": 2}}
    assert extract_json('[1, 2] {"a": [1, {"b": 2}]} {"c": 3}') == {"a": [1, {"b": 2}]}
    assert extract_json('{broken {"a": 1}') == {"a": 1}
    with pytest.raises(SchemaError, match="no JSON object"):
        extract_json("I think the grasp failed.")
    with pytest.raises(SchemaError, match="no complete JSON object"):
        extract_json('{"failure_mode": "dropped", "stage": "li')


def test_validate_answer():
    answer = validate_answer(VALID, "pick_place", OBJECTS)
    assert (answer.failure_mode, answer.failed_stage, answer.stage_name) == ("missed_grasp", 1, "grasp")
    assert answer.conditions == {"position_region": "left_far", "num_distractors": "1"} and answer.confidence == 0.7
    assert parse_answer("answer: " + json.dumps({**VALID, "stage": "GRASP", "extra": 1}), "pick_place",
                        OBJECTS).failed_stage == 1
    success = validate_answer({**VALID, "failure_mode": "success", "stage": None}, "pick_place", OBJECTS)
    assert (success.failed_stage, success.stage_name) == (-1, "")
    cases = [
        ({k: v for k, v in VALID.items() if k not in ("target", "confidence")}, r"missing fields \['target', "
                                                                                  r"'confidence'\] \(partial"),
        ({**VALID, "failure_mode": "fell_asleep"}, "failure_mode='fell_asleep' is not one of"),
        ({**VALID, "stage": "place_twice"}, "not a stage of pick_place"),
        ({**VALID, "stage": "none"}, "a failure .missed_grasp. names the stage"),
        ({**VALID, "failure_mode": "success"}, "a success has stage 'none'"),
        ({**VALID, "stage": 2}, "must be a stage name"),
        ({**VALID, "target": "purple_cow"}, "target='purple_cow' is not one of the scene's objects"),
        ({**VALID, "conditions": ["left_far"]}, "conditions must be an object"),
        ({**VALID, "conditions": {"weather": "rain"}}, "condition key 'weather'"),
        ({**VALID, "conditions": {"split": True}}, "condition split=True"),
        ({**VALID, "explanation": "  "}, "explanation='  ' must be a non-empty string"),
        ({**VALID, "confidence": 1.5}, r"confidence=1.5 must be a number in \[0, 1\]"),
        ({**VALID, "confidence": "0.5"}, "confidence='0.5'"),
        ({**VALID, "confidence": True}, "confidence=True"),
        ([VALID], "not a JSON object"),
    ]
    for data, message in cases:
        with pytest.raises(SchemaError, match=message):
            validate_answer(data, "pick_place", OBJECTS)
    # All problems at once, in one message.
    with pytest.raises(SchemaError, match=r"failure_mode.*target.*confidence"):
        validate_answer({**VALID, "failure_mode": "x", "target": "y", "confidence": -1}, "pick_place", OBJECTS)
    reach = validate_answer({**VALID, "stage": "touch", "target": "white_cube"}, "reach", ["white_cube"])
    assert reach.failed_stage == 1


def test_config_and_loading_errors(tmp_path, tiny_vlm, tiny_lm, picked):
    with pytest.raises(ValueError, match="decoding='beam'"):
        VlmConfig(decoding="beam")
    with pytest.raises(ValueError, match="prompt_template"):
        VlmConfig(prompt_template="{prompt}")
    with pytest.raises(ValueError, match="fallback"):
        VlmCritic(VlmConfig(model_path=str(tiny_vlm)))
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        load_vlm(VlmConfig(model_path=str(tmp_path / "nothing")))
    # A text-only checkpoint is refused with the reason.
    with pytest.raises(ValueError, match="cannot load a vision-language checkpoint"):
        load_vlm(VlmConfig(model_path=str(tiny_lm)))
    prompt = build_prompt(picked[1], 3, feedback="stage='x' is not a stage")
    assert "place the" in prompt and "reach, grasp, lift, place" in prompt and "offset" not in prompt
    assert prompt.endswith("Your previous answer was rejected: stage='x' is not a stage. Reply with the JSON object "
                           "only.")


def test_random_model_is_retried_then_falls_back(tiny_vlm, learned_folder, picked):
    config = VlmConfig(model_path=str(tiny_vlm), fallback_path=str(learned_folder), max_new_tokens=32, max_images=3,
                       threads=1)
    critic = VlmCritic(config)
    vlm = critic.vlm
    assert vlm.tokens_per_image == 4 and vlm.version.startswith("vlm-") and critic.fallback.name == "learned"
    # The prompt carries exactly the placeholders the vision tower fills (the forward checks it as well).
    frames = picked[0].keyframes[:3]
    inputs = critic.inputs(picked[0], frames)
    image_id = vlm.tokenizer.convert_tokens_to_ids(vlm.image_token)
    assert int((inputs["input_ids"] == image_id).sum()) == 3 * 4
    assert inputs["pixel_values"].shape == (3, 3, 16, 16) and inputs["pixel_values"].dtype == torch.float32

    diagnoses = critic.diagnose(picked)
    direct = load_critic(learned_folder).diagnose(picked)
    assert len(critic.attempts) == 2 * len(picked) and critic.fallback_rate == 1.0
    assert all(a.error for a in critic.attempts) and [a.attempt for a in critic.attempts[:2]] == [1, 2]
    for d, ref, ep in zip(diagnoses, direct, picked, strict=True):
        assert d.episode_ids == [ep.episode_id] and d.critic_backend == "learned"
        assert (d.failure_mode, d.failed_stage, d.diagnosis_id) == (ref.failure_mode, ref.failed_stage,
                                                                     ref.diagnosis_id)
        assert d.text.startswith(ref.text) and f"[VLM fallback: the vlm critic {critic.version} gave no valid " \
                                                 "diagnosis in 2 answers (answer 1: " in d.text
        mine = [a for a in critic.attempts if a.episode_id == ep.episode_id]
        assert mine[1].error[:40] in d.text
        if d.is_failure:  # the appended reason does not change what Text2potential reads
            program = Text2Potential().translate(d)
            assert isinstance(program, ProgramSpec) and program.parsed["mode"] == d.failure_mode
    with pytest.raises(CriticInputError, match="empty keyframes"):
        critic.diagnose([dataclasses.replace(picked[0], keyframes=[], keyframe_steps=[])])


def test_constrained_decoding_validates(tiny_vlm, learned_folder, picked):
    config = VlmConfig(model_path=str(tiny_vlm), fallback_path=str(learned_folder), decoding="constrained",
                       explanation_tokens=12, threads=1)
    critic = VlmCritic(config)
    diagnoses = critic.diagnose(picked)
    assert critic.fallback_rate == 0.0 and len(critic.attempts) == len(picked)
    for d, ep, attempt in zip(diagnoses, picked, critic.attempts, strict=True):
        objects = [o.name for o in ep.scene.objects]
        answer = parse_answer(attempt.output, ep.scene.family, objects)  # what the model filled in, re-read
        assert attempt.error == "" and d.critic_backend == "vlm" and d.critic_version == critic.version
        assert d.failure_mode == answer.failure_mode in MODES and d.target_object == answer.target in objects
        assert d.failed_stage == answer.failed_stage and d.failed_stage < len(stage_names(ep.scene.family))
        assert 0 < d.confidence <= 1 and d.confidence == answer.confidence
        assert len(answer.explanation) >= 4 and f'The vlm critic says: "{answer.explanation}"' in d.text
        key, value = next(iter(answer.conditions.items()))
        assert d.condition(key) == value  # the condition value is the scene's fact, the model picks the key
        program = Text2Potential().translate(d)
        assert isinstance(program, ProgramSpec)
        if d.is_failure:
            assert program.parsed["mode"] == d.failure_mode and program.parsed["stage"] == d.failed_stage_name
    # Greedy decoding is deterministic.
    assert [d.to_dict() for d in critic.diagnose(picked)] == [d.to_dict() for d in diagnoses]
