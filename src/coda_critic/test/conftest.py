# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures of the critic tests: one simulated arm and a small set of real labelled episodes."""

from __future__ import annotations

import numpy as np
import pytest

from coda_critic.actors import make_actor
from coda_engine.episodes import RecordingConfig, run_recorded_episode
from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams

# (family, actor, scene seed) -> the episodes the tests label; every one runs on the real MuJoCo arm.
CASES = [
    ("pick_place", "expert", 11),
    ("reach", "wander", 12),
    ("reach", "wrong_object", 13),
    ("pick_place", "offset_grasp", 14),
    ("pick_place", "drop", 15),
    ("pick_place", "wrong_place", 16),
    ("stack", "sweep", 17),
    ("stack", "slow", 18),
    ("stack", "drop", 19),
    ("push", "wander", 20),
]


@pytest.fixture(scope="session")
def arm():
    sim = SimArm()
    yield sim
    sim.close()


@pytest.fixture(scope="session")
def episodes(arm):
    """Return the recorded episodes of ``CASES`` (keyframes 32x32), keyed by (family, actor)."""
    result = {}
    for family, actor, seed in CASES:
        scene = generate_seeded(family, seed, SceneParams(num_distractors=(1, 2)))
        act = make_actor(actor, scene, np.random.default_rng(seed))
        result[(family, actor)] = run_recorded_episode(
            arm, scene, act, episode_id=f"t-{family}-{actor}", policy_version=actor, robot_id="sim_test",
            config=RecordingConfig(keyframe_size=32))
    return result
