# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""EpisodeResult dicts -> critic episodes: round trips on real MuJoCo episodes, scenes, backends, bad input."""

from __future__ import annotations

import copy
import os
import time

import numpy as np
import pytest

from coda_critic.diagnosis import CriticInputError
from coda_critic.episode_input import (
    LearnedModelError,
    SceneBook,
    check_for_backends,
    choose_backends,
    diagnose_with,
    episode_from_result,
    episodes_from_results,
    has_privileged_state,
    resolve_learned_model,
)
from coda_critic.grounded import GroundedCritic
from coda_engine.episodes import STATUS_REJECTED
from coda_engine.ros.convert import dict_to_msg, msg_to_dict
from coda_msgs.msg import EpisodeResult


def result_dict(ep) -> dict:
    """Return the EpisodeResult dict with decoded keyframes; a deep copy, so tests may edit it."""
    return copy.deepcopy({**ep.to_result_dict(), "keyframes": list(ep.keyframes)})


@pytest.fixture(scope="module")
def recorded(episodes):
    return list(episodes.values())


@pytest.fixture
def book(recorded):
    scenes = SceneBook()
    for ep in recorded:
        scenes.add(ep.scene.to_dict())
    return scenes


def strip(d):
    return {k: v for k, v in d.to_dict().items() if k != "header"}


def test_round_trip_gives_the_same_grounded_diagnoses(recorded, book):
    back = episodes_from_results([result_dict(ep) for ep in recorded], book)
    critic = GroundedCritic()
    expected = critic.diagnose(recorded)
    assert [strip(d) for d in critic.diagnose(back)] == [strip(d) for d in expected]
    assert len({d.failure_mode for d in expected}) >= 5, "the episodes should cover several failure modes"
    for ep, again in zip(recorded, back, strict=True):
        assert again.episode_id == ep.episode_id and again.steps == ep.steps and again.success == ep.success
        assert again.scene.objects == ep.scene.objects and again.scene.instruction == ep.scene.instruction
        assert again.scene.mjcf == "", "the book drops the MJCF text"
        assert all(np.array_equal(a, b) for a, b in zip(again.keyframes, ep.keyframes, strict=True))


def test_round_trip_through_the_message_gives_the_same_diagnoses(recorded, book):
    """Through the real EpisodeResult type (float32 fields), the grounded labels stay the same."""
    back = []
    for i, ep in enumerate(recorded):
        data = msg_to_dict(dict_to_msg(EpisodeResult, ep.to_result_dict()))
        data["keyframes"] = list(ep.keyframes)
        back.append(episode_from_result(data, book, i))
    critic = GroundedCritic()
    assert [strip(d) for d in critic.diagnose(back)] == [strip(d) for d in critic.diagnose(recorded)]


def test_scene_book_refuses_scenes_that_do_not_parse(recorded):
    book = SceneBook(capacity=2)
    bad = recorded[0].scene.to_dict()
    bad["family"] = "juggle"
    with pytest.raises(CriticInputError, match=r"does not parse.*juggle"):
        book.add(bad)
    with pytest.raises(CriticInputError, match=r"did not parse when it arrived.*juggle"):
        book.get(recorded[0].scene.scene_id)
    book.add(recorded[0].scene.to_dict())  # a good spec with the same id replaces the refusal
    assert book.get(recorded[0].scene.scene_id).family == recorded[0].scene.family
    with pytest.raises(CriticInputError, match="empty scene_id"):
        book.add({**recorded[1].scene.to_dict(), "scene_id": ""})
    with pytest.raises(CriticInputError, match="KeyError"):
        book.add({"scene_id": "half"})
    book.add(recorded[1].scene.to_dict())
    book.add(recorded[2].scene.to_dict())
    assert len(book) == 2 and recorded[0].scene.scene_id not in book, "the oldest scene is evicted"
    with pytest.raises(CriticInputError, match=r"unknown scene_id .*2 scenes known"):
        book.get(recorded[0].scene.scene_id)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(episode_id=""), "empty episode_id"),
        (lambda d: d.update(status=STATUS_REJECTED, status_detail="gate refused"), "REJECTED.*gate refused"),
        (lambda d: d.update(status=7), "unknown status 7"),
        (lambda d: d.update(scene_id="nowhere"), "unknown scene_id 'nowhere'"),
        (lambda d: d.update(trajectory=[]), "empty trajectory"),
        (lambda d: d.update(length=d["length"] + 5), "trajectory ends at step"),
        (lambda d: d.update(keyframe_steps=d["keyframe_steps"][:-1]), "keyframe_steps .mismatched"),
        (lambda d: d["keyframes"].__setitem__(0, d["keyframes"][0][:, :, 0]), "keyframe 0 must be .* uint8"),
        (lambda d: d["keyframes"].__setitem__(1, d["keyframes"][1].astype(np.float32)), "keyframe 1 .*float32"),
        (lambda d: d["keyframe_steps"].__setitem__(-1, 10_000), r"keyframe_steps\[.*outside the episode"),
        (lambda d: d.update(num_stages=9), "num_stages=9 but the .* stage library has"),
    ],
)
def test_bad_results_name_the_episode_and_the_problem(recorded, book, change, expected):
    data = result_dict(recorded[1])
    change(data)
    with pytest.raises(CriticInputError, match=expected) as info:
        episodes_from_results([result_dict(recorded[0]), data], book)
    assert str(info.value).startswith("episode 1 ("), str(info.value)


