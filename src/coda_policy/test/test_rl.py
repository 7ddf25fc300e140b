# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""PPO with the real RolloutBuffer, potential shaping, per-stage value heads, determinism, resuming and fine-tuning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coda_core_cpp import PotentialProgram, RolloutBuffer
from coda_engine.sim.families import get_family
from coda_engine.sim.layout import LAYOUT
from coda_policy.checkpoint import load_policy, load_trainer_state
from coda_policy.metrics import read_metrics
from coda_policy.ppo import actor_critic, gaussian_kl, ppo_update
from coda_policy.rl import FINE_TUNE, RLConfig, Rollouts, train_rl
from coda_policy.sft import build_policy

OBS_DIM = LAYOUT["stage_index"][0] + 1


def _cfg(tmp_path, tiny_policy_config, **kw) -> RLConfig:
    base = {
        "family": "reach",
        "n_envs": 2,
        "n_steps": 8,
        "total_env_steps": 32,
        "epochs": 2,
        "batch_size": 8,
        "output_dir": tmp_path,
        "progress": False,
        "policy": tiny_policy_config,
        "num_threads": 1,
    }
    return RLConfig(**{**base, **kw})


def _collect(cfg: RLConfig, policy_config, embedder, num_stages: int, rng_seed: int = 0):
    """One rollout of a fresh tiny policy with ``num_stages`` value heads: (net, rollouts, buffer, bootstrap values)."""
    net = build_policy(policy_config, 0).net
    net.set_num_stages(num_stages)
    rollouts = Rollouts(cfg, embedder, np.random.default_rng(rng_seed))
    buffer = RolloutBuffer(cfg.n_steps, cfg.n_envs, OBS_DIM + 384, 4)
    last = rollouts.collect(net, buffer, torch.Generator().manual_seed(0))
    return net, rollouts, buffer, last


@pytest.mark.parametrize("shaping", [True, False])
def test_rollout_rewards_are_shaped_by_the_program(tmp_path, tiny_policy_config, embedder, shaping):
    cfg = _cfg(tmp_path, tiny_policy_config, n_envs=1, n_steps=42, shaping=shaping)
    _, _, buffer, _ = _collect(cfg, tiny_policy_config, embedder, 2)
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


def test_a_round_program_shapes_and_picks_heads_while_the_actor_reads_the_default_stage(
        tmp_path, tiny_policy_config, embedder):
    """A program with an extra first stage (done at once): its stage is the default one + 1 at every step."""
    source = "stage start:\n  progress = 1\n  done     = gripper > -1\n" + get_family("reach").program
    cfg = _cfg(tmp_path, tiny_policy_config, n_envs=2, n_steps=30, program=source)
    _, _, buffer, _ = _collect(cfg, tiny_policy_config, embedder, 3)
    program = PotentialProgram.compile(source, LAYOUT)
    obs = buffer.observations[:, :, :OBS_DIM]
    seen = obs[:, :, LAYOUT["stage_index"][0]].astype(int)  # what the actor reads: the default program's stage
    assert seen.min() == 0 and seen.max() <= 2
    np.testing.assert_array_equal(buffer.stages, np.minimum(seen + 1, 2))  # heads: the round program's stage
    checked = 0
    for env in range(cfg.n_envs):
        for t in range(cfg.n_steps - 1):
            if buffer.episode_starts[t + 1, env] or seen[t + 1, env] + 1 > 2:
                continue
            phi = program.evaluate(obs[t, env], int(seen[t, env]) + 1)[0]
            next_phi = program.evaluate(obs[t + 1, env], int(seen[t + 1, env]) + 1)[0]
            assert buffer.rewards[t, env] == pytest.approx(cfg.gamma * next_phi - phi, abs=1e-5)
            checked += 1
    assert checked > 40


