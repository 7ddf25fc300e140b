# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Diagnosis data type and the grounded critic on real simulated episodes."""

import dataclasses

import numpy as np
import pytest

from coda_critic.diagnosis import (
    CONDITION_KEYS,
    MODES,
    Condition,
    CriticInputError,
    Diagnosis,
    check_episodes,
    pass_fail,
    position_region,
    stage_names,
)
from coda_critic.grounded import GroundedConfig, GroundedCritic

EXPECTED = {
    ("pick_place", "expert"): ("success", None),
    ("reach", "wander"): ("never_approached", "align"),
    ("reach", "wrong_object"): ("wrong_object", "align"),
    ("pick_place", "offset_grasp"): ("missed_grasp", None),
    ("pick_place", "drop"): ("dropped", None),
    ("pick_place", "wrong_place"): ("misplaced", "place"),
    ("stack", "sweep"): ("knocked_over", "reach"),
    ("stack", "slow"): ("timed_out", None),
    ("stack", "drop"): ("dropped", None),
    ("push", "wander"): ("never_approached", "approach"),
}


def _diagnosis(**overrides):
    fields = dict(diagnosis_id="d1", episode_ids=["e1"], scene_id="s1", family="stack", failure_mode="dropped",
                  failed_stage=2, failed_stage_name="lift", target_object="red_cube",
                  conditions=[Condition("position_region", "left_far")], text="Dropped the target", confidence=0.5,
                  critic_backend="learned", critic_version="v3", stamp_sec=7, stamp_nanosec=9, failure_step=12)
    fields.update(overrides)
    return Diagnosis(**fields)


def test_diagnosis_round_trips_through_dict_and_message():
    d = _diagnosis()
    assert Diagnosis.from_dict(d.to_dict()) == d
    from coda_engine.ros.convert import dict_to_msg, msg_to_dict
    from coda_msgs.msg import Diagnosis as DiagnosisMsg

    msg = dict_to_msg(DiagnosisMsg, d.to_dict())
    assert msg.failure_mode == DiagnosisMsg.MODE_DROPPED and msg.conditions[0].value == "left_far"
    assert Diagnosis.from_dict(msg_to_dict(msg)) == d
    # The vocabulary is the message's.
    assert set(MODES) == {getattr(DiagnosisMsg, n) for n in dir(DiagnosisMsg) if n.startswith("MODE_")}


@pytest.mark.parametrize(("overrides", "field"), [
    ({"failure_mode": "exploded"}, "failure_mode"),
    ({"episode_ids": []}, "episode_ids"),
    ({"confidence": 1.5}, "confidence"),
    ({"failure_mode": "success"}, "failed_stage"),
    ({"conditions": [Condition("weather", "rain")]}, "condition keys"),
    ({"critic_backend": "oracle"}, "critic_backend"),
    ({"failure_step": -2}, "failure_step"),
    ({"failure_mode": "success", "failed_stage": -1, "failure_step": 3}, "failure_step"),
])
def test_diagnosis_rejects_bad_fields(overrides, field):
    with pytest.raises(ValueError, match=field):
        _diagnosis(**overrides)


def test_grounded_labels_real_episodes(episodes):
    critic = GroundedCritic()
    keys = list(EXPECTED)
    diagnoses = critic.diagnose([episodes[k] for k in keys])
    for key, d in zip(keys, diagnoses, strict=True):
        mode, stage = EXPECTED[key]
        ep = episodes[key]
        assert d.failure_mode == mode, (key, d.text)
        assert d.episode_ids == [ep.episode_id] and d.scene_id == ep.scene.scene_id and d.family == key[0]
        assert d.critic_backend == "grounded" and d.confidence == 1.0 and d.critic_version == ""
        assert [c.key for c in d.conditions] == list(CONDITION_KEYS)
        assert d.target_object == ep.scene.target_object and ep.scene.target_object in d.text
        if mode == "success":
            assert d.failed_stage == -1 and d.failed_stage_name == ""
            continue
        names = stage_names(key[0])
        assert d.failed_stage_name == names[d.failed_stage]
        assert f"The {d.failed_stage_name} stage (stage {d.failed_stage + 1} of {len(names)})" in d.text
        # The failed stage is the first stage the episode did not complete.
        assert d.failed_stage == min(ep.samples[-1]["stage"], len(names) - 1)
        if stage is not None:
            assert d.failed_stage_name == stage, (key, d.text)
    # Dropped in the air, before the place stage completed; misplaced after carrying.
    by_key = dict(zip(keys, diagnoses, strict=True))
    # The failure step is when the failure began, on the episode's own trace.
    for key, d in by_key.items():
        steps = [s["step"] for s in episodes[key].samples]
        assert d.failure_step == -1 if d.failure_mode == "success" else d.failure_step in steps, (key, d.failure_step)
    for key in (("pick_place", "drop"), ("stack", "drop"), ("pick_place", "wrong_place")):
        # the last sample the target was held: in the hand, close to the tool, before it was let go
        ep, d = episodes[key], by_key[key]
        at = next(s for s in ep.samples if s["step"] == d.failure_step)
        target = next(o for o in at["objects"] if o["name"] == ep.scene.target_object)
        tool = np.array([at["ee_position"][k] for k in "xyz"])
        assert np.linalg.norm(tool - [target["pose"]["position"][k] for k in "xyz"]) < 0.05, key
        assert 0 < d.failure_step < ep.steps
    knocked = by_key[("stack", "sweep")]
    ep = episodes[("stack", "sweep")]
    before = [s for s in ep.samples if s["step"] < knocked.failure_step]
    assert before and knocked.failure_step < ep.steps  # objects still in place before the sweep reached them
    first = {o["name"]: o["pose"]["position"] for o in ep.samples[0]["objects"]}
    for s in before:
        for o in s["objects"]:
            assert abs(o["pose"]["position"]["x"] - first[o["name"]]["x"]) < 0.011
    assert by_key[("pick_place", "drop")].failed_stage >= 1
    assert "lost it in the air" in by_key[("pick_place", "drop")].text
    assert "wrong object" in by_key[("reach", "wrong_object")].text.lower()


