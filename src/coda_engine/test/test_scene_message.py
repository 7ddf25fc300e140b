# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Scenes and episode results through their ROS messages, including CDR serialisation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message

from coda_engine.episodes import RecordingConfig, run_recorded_episode
from coda_engine.ros.convert import dict_to_msg, msg_to_dict
from coda_engine.ros.images import ImageError, image_to_msg, msg_to_image
from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import run_expert
from coda_engine.sim.families import get_family
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import Scene, SceneParams
from coda_msgs.msg import EpisodeResult, SceneSpec


@pytest.mark.parametrize("family", ["reach", "pick_place", "push", "stack"])
@pytest.mark.parametrize("split", ["id", "distractor"])
def test_scene_survives_the_scene_spec_message_exactly(family: str, split: str) -> None:
    scene = generate(family, np.random.default_rng(3), SceneParams(split=split))
    wire = serialize_message(dict_to_msg(SceneSpec, scene.to_dict()))
    back = Scene.from_dict(msg_to_dict(deserialize_message(wire, SceneSpec)))
    assert back == scene


def test_recorded_episode_fills_an_episode_result() -> None:
    scene = generate("pick_place", np.random.default_rng(8), SceneParams())
    arm = SimArm()
    expert = get_family(scene.family).expert()
    expert.reset()
    episode = run_recorded_episode(
        arm,
        scene,
        lambda obs, state: expert.act(state),
        episode_id="e1",
        policy_version="expert",
        robot_id="sim_x",
        config=RecordingConfig(sample_every=5),
    )
    reference = run_expert(SimArm(), scene)
    assert episode.success == reference.success and episode.steps == reference.steps
    assert np.array_equal(episode.actions, reference.actions)
    msg = dict_to_msg(EpisodeResult, episode.to_result_dict())
    msg.keyframes = [image_to_msg(f) for f in episode.keyframes]
    back = deserialize_message(serialize_message(msg), EpisodeResult)
    assert back.length == episode.steps and back.success == episode.success
    steps = [sample.step for sample in back.trajectory]
    assert steps[0] == 0 and steps[-1] == episode.steps
    assert all(b - a == 5 for a, b in itertools.pairwise(steps[:-1]))
    assert list(back.keyframe_steps) == episode.keyframe_steps
    assert len(back.keyframes) >= 2 + episode.stage_reached - 1  # start, one per stage change, end
    assert np.array_equal(msg_to_image(back.keyframes[0]), episode.keyframes[0])
    arm.close()


def test_bad_images_are_rejected_with_the_reason() -> None:
    msg = image_to_msg(np.zeros((4, 5, 3), dtype=np.uint8))
    msg.encoding = "16UC1"
    with pytest.raises(ImageError, match="unsupported image encoding '16UC1'"):
        msg_to_image(msg)
    msg = image_to_msg(np.zeros((4, 5, 3), dtype=np.uint8))
    msg.data = bytes(10)
    with pytest.raises(ImageError, match="data holds 10 bytes"):
        msg_to_image(msg)
    with pytest.raises(ImageError, match="uint8"):
        image_to_msg(np.zeros((4, 5, 3), dtype=np.float32))
