# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Serving: the process-wide embedder, and the loader the engine's workers and bridges find for trained versions."""

from __future__ import annotations

from coda_engine.policies import LOADER_GROUP, policy_loader
from coda_policy.serving import embedder, load_action_fn


def test_the_process_embedder_encodes_one_string_per_call() -> None:
    assert embedder().batch_size == 1


def test_the_engine_finds_this_package_as_its_policy_loader() -> None:
    """coda_policy's setup.py registers load_action_fn under the engine's entry-point group, and only it."""
    from importlib.metadata import entry_points

    assert [(ep.name, ep.value) for ep in entry_points(group=LOADER_GROUP)] == [
        ("checkpoint", "coda_policy.serving:load_action_fn")
    ]
    assert policy_loader() is load_action_fn


def test_workers_and_bridges_refuse_a_version_trained_at_another_rate(tmp_path, tiny_policy_config) -> None:
    """``resolve`` with the arm's rate (what the sim bridge, arm bridge and loop workers pass)."""
    import numpy as np
    import pytest

    from coda_engine.policies import PolicyNotAvailableError, resolve
    from coda_engine.sim.generator import generate
    from coda_engine.sim.scene import SceneParams
    from coda_policy.checkpoint import save_checkpoint
    from coda_policy.sft import build_policy

    save_checkpoint(tmp_path / "v1", build_policy(tiny_policy_config, 0).net.eval(), "v1")
    scene = generate("reach", np.random.default_rng(0), SceneParams())
    assert callable(resolve("v1", scene, tmp_path, 10.0))
    assert callable(resolve("v1", scene, tmp_path))  # no rate given: not checked
    with pytest.raises(PolicyNotAvailableError, match=r"'v1'.*trained at 10 Hz and cannot run at 25 Hz"):
        resolve("v1", scene, tmp_path, 25.0)
    assert callable(resolve("state_expert", scene, tmp_path, 25.0))  # demonstrators act on state at any rate