def test_pass_fail_keeps_only_the_success_flag_and_the_episodes_own_stage(episodes):
    """The coda_pass_fail ablation: mode, onset and text go; the scene's conditions and the recorded stage stay."""
    keys = [("pick_place", "expert"), ("pick_place", "drop"), ("stack", "sweep"), ("reach", "wander")]
    for key in keys:
        ep = episodes[key]
        full = GroundedCritic().diagnose([ep])[0]
        ended = min(ep.stage_reached, ep.num_stages - 1)
        reduced = pass_fail(full, ended)
        assert (reduced.diagnosis_id, reduced.episode_ids, reduced.scene_id, reduced.family, reduced.conditions) == \
            (full.diagnosis_id, full.episode_ids, full.scene_id, full.family, full.conditions)
        assert reduced.is_failure == full.is_failure and reduced.failure_step == -1
        if not full.is_failure:
            assert reduced.failure_mode == "success" and reduced.text == "the task succeeded"
            continue
        assert full.failure_mode != "timed_out" and full.failure_step >= 0  # the critic found more than that
        assert reduced.failure_mode == "timed_out" and reduced.text == f"the {key[0]} task was not completed"
        assert (reduced.failed_stage, reduced.failed_stage_name) == (ended, stage_names(key[0])[ended])
        assert reduced.failed_stage == full.failed_stage  # the grounded critic's stage is the recorded one
        assert Diagnosis.from_dict(reduced.to_dict()) == reduced
    with pytest.raises(ValueError, match="ended_stage=9 is not a stage of 'stack'"):
        pass_fail(GroundedCritic().diagnose([episodes[("stack", "sweep")]])[0], 9)


def test_thresholds_change_labels(episodes):
    # A looser approach margin turns "never approached" into an approach (the definitions are the thresholds).
    ep = episodes[("reach", "wander")]
    assert GroundedCritic().diagnose([ep])[0].failure_mode == "never_approached"
    loose = GroundedCritic(GroundedConfig(approach_margin=1.0))
    assert loose.diagnose([ep])[0].failure_mode != "never_approached"
    with pytest.raises(ValueError, match="approach_margin"):
        GroundedConfig(approach_margin=0.0)


def test_position_regions():
    assert position_region(0.6, 0.15) == "left_far"
    assert position_region(0.4, -0.1) == "right_near"
    assert position_region(0.45, 0.0) == "center_near"


def test_bad_input_names_the_problem(episodes):
    ep = episodes[("reach", "wander")]
    critic = GroundedCritic()
    with pytest.raises(CriticInputError, match="duplicate episode_id"):
        critic.diagnose([ep, ep])
    no_frames = dataclasses.replace(ep, keyframes=[], keyframe_steps=[])
    with pytest.raises(CriticInputError, match="empty keyframes"):
        check_episodes([no_frames], need_keyframes=True)
    mismatched = dataclasses.replace(ep, keyframe_steps=ep.keyframe_steps[:-1])
    with pytest.raises(CriticInputError, match="mismatched"):
        critic.diagnose([mismatched])
    gray = dataclasses.replace(ep, keyframes=[np.zeros((32, 32), np.uint8)] * len(ep.keyframes))
    with pytest.raises(CriticInputError, match="HxWx3 uint8"):
        check_episodes([gray], need_keyframes=True)
    real_arm = dataclasses.replace(ep, samples=[{**s, "objects": []} for s in ep.samples])
    with pytest.raises(CriticInputError, match="no privileged object states"):
        critic.diagnose([real_arm])
    other = episodes[("stack", "sweep")]
    wrong_scene = dataclasses.replace(ep, samples=other.samples)
    with pytest.raises(CriticInputError, match="do not match the objects"):
        critic.diagnose([wrong_scene])
    no_target = dataclasses.replace(ep, scene=dataclasses.replace(ep.scene, target_object="ghost"))
    with pytest.raises(CriticInputError, match="ghost"):
        critic.diagnose([no_target])
    with pytest.raises(CriticInputError, match="empty trajectory"):
        critic.diagnose([dataclasses.replace(ep, samples=[])])