def test_ppo_update_changes_the_network_and_uses_every_head(tmp_path, tiny_policy_config, embedder):
    cfg = _cfg(tmp_path, tiny_policy_config, n_steps=16)
    net, rollouts, buffer, last = _collect(cfg, tiny_policy_config, embedder, 2, rng_seed=1)
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
    child = train_rl(
        _cfg(
            tmp_path,
            tiny_policy_config,
            init_from=str(first.folder),
            family="pick_place",
            total_env_steps=16,
            init_log_std=-2.0,
            value_warmup_rollouts=1,
        ),
        embedder,
    )
    assert child.eval_success_init is None  # eval_episodes=0: nothing measured
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
        train_rl(
            _cfg(tmp_path, tiny_policy_config, family="push", bc_demos=str(tmp_path / "demos.npz"), bc_coef=1.0),
            embedder,
        )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"family": "fly"}, "family"),
        ({"gamma": 1.5}, "gamma"),
        ({"clip_range": 0.0}, "clip_range"),
        ({"n_envs": 0}, "n_envs"),
        ({"init_from": "/nonexistent"}, "init_from"),
        ({"init_log_std": 3.0}, "init_log_std"),
        ({"value_warmup_rollouts": -1}, "value_warmup_rollouts"),
        ({"target_kl": 0.0}, "target_kl"),
        ({"bc_coef": 0.5}, "bc_demos"),
        ({"kl_coef": 0.5}, "kl_coef"),
        ({"actor_lr_scale": 0.0}, "actor_lr_scale"),
    ],
)
def test_bad_rl_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"RLConfig.{field}"):
        RLConfig(**kwargs)


def test_gaussian_kl_matches_torch_distributions():
    gen = torch.Generator().manual_seed(0)
    mean, ref = torch.randn(5, 4, generator=gen), torch.randn(5, 4, generator=gen)
    log_std, ref_log_std = torch.tensor([-1.0, -2.0, 0.0, -0.5]), torch.tensor([-2.3, -1.0, 0.1, -0.5])
    normal = torch.distributions.Normal
    expected = torch.distributions.kl_divergence(normal(mean, log_std.exp()), normal(ref, ref_log_std.exp())).sum(-1)
    assert torch.allclose(gaussian_kl(mean, log_std, ref, ref_log_std), expected, atol=1e-5)
    assert torch.allclose(gaussian_kl(mean, log_std, mean, log_std), torch.zeros(5), atol=1e-6)


def test_fine_tuning_defaults_apply_with_init_from_only(tmp_path, tiny_policy_config):
    scratch = _cfg(tmp_path, tiny_policy_config)
    assert not scratch.bound_values and scratch.value_trains_encoder
    assert (scratch.kl_coef, scratch.actor_lr_scale, scratch.value_warmup_rollouts, scratch.init_log_std) == (
        0.0,
        1.0,
        0,
        None,
    )
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "config.json").write_text("{}")
    tuned = _cfg(tmp_path, tiny_policy_config, init_from=str(tmp_path / "sft"))
    assert (tuned.kl_coef, tuned.actor_lr_scale, tuned.value_warmup_rollouts, tuned.init_log_std) == (
        FINE_TUNE.kl_coef,
        FINE_TUNE.actor_lr_scale,
        FINE_TUNE.value_warmup_rollouts,
        FINE_TUNE.init_log_std,
    )
    assert tuned.kl_coef > 0 and tuned.actor_lr_scale < 1 and tuned.init_log_std < -1.0
    assert tuned.bound_values and not tuned.value_trains_encoder
    explicit = _cfg(tmp_path, tiny_policy_config, init_from=str(tmp_path / "sft"), kl_coef=0.0, actor_lr_scale=1.0)
    assert (explicit.kl_coef, explicit.actor_lr_scale) == (0.0, 1.0)
    assert explicit.version_id != tuned.version_id


