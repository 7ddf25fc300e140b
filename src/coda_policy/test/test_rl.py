# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""PPO with the real RolloutBuffer, potential shaping, per-stage value heads, determinism and resuming."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coda_core_cpp import PotentialProgram, RolloutBuffer
from coda_engine.sim.families import get_family
from coda_engine.sim.layout import LAYOUT
from coda_policy.checkpoint import load_policy, load_trainer_state
from coda_policy.metrics import read_metrics
from coda_policy.rl import RLConfig, Rollouts, ppo_update, train_rl
from coda_policy.sft import build_policy

OBS_DIM = LAYOUT["stage_index"][0] + 1


def _cfg(tmp_path, tiny_policy_config, **kw) -> RLConfig:
    base = {"family": "reach", "n_envs": 2, "n_steps": 8, "total_env_steps": 32, "epochs": 2, "batch_size": 8,
            "output_dir": tmp_path, "progress": False, "policy": tiny_policy_config, "num_threads": 1}
    return RLConfig(**{**base, **kw})


@pytest.mark.parametrize("shaping", [True, False])
def test_rollout_rewards_are_shaped_by_the_program(tmp_path, tiny_policy_config, embedder, shaping):
    cfg = _cfg(tmp_path, tiny_policy_config, n_envs=1, n_steps=42, shaping=shaping)
    net = build_policy(tiny_policy_config, 0).net
    net.set_num_stages(2)
    rollouts = Rollouts(cfg, embedder, np.random.default_rng(0))
    buffer = RolloutBuffer(cfg.n_steps, cfg.n_envs, OBS_DIM + 384, 4)
    rollouts.collect(net, buffer, torch.Generator().manual_seed(0))
    program = PotentialProgram.compile(get_family("reach").program, LAYOUT)
    obs = buffer.observations[:, :, :OBS_DIM]
    stage_col = LAYOUT["stage_index"][0]
    checked = 0
    for env in range(cfg.n_envs):
        for t in range(cfg.n_steps - 1):
            if buffer.episode_starts[t + 1, env]:
                continue  # the episode ended at t: terminal masking or truncation bootstrap applies
            phi = program.evaluate(obs[t, env], int(obs[t, env, stage_col]))[0]
            next_phi = program.evaluate(obs[t + 1, env], int(obs[t + 1, env, stage_col]))[0]
            expected = cfg.gamma * next_phi - phi if shaping else 0.0
            assert buffer.rewards[t, env] == pytest.approx(expected, abs=1e-5)
            checked += 1
    assert checked > 30
    # Reach truncates at 40 steps: every env started a new episode by then.
    assert np.all(buffer.episode_starts[1:41].max(axis=0) == 1)
    assert set(np.unique(buffer.stages)) <= {0, 1}


def test_ppo_update_changes_the_network_and_uses_every_head(tmp_path, tiny_policy_config, embedder):
    cfg = _cfg(tmp_path, tiny_policy_config, n_steps=16)
    net = build_policy(tiny_policy_config, 0).net
    net.set_num_stages(2)
    rollouts = Rollouts(cfg, embedder, np.random.default_rng(1))
    buffer = RolloutBuffer(cfg.n_steps, cfg.n_envs, OBS_DIM + 384, 4)
    last = rollouts.collect(net, buffer, torch.Generator().manual_seed(0))
    buffer.compute_gae(last, rollouts.episode_start, cfg.gamma, cfg.gae_lambda)
    assert np.all(np.isfinite(buffer.returns)) and np.abs(buffer.advantages).sum() > 0
    before = {k: v.clone() for k, v in net.state_dict().items()}
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    losses = ppo_update(net, optimizer, buffer, cfg, seed=0)
    assert all(np.isfinite(v) for v in losses.values())
    changed = [k for k, v in net.state_dict().items() if not torch.equal(v, before[k])]
    assert "critic.4.weight" in changed and "actor.4.weight" in changed
    # A value-only (warm-up) update moves the critic MLP and nothing else.
    before = {k: v.clone() for k, v in net.state_dict().items()}
    ppo_update(net, torch.optim.Adam(net.parameters(), lr=1e-3), buffer, cfg, seed=1, value_only=True)
    changed = {k for k, v in net.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.startswith("critic.") for k in changed), changed
    # target_kl: the first minibatch (KL 0) steps, the next one is past a tiny target and stops the update.
    full = ppo_update(net, torch.optim.Adam(net.parameters(), lr=1e-3), buffer, cfg, seed=2)
    assert full["epochs_run"] == cfg.epochs
    early = RLConfig(**{**cfg.__dict__, "target_kl": 1e-9, "version_id": "kl"})
    stopped = ppo_update(net, torch.optim.Adam(net.parameters(), lr=1e-3), buffer, early, seed=3)
    assert stopped["epochs_run"] == 0 and stopped["approx_kl"] == 0.0