def test_batch_size_is_checked(book):
    with pytest.raises(CriticInputError, match=r"got 0 episodes, expected 1..256"):
        episodes_from_results([], book)


def test_backend_choice_and_checks_name_the_batch_index(recorded, book):
    sim = episode_from_result(result_dict(recorded[0]), book, 0)
    real_data = result_dict(recorded[1])
    for sample in real_data["trajectory"]:
        sample["objects"] = []
    real = episode_from_result(real_data, book, 1)
    assert has_privileged_state(sim) and not has_privileged_state(real)
    assert choose_backends([sim, real], "auto") == ["grounded", "learned"]
    assert choose_backends([sim, real], "grounded") == ["grounded", "grounded"]
    for bad in ("vlm", "banana", ""):
        with pytest.raises(CriticInputError, match=f"backend {bad!r} is not served here"):
            choose_backends([sim], bad)
    with pytest.raises(CriticInputError, match=r"^episode 1 .*no privileged object states.*\[backend grounded\]"):
        check_for_backends([sim, real], ["grounded", "grounded"])
    blind = copy.copy(real)
    blind.keyframes, blind.keyframe_steps = [], []
    with pytest.raises(CriticInputError, match=r"^episode 1 .*empty keyframes.*\[backend learned\]"):
        check_for_backends([sim, blind], ["grounded", "learned"])
    renamed = copy.deepcopy(sim)
    renamed.episode_id = "renamed"
    for sample in renamed.samples:
        sample["objects"][0]["name"] = "ghost"
    with pytest.raises(CriticInputError, match=r"^episode 1 .*mismatched ids"):
        check_for_backends([sim, renamed], ["grounded", "grounded"])
    with pytest.raises(CriticInputError, match="duplicate episode_id"):
        check_for_backends([sim, sim], ["grounded", "grounded"])


def test_diagnose_with_keeps_the_order(recorded, book):
    eps = episodes_from_results([result_dict(ep) for ep in recorded[:4]], book)
    backends = ["learned", "grounded", "learned", "grounded"]
    # Two real grounded critics stand for the two backends: the merge must restore the batch order.
    out = diagnose_with(eps, backends, {"grounded": GroundedCritic(), "learned": GroundedCritic()})
    assert [strip(d) for d in out] == [strip(d) for d in GroundedCritic().diagnose(eps)]


def test_learned_model_folder_resolution(tmp_path):
    with pytest.raises(LearnedModelError, match=r"no trained critic under .*coda critic train"):
        resolve_learned_model("", tmp_path)
    old, new = tmp_path / "lc-0000000001", tmp_path / "lc-0000000002"
    for folder in (old, new):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    (tmp_path / "lc-unfinished").mkdir()
    now = time.time()
    os.utime(old, (now, now))
    os.utime(new, (now - 100, now - 100))
    assert resolve_learned_model("", tmp_path) == old, "the most recently written folder wins"
    assert resolve_learned_model(new, tmp_path) == new
    with pytest.raises(LearnedModelError, match="not a saved critic folder"):
        resolve_learned_model(tmp_path / "lc-unfinished", tmp_path)
