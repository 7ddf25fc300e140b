# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Success rate of a policy network per family on freshly generated scenes of a split."""

from __future__ import annotations

import numpy as np

from coda_policy.model import CodaPolicyNet
from coda_policy.serving import make_action_fn


def success_rates(net: CodaPolicyNet, families: tuple[str, ...], episodes: int, rng: np.random.Generator,
                  split: str, embedder: object) -> dict[str, float]:
    """Fraction of ``episodes`` new scenes per family that the deterministic policy solves (engine success)."""
    from coda_engine.sim.arm import SimArm
    from coda_engine.sim.expert import run_episode
    from coda_engine.sim.generator import generate
    from coda_engine.sim.scene import SceneParams

    arm = SimArm()
    was_training = net.training
    net.eval()
    rates = {}
    for family in families:
        wins = 0
        for _ in range(episodes):
            scene = generate(family, rng, SceneParams(split=split))
            act = make_action_fn(net, embedder.embed_one(scene.instruction))  # type: ignore[attr-defined]
            wins += run_episode(arm, scene, act).success
        rates[family] = wins / max(episodes, 1)
    net.train(was_training)
    return rates