def test_train_rl_runs_saves_and_is_deterministic(tmp_path, tiny_policy_config, embedder):
    a = train_rl(_cfg(tmp_path / "a", tiny_policy_config), embedder)
    b = train_rl(_cfg(tmp_path / "b", tiny_policy_config), embedder)
    assert a.env_steps == 32 and a.version_id == b.version_id
    net_a, config = load_policy(a.folder)
    net_b, _ = load_policy(b.folder)
    assert config["meta"]["trainer"] == "rl" and net_a.cfg.num_stages == 2  # reach's program has 2 stages
    assert net_a.critic[-1].out_features == 2
    for (name, pa), pb in zip(net_a.state_dict().items(), net_b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    rows = read_metrics(a.folder / "metrics.jsonl", "rollout")
    assert [r["env_steps"] for r in rows] == [16, 32]


def test_train_rl_resumes_and_starts_from_a_checkpoint(tmp_path, tiny_policy_config, embedder):
    first = train_rl(_cfg(tmp_path, tiny_policy_config, version_id="run", checkpoint_every=1), embedder)
    assert load_trainer_state(first.folder)["env_steps"] == 32
    more = train_rl(_cfg(tmp_path, tiny_policy_config, version_id="run", total_env_steps=48), embedder)
    assert more.env_steps == 48
    rows = read_metrics(more.folder / "metrics.jsonl", "rollout")
    assert [r["env_steps"] for r in rows] == [16, 32, 48]
    child = train_rl(_cfg(tmp_path, tiny_policy_config, init_from=str(first.folder), family="pick_place",
                          total_env_steps=16, init_log_std=-2.0, value_warmup_rollouts=1), embedder)
    net, config = load_policy(child.folder)
    assert net.cfg.num_stages == 4 and config["meta"]["parent"] == str(first.folder)
    # One rollout of value warm-up: the actor and its noise are still the parent's (noise reset to init_log_std).
    parent, _ = load_policy(first.folder)
    for name, value in parent.actor.state_dict().items():
        assert torch.equal(value, net.actor.state_dict()[name]), name
    assert torch.allclose(net.log_std, torch.full_like(net.log_std, -2.0))


def test_behaviour_cloning_term_uses_the_family_demonstrations(tmp_path, tiny_policy_config, embedder):
    from coda_policy.data import collect

    demos = collect(("reach",), 2, np.random.default_rng(5), "id", embedder, tiny_policy_config.max_delta)
    demos.save(tmp_path / "demos.npz")
    result = train_rl(_cfg(tmp_path, tiny_policy_config, bc_demos=str(tmp_path / "demos.npz"), bc_coef=1.0), embedder)
    rows = read_metrics(result.folder / "metrics.jsonl", "rollout")
    assert all(np.isfinite(r["bc_loss"]) and r["bc_loss"] > 0 for r in rows)
    plain = train_rl(_cfg(tmp_path, tiny_policy_config), embedder)
    assert all(r["bc_loss"] == 0 for r in read_metrics(plain.folder / "metrics.jsonl", "rollout"))
    with pytest.raises(ValueError, match="not 'push'"):
        train_rl(_cfg(tmp_path, tiny_policy_config, family="push", bc_demos=str(tmp_path / "demos.npz"), bc_coef=1.0),
                 embedder)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"family": "fly"}, "family"),
    ({"gamma": 1.5}, "gamma"),
    ({"clip_range": 0.0}, "clip_range"),
    ({"n_envs": 0}, "n_envs"),
    ({"init_from": "/nonexistent"}, "init_from"),
    ({"init_log_std": 3.0}, "init_log_std"),
    ({"value_warmup_rollouts": -1}, "value_warmup_rollouts"),
    ({"target_kl": 0.0}, "target_kl"),
    ({"bc_coef": 0.5}, "bc_demos"),
])
def test_bad_rl_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"RLConfig.{field}"):
        RLConfig(**kwargs)