def test_value_loss_reaches_the_encoder_only_when_asked(tiny_policy_config):
    net = build_policy(tiny_policy_config, 0).net
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(6, net.cfg.obs_dim, generator=gen)
    instr = torch.randn(6, net.cfg.instruction_dim, generator=gen)
    mean, values = net(x, instr)
    for trains in (True, False):
        m, v = actor_critic(net, x, instr, value_trains_encoder=trains)
        assert torch.allclose(m, mean) and torch.allclose(v, values)  # the same function as the network's forward
        net.zero_grad(set_to_none=True)
        v.sum().backward()
        assert net.critic[0].weight.grad is not None
        assert (net.token_mlp[0].weight.grad is not None) is trains


@pytest.mark.parametrize("shaping", [True, False])
def test_bounded_values_keep_gae_inputs_in_the_return_range(tmp_path, tiny_policy_config, embedder, shaping):
    (tmp_path / "init").mkdir()
    (tmp_path / "init" / "config.json").write_text("{}")
    net = build_policy(tiny_policy_config, 0).net
    net.set_num_stages(2)
    with torch.no_grad():
        net.critic[-1].bias.fill_(-50.0)  # a diverged critic: far below any attainable return
    low = -1.0 if shaping else 0.0
    for bound in (True, False):
        cfg = _cfg(
            tmp_path,
            tiny_policy_config,
            n_steps=44,
            shaping=shaping,
            init_from=str(tmp_path / "init"),
            bound_values=bound,
        )
        assert cfg.value_range == ((low, 1.0) if bound else (-float("inf"), float("inf")))
        rollouts = Rollouts(cfg, embedder, np.random.default_rng(0))
        buffer = RolloutBuffer(cfg.n_steps, cfg.n_envs, OBS_DIM + 384, 4)
        last = rollouts.collect(net, buffer, torch.Generator().manual_seed(0))
        truncated = buffer.episode_starts[1:] == 1  # reach truncates at 40 steps: bootstraps were added there
        assert truncated.any()
        if bound:
            assert np.all(buffer.values == low) and np.all(last == low)
            assert buffer.rewards[:-1][truncated].min() >= low * cfg.gamma - 1.0 - 1e-5
        else:
            assert np.all(buffer.values < -40) and buffer.rewards[:-1][truncated].max() < -40


def test_kl_penalty_holds_the_policy_near_the_initial_one(tmp_path, tiny_policy_config, embedder):
    cfg = _cfg(tmp_path, tiny_policy_config, n_steps=16, epochs=4)
    init = build_policy(tiny_policy_config, 0).net
    init.set_num_stages(2)
    rollouts = Rollouts(cfg, embedder, np.random.default_rng(1))
    buffer = RolloutBuffer(cfg.n_steps, cfg.n_envs, OBS_DIM + 384, 4)
    last = rollouts.collect(init, buffer, torch.Generator().manual_seed(0))
    buffer.compute_gae(last, rollouts.episode_start, cfg.gamma, cfg.gae_lambda)
    x = torch.from_numpy(buffer.observations.reshape(-1, OBS_DIM + 384))
    reference = build_policy(tiny_policy_config, 0).net
    reference.set_num_stages(2)
    reference.load_state_dict(init.state_dict())

    (tmp_path / "init").mkdir()
    (tmp_path / "init" / "config.json").write_text("{}")  # kl_coef needs an init_from; ppo_update gets the net

    def drift(kl_coef: float) -> tuple[float, dict[str, float]]:
        net = build_policy(tiny_policy_config, 0).net
        net.set_num_stages(2)
        net.load_state_dict(init.state_dict())
        c = RLConfig(**{**cfg.__dict__, "init_from": str(tmp_path / "init"), "kl_coef": kl_coef, "version_id": "kl"})
        losses = ppo_update(net, torch.optim.Adam(net.parameters(), lr=3e-3), buffer, c, seed=0, reference=reference)
        with torch.no_grad():
            mean, _ = net(x[:, :OBS_DIM], x[:, OBS_DIM:])
            ref_mean, _ = reference(x[:, :OBS_DIM], x[:, OBS_DIM:])
            return float(gaussian_kl(mean, net.log_std, ref_mean, reference.log_std).mean()), losses

    free, free_losses = drift(0.0)
    held, held_losses = drift(50.0)
    assert free_losses["kl_init"] > 0 and held_losses["kl_init"] > 0  # measured on every minibatch after the first
    assert held < 0.5 * free, (held, free)


