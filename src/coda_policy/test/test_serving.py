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
