# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The paired comparison of two methods: point difference, bootstrap interval, pairing rules."""

from __future__ import annotations

import numpy as np
import pytest

from coda_loop.stats import paired_difference

SPLITS = ("position", "instruction")


def _outcomes(rate: float, seed: int, scenes: int = 100) -> dict[str, dict[str, int]]:
    rng = np.random.default_rng(seed)
    return {split: {f"{split}-{i:03d}": int(rng.random() < rate) for i in range(scenes)} for split in SPLITS}


def test_difference_is_the_mean_over_seeds_splits_and_scenes():
    a = {0: {"position": {"p0": 1, "p1": 1}, "instruction": {"i0": 1, "i1": 0}},
         1: {"position": {"p0": 0, "p1": 1}, "instruction": {"i0": 1, "i1": 1}}}
    b = {0: {"position": {"p0": 0, "p1": 1}, "instruction": {"i0": 0, "i1": 0}},
         1: {"position": {"p0": 0, "p1": 1}, "instruction": {"i0": 1, "i1": 1}}}
    result = paired_difference(a, b, SPLITS, np.random.default_rng(0), n_boot=2000)
    # seed 0: position +0.5, instruction +0.5 -> +0.5; seed 1: 0 -> mean +0.25
    assert result["diff"] == pytest.approx(0.25)
    assert result["per_seed"] == {"0": pytest.approx(0.5), "1": pytest.approx(0.0)}
    assert result["seeds"] == 2 and result["scenes"] == 4
    low, high = result["ci"]
    assert low <= result["diff"] <= high


def test_a_real_gap_has_an_interval_above_zero_and_no_gap_one_around_zero():
    better = {s: _outcomes(0.75, s) for s in range(3)}
    worse = {s: _outcomes(0.55, 100 + s) for s in range(3)}
    gap = paired_difference(better, worse, SPLITS, np.random.default_rng(1))
    assert gap["ci"][0] > 0.0 and 0.1 < gap["diff"] < 0.3
    same = paired_difference(better, {s: _outcomes(0.75, 200 + s) for s in range(3)}, SPLITS,
                             np.random.default_rng(1))
    assert same["ci"][0] < 0.0 < same["ci"][1]
    itself = paired_difference(better, better, SPLITS, np.random.default_rng(1))
    assert itself["diff"] == 0.0 and itself["ci"] == [0.0, 0.0]


def test_only_common_seeds_and_scenes_pair_up():
    a = {0: _outcomes(0.5, 0), 1: _outcomes(0.5, 1)}
    b = {1: {split: dict(list(v.items())[:10]) for split, v in _outcomes(0.5, 2).items()}}
    result = paired_difference(a, b, SPLITS, np.random.default_rng(0), n_boot=100)
    assert result["seeds"] == 1 and result["scenes"] == 20
    with pytest.raises(ValueError, match="no seed in common"):
        paired_difference({0: _outcomes(0.5, 0)}, {1: _outcomes(0.5, 1)}, SPLITS, np.random.default_rng(0))
    with pytest.raises(ValueError, match="split 'distractor'"):
        paired_difference(a, a, ("distractor",), np.random.default_rng(0))
    with pytest.raises(ValueError, match="level"):
        paired_difference(a, a, SPLITS, np.random.default_rng(0), level=1.5)
