# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The PPO update of :mod:`coda_policy.rl` over a ``coda_core_cpp.RolloutBuffer``, without simulation.

- :func:`ppo_update`: clipped-ratio PPO epochs over the buffer's seeded minibatches; each transition's value head
  is the one of the stage it was in. Optional behaviour-cloning term on demonstrations and KL penalty to the
  frozen initial policy (the fine-tuning safeguards :mod:`coda_policy.rl` describes).
- :func:`actor_critic`: the network's action mean and per-stage values, the values optionally on detached features.
- :func:`gaussian_kl`: KL divergence between diagonal Gaussians.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from coda_core_cpp import RolloutBuffer
from coda_policy.model import CodaPolicyNet

if TYPE_CHECKING:
    from coda_policy.rl import RLConfig


def gaussian_kl(
    mean: torch.Tensor, log_std: torch.Tensor, ref_mean: torch.Tensor, ref_log_std: torch.Tensor
) -> torch.Tensor:
    """KL divergence (B,) from the diagonal Gaussian ``(mean, exp(log_std))`` to ``(ref_mean, exp(ref_log_std))``."""
    log_std, ref_log_std = log_std.expand_as(mean), ref_log_std.expand_as(ref_mean)
    var_ratio = (2.0 * (log_std - ref_log_std)).exp()
    shift = ((mean - ref_mean) / ref_log_std.exp()).pow(2)
    return (0.5 * (var_ratio + shift - 1.0) - (log_std - ref_log_std)).sum(-1)


def actor_critic(
    net: CodaPolicyNet, obs: torch.Tensor, instr: torch.Tensor, value_trains_encoder: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``net(obs, instr)``: the action mean and the per-stage values.

    Without ``value_trains_encoder`` the values are computed on detached features, so that the value loss reaches
    the critic MLP alone.
    """
    feat, _ = net.features(obs, instr)
    return torch.tanh(net.actor(feat)), net.critic(feat if value_trains_encoder else feat.detach())


def ppo_update(
    net: CodaPolicyNet,
    optimizer: torch.optim.Optimizer,
    buffer: RolloutBuffer,
    cfg: RLConfig,
    seed: int,
    value_only: bool = False,
    demos: dict[str, torch.Tensor] | None = None,
    reference: CodaPolicyNet | None = None,
) -> dict[str, float]:
    """PPO epochs over the buffer's minibatches (order seeded by ``seed``); returns mean losses and diagnostics.

    Policy loss: clipped surrogate on per-minibatch normalised advantages. Value loss: squared error between
    the value of the transition's stage head and its GAE return. ``value_only`` steps the critic MLP alone.
    ``demos`` (``obs``, ``instr``, ``action`` tensors) adds ``cfg.bc_coef`` times the behaviour-cloning error on a
    random minibatch of them. ``reference`` (the frozen initial policy) gives ``kl_init``, the mean KL from the
    policy to it on the minibatch states, which ``cfg.kl_coef`` weighs in the loss.
    """
    bc_generator = torch.Generator().manual_seed(seed)
    critic_params = {id(p) for p in net.critic.parameters()}
    obs_dim = net.cfg.obs_dim
    sums: dict[str, float] = {
        "policy_loss": 0.0,
        "value_loss": 0.0,
        "entropy": 0.0,
        "approx_kl": 0.0,
        "clip_fraction": 0.0,
        "bc_loss": 0.0,
        "kl_init": 0.0,
    }
    count, stopped = 0, False
    epochs_run = 0
    for epoch in range(cfg.epochs):
        for mb in buffer.minibatches(cfg.batch_size, seed * 1000 + epoch):
            x = torch.from_numpy(mb.observations)
            obs, instr = x[:, :obs_dim], x[:, obs_dim:]
            actions = torch.from_numpy(mb.actions)
            mean, values = actor_critic(net, obs, instr, bool(cfg.value_trains_encoder))
            heads = torch.from_numpy(mb.stages).long()
            value = values.gather(1, heads[:, None])[:, 0]
            log_prob = net.log_prob(mean, actions)
            adv = torch.from_numpy(mb.advantages)
            if len(adv) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            log_ratio = log_prob - torch.from_numpy(mb.old_log_probs)
            ratio = log_ratio.exp()
            if cfg.target_kl is not None and not value_only:
                with torch.no_grad():
                    if float(((ratio - 1) - log_ratio).mean()) > 1.5 * cfg.target_kl:
                        stopped = True
                        break
            policy_loss = -torch.min(adv * ratio, adv * ratio.clamp(1 - cfg.clip_range, 1 + cfg.clip_range)).mean()
            value_loss = (torch.from_numpy(mb.returns) - value).pow(2).mean()
            entropy = net.entropy()
            loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
            kl_init = torch.zeros(())
            if reference is not None:
                with torch.no_grad():
                    ref_mean, _ = reference(obs, instr)
                kl_init = gaussian_kl(mean, net.log_std, ref_mean, reference.log_std).mean()
                loss = loss + cfg.kl_coef * kl_init
            bc_loss = torch.zeros(())
            if demos is not None and cfg.bc_coef > 0:
                pick = torch.randint(len(demos["obs"]), (cfg.batch_size,), generator=bc_generator)
                bc_mean, _ = net(demos["obs"][pick], demos["instr"][pick])
                bc_loss = (bc_mean - demos["action"][pick]).pow(2).mean()
                loss = loss + cfg.bc_coef * bc_loss
            optimizer.zero_grad(set_to_none=True)
            if value_only:
                (cfg.vf_coef * value_loss).backward()
                for p in net.parameters():  # Adam skips parameters without a gradient
                    if id(p) not in critic_params:
                        p.grad = None
            else:
                loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                sums["policy_loss"] += float(policy_loss)
                sums["value_loss"] += float(value_loss)
                sums["bc_loss"] += float(bc_loss)
                sums["kl_init"] += float(kl_init)
                sums["entropy"] += float(entropy)
                sums["approx_kl"] += float(((ratio - 1) - log_ratio).mean())
                sums["clip_fraction"] += float(((ratio - 1).abs() > cfg.clip_range).float().mean())
            count += 1
        if stopped:
            break
        epochs_run = epoch + 1
    return {**{k: v / max(count, 1) for k, v in sums.items()}, "epochs_run": epochs_run}
