# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Off-policy residual RL on top of a frozen cloned policy, with the staged potential as the critic's first values.

The cloned policy (``init_from``) stays as it is. RL trains only a small residual head
(:meth:`coda_policy.model.CodaPolicyNet.add_residual`) whose bounded output (``residual_scale`` of the action range)
is added to the cloned action, so the learner starts exactly at the cloned policy and can never move far from it.
Because the cloned network is frozen, the features it computes for a state never change: they are computed once,
when the transition is collected, and the learner's updates touch only small MLPs (fast on a CPU).

One run of :func:`train_residual`:

1. ``n_envs`` simulated arms act with the cloned action plus the residual plus Gaussian exploration noise
   (``explore_std``); every transition goes into a replay buffer: the features and cloned action before and after,
   the action taken, the sparse success reward, whether the episode terminated (a time-limit truncation is not a
   termination: its value is bootstrapped), and the staged potential of the program before and after.
2. Staged value learning (``value_init``): before any return is seen, both critics are fitted to the potential of
   the state (the program's progress, in [0, 1], the range of the sparse discounted return), on the first
   ``learning_starts`` transitions, for ``value_warmup_updates`` updates. This is the value initialisation that
   potential-based shaping is equivalent to (Wiewiora 2003), done explicitly, so the critic starts with the
   program's stage structure instead of absorbing it slowly. ``shaping`` also adds ``gamma * phi' - phi`` to each
   reward (then the warm-up target is 0: the shaped value of a state starts at its sparse value minus phi).
3. Clipped double-Q TD learning with LayerNorm critics and target networks (``tau``), ``updates_per_step``
   gradient updates per environment step; every ``policy_delay`` updates the residual head follows the first critic,
   with a penalty on the size of its correction (``residual_penalty``) that keeps it near the cloned policy.
4. The deterministic success of the cloned policy and of the result are measured on the same ``eval_episodes``
   scenes of the family (the loop's gate keeps the update only if it does better).

Everything random is seeded from ``seed`` (scenes, noise, minibatches), so a run is reproducible. The result is a
policy checkpoint like any other (``config.json`` records the residual head; every loader runs it) whose
``config.json`` ``meta.residual_rl`` records these settings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from coda_policy.checkpoint import load_policy, save_checkpoint
from coda_policy.config import ResidualRLConfig
from coda_policy.evaluation import success_rates
from coda_policy.model import CodaPolicyNet


@dataclass(frozen=True)
class ResidualRLResult:
    """What a run did and measured."""

    folder: Path
    """The result's checkpoint folder."""
    env_steps: int
    """Environment steps taken."""
    updates: int
    """Critic updates after the warm-up."""
    episodes: int
    """Episodes finished while collecting."""
    success_rate_collecting: float
    """Success of the episodes finished in the last quarter of the collection (with exploration noise)."""
    eval_success_init: float | None
    """Deterministic success of the cloned policy on the evaluation scenes."""
    eval_success: float | None
    """Deterministic success of the result on the same scenes."""
    warmup_value_loss: tuple[float, float] | None
    """Mean squared error of the critics against the potential at the first and the last warm-up update."""
    seconds: float
    """Wall time."""


class Critic(nn.Module):
    """Two Q functions of (features, action), each an MLP with LayerNorm after every hidden layer."""

    def __init__(self, feat_dim: int, action_dim: int, hidden: int) -> None:
        """Build both Q networks."""
        super().__init__()

        def q() -> nn.Sequential:
            return nn.Sequential(nn.Linear(feat_dim + action_dim, hidden), nn.LayerNorm(hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, 1))

        self.q1, self.q2 = q(), q()

    def forward(self, feat: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return both Q values (B,) of the action in the state with these features."""
        x = torch.cat([feat, action], dim=-1)
        return self.q1(x)[:, 0], self.q2(x)[:, 0]


class ReplayBuffer:
    """Transitions in preallocated arrays, sampled uniformly with the run's generator."""

    FIELDS = ("feat", "base", "action", "reward", "terminated", "phi", "next_feat", "next_base", "next_phi")

    def __init__(self, capacity: int, feat_dim: int, action_dim: int) -> None:
        """Allocate room for ``capacity`` transitions."""
        shapes = {"feat": feat_dim, "base": action_dim, "action": action_dim, "next_feat": feat_dim,
                  "next_base": action_dim}
        self.data = {name: np.zeros((capacity, shapes[name]) if name in shapes else capacity, dtype=np.float32)
                     for name in self.FIELDS}
        self.size = 0

    def add(self, **rows: np.ndarray) -> None:
        """Append a batch of transitions (one row per arm) given by field."""
        n = len(rows["reward"])
        if self.size + n > len(self.data["reward"]):
            raise ValueError(f"replay buffer full ({self.size} of {len(self.data['reward'])} transitions)")
        for name in self.FIELDS:
            self.data[name][self.size:self.size + n] = rows[name]
        self.size += n

    def sample(self, rng: np.random.Generator, batch: int, limit: int | None = None) -> dict[str, torch.Tensor]:
        """Return ``batch`` transitions drawn from the first ``limit`` (default: all) as tensors."""
        idx = rng.integers(0, limit or self.size, batch)
        return {name: torch.from_numpy(self.data[name][idx]) for name in self.FIELDS}


class _Arms:
    """The simulated arms, their current observations, cloned features and potentials."""

    def __init__(self, cfg: ResidualRLConfig, net: CodaPolicyNet, embedder: Any, rng: np.random.Generator) -> None:
        from coda_engine.sim.env import CodaSimEnv
        from coda_engine.sim.scene import SceneParams

        self.cfg, self.net, self.embedder, self.rng = cfg, net, embedder, rng
        self.envs = [CodaSimEnv(cfg.family, SceneParams(split=cfg.split), program=cfg.program or None)
                     for _ in range(cfg.n_envs)]
        self.obs = np.zeros((cfg.n_envs, self.envs[0].observation_space.shape[0]), dtype=np.float32)
        self.instr = np.zeros((cfg.n_envs, net.cfg.instruction_dim), dtype=np.float32)
        self.phi = np.zeros(cfg.n_envs, dtype=np.float32)
        self.finished: list[float] = []
        for i in range(cfg.n_envs):
            self.reset(i)

    def reset(self, i: int) -> None:
        cfg = self.cfg
        late = cfg.start_stage > 0 and self.rng.random() < cfg.start_stage_share
        obs, info = self.envs[i].reset(seed=int(self.rng.integers(0, 2**31 - 1)),
                                       options={"start_stage": cfg.start_stage} if late else None)
        self.obs[i], self.phi[i] = obs, info["phi"]
        self.instr[i] = self.embedder.embed_one(info["instruction"])

    @torch.no_grad()
    def cloned(self, obs: np.ndarray, instr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Frozen features and cloned actions of these observations."""
        feat, base = self.net.base_action(torch.from_numpy(obs), torch.from_numpy(instr))
        return feat.numpy(), base.numpy()


def _soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            t.mul_(1.0 - tau).add_(o, alpha=tau)


def train_residual(cfg: ResidualRLConfig, embedder: Any | None = None) -> ResidualRLResult:
    """Train a residual head on the frozen cloned policy as configured; see the module docstring."""
    import copy

    start = time.time()
    torch.set_num_threads(cfg.num_threads)
    if embedder is None:
        from coda_policy.serving import embedder as shared_embedder

        embedder = shared_embedder()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng([cfg.seed, 7])
    net, _ = load_policy(cfg.init_from)
    eval_rng = [cfg.seed, 99]  # the same scenes before and after
    init_success = (success_rates(net, (cfg.family,), cfg.eval_episodes, np.random.default_rng(eval_rng), cfg.split,
                                  embedder)[cfg.family] if cfg.eval_episodes else None)
    for p in net.parameters():
        p.requires_grad_(False)  # the cloned policy stays as it is; only the residual head learns
    if net.residual is None:  # a policy cloned after an earlier residual RL keeps its head and trains it on
        net.add_residual(cfg.residual_hidden, cfg.residual_scale)
    assert net.residual is not None
    for p in net.residual.parameters():
        p.requires_grad_(True)
    scale = net.cfg.residual_scale
    net.eval()
    arms = _Arms(cfg, net, embedder, rng)
    feat_dim = net.actor[0].in_features
    action_dim = net.cfg.action_dim
    critic = Critic(feat_dim, action_dim, cfg.critic_hidden)
    critic_target = copy.deepcopy(critic)
    residual_target = copy.deepcopy(net.residual)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=cfg.lr)
    residual_opt = torch.optim.Adam(net.residual.parameters(), lr=cfg.lr)
    buffer = ReplayBuffer(cfg.total_env_steps + cfg.n_envs, feat_dim, action_dim)

    def act(feat: torch.Tensor, base: torch.Tensor, head: nn.Module) -> torch.Tensor:
        return (base + scale * torch.tanh(head(torch.cat([feat, base], dim=-1)))).clamp(-1.0, 1.0)

    warmup_losses: list[float] = []
    env_steps, updates, budget = 0, 0, 0.0
    feat, base = arms.cloned(arms.obs, arms.instr)
    episodes: list[float] = []
    while env_steps < cfg.total_env_steps:
        with torch.no_grad():
            action = act(torch.from_numpy(feat), torch.from_numpy(base), net.residual).numpy()
        action = np.clip(action + rng.normal(0.0, cfg.explore_std, action.shape).astype(np.float32), -1.0, 1.0)
        reward = np.zeros(cfg.n_envs, dtype=np.float32)
        terminated = np.zeros(cfg.n_envs, dtype=np.float32)
        next_phi = np.zeros(cfg.n_envs, dtype=np.float32)
        next_obs = arms.obs.copy()
        done = []
        for i, env in enumerate(arms.envs):
            obs, r, term, trunc, info = env.step(action[i])
            reward[i], terminated[i], next_phi[i], next_obs[i] = r, term, info["phi"], obs
            if term or trunc:
                done.append(i)
                episodes.append(float(term))
        next_feat, next_base = arms.cloned(next_obs, arms.instr)
        buffer.add(feat=feat, base=base, action=action, reward=reward, terminated=terminated, phi=arms.phi,
                   next_feat=next_feat, next_base=next_base, next_phi=next_phi)
        arms.obs, arms.phi, feat, base = next_obs, next_phi, next_feat, next_base
        for i in done:
            arms.reset(i)
        if done:
            feat[done], base[done] = arms.cloned(arms.obs[done], arms.instr[done])
        env_steps += cfg.n_envs
        if env_steps < cfg.learning_starts:
            continue
        if not warmup_losses and cfg.value_init and cfg.value_warmup_updates:
            for _ in range(cfg.value_warmup_updates):  # staged value learning: the potential as the first values
                b = buffer.sample(rng, cfg.batch_size)
                target = torch.zeros_like(b["phi"]) if cfg.shaping else b["phi"]
                q1, q2 = critic(b["feat"], b["action"])
                loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
                critic_opt.zero_grad()
                loss.backward()
                critic_opt.step()
                warmup_losses.append(float(loss) / 2)
            critic_target.load_state_dict(critic.state_dict())
        budget += cfg.updates_per_step * cfg.n_envs
        while budget >= 1.0:
            budget -= 1.0
            b = buffer.sample(rng, cfg.batch_size)
            r = b["reward"]
            if cfg.shaping:
                r = r + cfg.gamma * b["next_phi"] * (1.0 - b["terminated"]) - b["phi"]
            with torch.no_grad():
                noise = (torch.randn(b["action"].shape) * cfg.target_noise).clamp(-2 * cfg.target_noise,
                                                                                  2 * cfg.target_noise)
                next_action = (act(b["next_feat"], b["next_base"], residual_target) + noise).clamp(-1.0, 1.0)
                tq1, tq2 = critic_target(b["next_feat"], next_action)
                y = r + cfg.gamma * (1.0 - b["terminated"]) * torch.minimum(tq1, tq2)
            q1, q2 = critic(b["feat"], b["action"])
            loss = ((q1 - y) ** 2).mean() + ((q2 - y) ** 2).mean()
            critic_opt.zero_grad()
            loss.backward()
            critic_opt.step()
            updates += 1
            if updates % cfg.policy_delay == 0:
                correction = act(b["feat"], b["base"], net.residual) - b["base"]
                q, _ = critic(b["feat"], b["base"] + correction)
                actor_loss = -q.mean() + cfg.residual_penalty * correction.pow(2).sum(-1).mean()
                residual_opt.zero_grad()
                actor_loss.backward()
                residual_opt.step()
                _soft_update(residual_target, net.residual, cfg.tau)
            _soft_update(critic_target, critic, cfg.tau)
    final_success = (success_rates(net, (cfg.family,), cfg.eval_episodes, np.random.default_rng(eval_rng), cfg.split,
                                   embedder)[cfg.family] if cfg.eval_episodes else None)
    folder = cfg.output_dir / cfg.version_id
    meta = {"trainer": "residual_rl", "residual_rl": cfg.to_dict(), "env_steps": env_steps, "updates": updates,
            "parent": cfg.init_from, "eval_success": final_success, "eval_success_init": init_success}
    save_checkpoint(folder, net, cfg.version_id, meta)
    tail = episodes[-max(1, len(episodes) // 4):] if episodes else []
    return ResidualRLResult(
        folder=folder, env_steps=env_steps, updates=updates, episodes=len(episodes),
        success_rate_collecting=float(np.mean(tail)) if tail else 0.0, eval_success_init=init_success,
        eval_success=final_success,
        warmup_value_loss=(warmup_losses[0], warmup_losses[-1]) if warmup_losses else None,
        seconds=time.time() - start)
