# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: the real text embedder and a small real demonstration set (loaded once per session)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coda_policy.config import PolicyConfig
from coda_policy.data import DemoSet, collect
from coda_policy.serving import embedder as shared_embedder

torch.set_num_threads(2)

TINY = {"d_model": 32, "num_heads": 2, "hidden_dim": 64}


@pytest.fixture(scope="session")
def embedder():
    return shared_embedder()


@pytest.fixture(scope="session")
def tiny_policy_config() -> PolicyConfig:
    return PolicyConfig(**TINY)


@pytest.fixture(scope="session")
def small_demos(embedder) -> DemoSet:
    return collect(("reach", "push"), 4, np.random.default_rng(7), "id", embedder, 0.05)
