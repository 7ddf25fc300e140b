# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""RolloutBuffer and compute_gae: equality with Stable-Baselines3, views, minibatches, errors."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.buffers import RolloutBuffer as SB3Buffer

import coda_core_cpp as core


def _random_rollout(rng: np.random.Generator, t: int, n: int, p_reset: float) -> dict[str, np.ndarray]:
    return {
        "rewards": rng.normal(size=(t, n)).astype(np.float32),
        "values": rng.normal(size=(t, n)).astype(np.float32),
        "episode_starts": (rng.random((t, n)) < p_reset).astype(np.float32),
        "last_values": rng.normal(size=n).astype(np.float32),
        "dones": (rng.random(n) < 0.5).astype(np.float32),
    }


def _sb3_gae(data: dict[str, np.ndarray], gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    t, n = data["rewards"].shape
    sb3 = SB3Buffer(t, spaces.Box(-1, 1, (2,), np.float32), spaces.Box(-1, 1, (1,), np.float32), "cpu",
                    gae_lambda=lam, gamma=gamma, n_envs=n)
    sb3.rewards[:] = data["rewards"]
    sb3.values[:] = data["values"]
    sb3.episode_starts[:] = data["episode_starts"]
    sb3.compute_returns_and_advantage(torch.as_tensor(data["last_values"]), data["dones"])
    return sb3.advantages, sb3.returns


@settings(max_examples=60, deadline=None)
@given(
    t=st.integers(1, 80),
    n=st.integers(1, 9),
    gamma=st.floats(0.0, 1.0),
    lam=st.floats(0.0, 1.0),
    p_reset=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_compute_gae_equals_sb3(t: int, n: int, gamma: float, lam: float, p_reset: float, seed: int) -> None:
    data = _random_rollout(np.random.default_rng(seed), t, n, p_reset)
    want_adv, want_ret = _sb3_gae(data, gamma, lam)
    adv, ret = core.compute_gae(**data, gamma=gamma, gae_lambda=lam)
    assert adv.dtype == np.float32 and adv.shape == (t, n)
    np.testing.assert_allclose(adv, want_adv, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ret, want_ret, rtol=0, atol=1e-5)


def test_buffer_method_equals_sb3_on_a_full_rollout() -> None:
    rng = np.random.default_rng(1)
    t, n, obs_dim, act_dim = 64, 4, 3, 2
    data = _random_rollout(rng, t, n, 0.1)
    buf = core.RolloutBuffer(t, n, obs_dim, act_dim)
    for step in range(t):
        buf.add(rng.normal(size=(n, obs_dim)), rng.normal(size=(n, act_dim)), data["rewards"][step],
                data["episode_starts"][step], data["values"][step], np.zeros(n, np.float32), np.zeros(n, np.int32))
    assert buf.full and buf.pos == t
    buf.compute_gae(data["last_values"], data["dones"], gamma=0.98, gae_lambda=0.9)
    want_adv, want_ret = _sb3_gae(data, 0.98, 0.9)
    np.testing.assert_allclose(buf.advantages, want_adv, rtol=0, atol=1e-5)
    np.testing.assert_allclose(buf.returns, want_ret, rtol=0, atol=1e-5)


def test_views_share_memory_and_outlive_the_name() -> None:
    buf = core.RolloutBuffer(3, 2, 4, 1)
    obs_view = buf.observations
    rewards = buf.rewards
    assert obs_view.shape == (3, 2, 4) and obs_view.dtype == np.float32
    assert buf.stages.dtype == np.int32 and buf.stages.shape == (3, 2)
    assert not obs_view.flags.owndata
    obs = np.arange(8, dtype=np.float32).reshape(2, 4)
    buf.add(obs, [[1.0], [2.0]], [0.5, 1.5], [1, 0], [0.1, 0.2], [-1.0, -2.0], np.array([0, 3]))
    np.testing.assert_array_equal(obs_view[0], obs)  # the earlier view sees the new data
    assert rewards[0, 1] == 1.5
    assert buf.stages[0, 1] == 3
    assert np.shares_memory(buf.observations, obs_view)
    del buf
    gc.collect()
    np.testing.assert_array_equal(obs_view[0], obs)  # the view keeps the storage alive
    rewards[0, 0] = 7.0


def test_reset_zeroes_in_place_and_rewinds() -> None:
    buf = core.RolloutBuffer(2, 1, 1, 1)
    view = buf.values
    for _ in range(2):
        buf.add([[1.0]], [[1.0]], [1.0], [0.0], [3.0], [0.0], np.array([1]))
    with pytest.raises(IndexError, match="full"):
        buf.add([[1.0]], [[1.0]], [1.0], [0.0], [3.0], [0.0], np.array([1]))
    buf.reset()
    assert buf.pos == 0 and not buf.full
    assert view.sum() == 0.0 and buf.stages.sum() == 0


def test_add_errors_name_the_argument_and_shapes() -> None:
    buf = core.RolloutBuffer(4, 2, 3, 1)
    good = {
        "obs": np.zeros((2, 3), np.float32),
        "action": np.zeros((2, 1), np.float32),
        "reward": np.zeros(2, np.float32),
        "episode_start": np.zeros(2, bool),
        "value": np.zeros(2, np.float64),
        "log_prob": np.zeros(2, np.float32),
        "stage": np.zeros(2, np.int64),
    }
    buf.add(**good)
    with pytest.raises(ValueError, match=r"obs: expected shape \(2, 3\), got \(2, 4\)"):
        buf.add(**{**good, "obs": np.zeros((2, 4), np.float32)})
    with pytest.raises(ValueError, match=r"reward: expected shape \(2,\), got \(3,\)"):
        buf.add(**{**good, "reward": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="stage: expected an int32 array, got dtype float32"):
        buf.add(**{**good, "stage": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match="action: expected a float32 array, got dtype complex64"):
        buf.add(**{**good, "action": np.zeros((2, 1), np.complex64)})
    with pytest.raises(ValueError, match="value: expected a float32 array, got dtype <U1"):
        buf.add(**{**good, "value": np.array(["a", "b"])})
    assert buf.pos == 1  # failed calls store nothing
    with pytest.raises(ValueError, match="n_envs must be >= 1"):
        core.RolloutBuffer(4, 0, 3, 1)
    with pytest.raises(ValueError, match="gamma must be in"):
        buf.compute_gae(np.zeros(2), np.zeros(2), gamma=1.5)
    with pytest.raises(ValueError, match=r"dones: expected shape \(2,\)"):
        buf.compute_gae(np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match=r"values: expected shape \(3, 2\), got \(3, 1\)"):
        core.compute_gae(np.zeros((3, 2)), np.zeros((3, 1)), np.zeros((3, 2)), np.zeros(2), np.zeros(2))


def test_seeded_minibatches_cover_every_transition_once() -> None:
    t, n = 10, 3
    buf = core.RolloutBuffer(t, n, 2, 1)
    for step in range(t):
        obs = np.array([[step, env] for env in range(n)], np.float32)
        buf.add(obs, -obs[:, :1], np.full(n, step, np.float32), np.zeros(n), np.arange(n, dtype=np.float32),
                np.zeros(n), np.full(n, step % 4, np.int32))
    buf.compute_gae(np.zeros(n), np.zeros(n), 0.9, 0.9)
    batches = list(buf.minibatches(batch_size=7, seed=123))
    assert len(buf.minibatches(7, 0)) == 5
    assert [len(b.indices) for b in batches] == [7, 7, 7, 7, 2]
    idx = np.concatenate([b.indices for b in batches])
    assert sorted(idx.tolist()) == list(range(t * n))
    assert not np.array_equal(idx, np.arange(t * n))
    for b in batches:
        steps, envs = np.divmod(b.indices, n)
        np.testing.assert_array_equal(b.observations[:, 0], steps)
        np.testing.assert_array_equal(b.observations[:, 1], envs)
        np.testing.assert_array_equal(b.actions[:, 0], -steps)
        np.testing.assert_array_equal(b.old_values, envs)
        np.testing.assert_array_equal(b.stages, steps % 4)
        np.testing.assert_array_equal(b.advantages, buf.advantages[steps, envs])
        np.testing.assert_array_equal(b.returns, buf.returns[steps, envs])
    again = np.concatenate([b.indices for b in buf.minibatches(7, 123)])
    other = np.concatenate([b.indices for b in buf.minibatches(7, 124)])
    np.testing.assert_array_equal(idx, again)
    assert not np.array_equal(idx, other)
    with pytest.raises(ValueError, match="empty"):
        core.RolloutBuffer(2, 1, 1, 1).minibatches(4, 0)