def test_fine_tuning_measures_the_initial_policy_on_the_same_scenes(tmp_path, tiny_policy_config, embedder):
    from coda_policy.rl import _evaluate

    parent = train_rl(_cfg(tmp_path, tiny_policy_config, version_id="parent", total_env_steps=16), embedder)
    child_cfg = _cfg(
        tmp_path,
        tiny_policy_config,
        init_from=str(parent.folder),
        total_env_steps=32,
        value_warmup_rollouts=1,
        eval_episodes=2,
    )
    child = train_rl(child_cfg, embedder)
    parent_net, _ = load_policy(parent.folder)
    assert child.eval_success_init == _evaluate(parent_net, child_cfg, embedder)
    assert child.eval_success is not None
    rows = read_metrics(child.folder / "metrics.jsonl", "rollout")
    assert rows[0]["kl_init"] == 0.0 and rows[1]["kl_init"] > 0.0  # warm-up rollout, then the actor moves
    assert all(np.isfinite(r["advantage_std"]) for r in rows)
    assert read_metrics(child.folder / "metrics.jsonl", "success_init")[0]["reach"] == child.eval_success_init
    groups = load_trainer_state(child.folder)["optimizer"]["param_groups"]
    assert [g["lr"] for g in groups] == pytest.approx([child_cfg.lr, child_cfg.lr * FINE_TUNE.actor_lr_scale])


@pytest.mark.slow
def test_rollouts_keep_the_last_successful_episodes_as_demonstrations(tmp_path, tiny_policy_config, embedder):
    """RLConfig.keep_successes: the last successful episodes, step for step, in a DemoSet file of the run."""
    from coda_policy.data import DemoSet
    from coda_policy.rl import SUCCESSES_FILE

    # start_stage 2 is past push's two stages: the expert drives each episode to the push's end, so the policy's
    # first steps finish most of them (successes of a tiny untrained policy, step for step real)
    late = {"family": "push", "start_stage": 2, "start_stage_share": 1.0, "n_envs": 4, "n_steps": 32,
            "total_env_steps": 128}
    cfg = _cfg(tmp_path, tiny_policy_config, keep_successes=3, **late)
    _, rollouts, _, _ = _collect(cfg, tiny_policy_config, embedder, 3)
    successes = [f for f in rollouts.finished if f["success"]]
    assert len(successes) > 3 and len(rollouts.successes) == 3
    for episode, stats in zip(rollouts.successes, successes[-3:], strict=True):
        assert episode.observations.shape == (stats["length"], OBS_DIM)
        assert episode.actions.shape == (stats["length"], 4)
        assert np.abs(episode.actions).max() <= 1.0 and episode.instruction
    result = train_rl(cfg, embedder)
    demos = DemoSet.load(result.folder / SUCCESSES_FILE)
    assert result.successes == demos.num_episodes == 3 and demos.families == ("push",)
    assert np.array_equal(demos.embeddings[0], embedder.embed([demos.instructions[0]])[0])
    mapped = demos.with_families(("reach", "push"))
    assert set(mapped.family.tolist()) == {1} and np.array_equal(mapped.obs, demos.obs)
    with pytest.raises(ValueError, match="push"):
        demos.with_families(("reach", "stack"))
    # none kept: no file, and the version id of a run without the setting is what it was before it existed
    plain = train_rl(_cfg(tmp_path / "plain", tiny_policy_config, **late), embedder)
    assert plain.successes == 0 and not (plain.folder / SUCCESSES_FILE).exists()
    assert "keep_successes" not in _cfg(tmp_path, tiny_policy_config).to_dict()
    with pytest.raises(ValueError, match="keep_successes"):
        _cfg(tmp_path, tiny_policy_config, keep_successes=-1)
