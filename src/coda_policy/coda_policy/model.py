# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The language-conditioned actor-critic network and the policy object around it.

:class:`CodaPolicyNet` (the bare ``nn.Module``) reads the flat observation through its layout: each present
object slot becomes a token (position, position relative to the end effector, colour, shape one-hot, size),
modulated by the instruction (FiLM), related to the others by self-attention without any slot-position
encoding, and pooled by instruction-conditioned queries through masked cross-attention. Nothing depends on
which slot holds which object, so permuting slots leaves the output unchanged; the instruction decides which
object the queries attend to. Besides the pooled features, each query contributes the attention-weighted
object position relative to the end effector (a differentiable "pointer" to the grounded object).

Heads: a tanh-bounded action mean (dx, dy, dz normalised to [-1, 1], gripper in [-1, 1]), a state-independent
log standard deviation for exploration, and one value per stage of the active potential program.

:class:`CodaPolicy` is the small surface used by training and serving: ``reset``, ``select_action``,
``forward(batch) -> (loss, info)`` (behaviour cloning).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from coda_policy.config import PolicyConfig

LOG_2PI = math.log(2.0 * math.pi)


class _ObsIndex:
    """Index tensors that cut the flat observation into proprioception, object slots and the stage."""

    def __init__(self, cfg: PolicyConfig) -> None:
        lay = cfg.layout

        def cols(name: str) -> list[int]:
            offset, length = lay[name]
            return list(range(offset, offset + length))

        self.proprio = torch.tensor(cols("ee_pos") + cols("ee_vel") + cols("gripper"))
        self.ee_pos = torch.tensor(cols("ee_pos"))
        slot = {name: torch.tensor([cols(f"obj{i}_{name}") for i in range(cfg.max_objects)])
                for name in ("pos", "rgb", "shape", "size", "present")}
        self.pos, self.rgb, self.size = slot["pos"], slot["rgb"], slot["size"]
        self.shape, self.present = slot["shape"][:, 0], slot["present"][:, 0]
        self.stage = lay["stage_index"][0]


class CodaPolicyNet(nn.Module):
    """Actor-critic over object tokens grounded by the instruction; see the module docstring."""

    def __init__(self, cfg: PolicyConfig) -> None:
        """Build the layers for ``cfg``."""
        super().__init__()
        self.cfg = cfg
        self.index = _ObsIndex(cfg)
        d = cfg.d_model
        token_in = 3 + 3 + 3 + cfg.num_shapes + 3
        self.token_mlp = nn.Sequential(nn.Linear(token_in, d), nn.GELU(), nn.Linear(d, d))
        self.instr_proj = nn.Sequential(nn.Linear(cfg.instruction_dim, d), nn.GELU(), nn.Linear(d, d))
        self.film = nn.Linear(d, 2 * d)
        self.self_attn = nn.ModuleList(
            nn.TransformerEncoderLayer(d, cfg.num_heads, dim_feedforward=2 * d, dropout=0.0, batch_first=True,
                                       norm_first=True)
            for _ in range(cfg.self_attention_layers))
        self.queries = nn.Parameter(torch.randn(cfg.num_queries, d) * 0.1)
        self.proprio_proj = nn.Linear(7 + cfg.max_stages + 1, d)
        self.cross_attn = nn.MultiheadAttention(d, cfg.num_heads, batch_first=True)
        feat = d + 7 + cfg.max_stages + 1 + cfg.num_queries * (d + 6)
        h = cfg.hidden_dim
        self.actor = nn.Sequential(nn.Linear(feat, h), nn.GELU(), nn.Linear(h, h), nn.GELU(),
                                   nn.Linear(h, cfg.action_dim))
        self.critic = nn.Sequential(nn.Linear(feat, h), nn.GELU(), nn.Linear(h, h), nn.GELU(),
                                    nn.Linear(h, cfg.num_stages))
        self.log_std = nn.Parameter(torch.full((cfg.action_dim,), float(cfg.init_log_std)))
        self.residual: nn.Sequential | None = None
        if cfg.residual_hidden:
            self.add_residual(cfg.residual_hidden, cfg.residual_scale)

    def add_residual(self, hidden: int, scale: float) -> None:
        """Add the residual action head (:attr:`PolicyConfig.residual_hidden`), which starts at zero.

        It reads the actor's features and the cloned actor's action; its output, ``scale * tanh(.)``, is added to
        that action. Its last layer starts at zero, so the network acts exactly as before until RL trains it.
        """
        r = hidden
        feat = self.actor[0].in_features
        self.residual = nn.Sequential(nn.Linear(feat + self.cfg.action_dim, r), nn.GELU(), nn.Linear(r, r), nn.GELU(),
                                      nn.Linear(r, self.cfg.action_dim))
        with torch.no_grad():
            self.residual[-1].weight.zero_()
            self.residual[-1].bias.zero_()
        # a copy: the config object may be shared with other networks built from it
        self.cfg = dataclasses.replace(self.cfg, residual_hidden=hidden, residual_scale=scale)

    def stage_of(self, obs: torch.Tensor) -> torch.Tensor:
        """Stage index (B,) int64 read from the observation, clipped to ``[0, max_stages]``."""
        return obs[:, self.index.stage].round().long().clamp(0, self.cfg.max_stages)

    def features(self, obs: torch.Tensor, instr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Shared features (B, F) and the queries' attention over slots (B, num_queries, max_objects)."""
        ix, cfg = self.index, self.cfg
        ee = obs[:, ix.ee_pos]
        pos = obs[:, ix.pos]  # (B, N, 3)
        rel = pos - ee[:, None, :]
        shape = nn.functional.one_hot(obs[:, ix.shape].round().long().clamp(0, cfg.num_shapes - 1),
                                      cfg.num_shapes).to(obs.dtype)
        tokens_in = torch.cat([pos, rel, obs[:, ix.rgb], shape, obs[:, ix.size]], dim=-1)
        absent = obs[:, ix.present] < 0.5  # (B, N) True where the slot is empty
        lang = self.instr_proj(instr)
        gamma, beta = self.film(lang).chunk(2, dim=-1)
        tokens = self.token_mlp(tokens_in) * (1.0 + gamma[:, None, :]) + beta[:, None, :]
        for layer in self.self_attn:
            tokens = layer(tokens, src_key_padding_mask=absent)
        stage = nn.functional.one_hot(self.stage_of(obs), cfg.max_stages + 1).to(obs.dtype)
        proprio = torch.cat([obs[:, ix.proprio], stage], dim=-1)
        query = self.queries[None] + (lang + self.proprio_proj(proprio))[:, None, :]
        pooled, weights = self.cross_attn(query, tokens, tokens, key_padding_mask=absent, need_weights=True)
        pointer = torch.cat([weights @ rel, weights @ pos], dim=-1)  # (B, Q, 6)
        feat = torch.cat([lang, proprio, pooled.flatten(1), pointer.flatten(1)], dim=-1)
        return feat, weights

    def forward(self, obs: torch.Tensor, instr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the action mean (B, action_dim) in [-1, 1] and per-stage values (B, num_stages)."""
        feat, _ = self.features(obs, instr)
        mean = torch.tanh(self.actor(feat))
        if self.residual is not None:
            mean = self.with_residual(feat, mean)
        return mean, self.critic(feat)

    def with_residual(self, feat: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """Return ``base`` (B, action_dim) corrected by the residual head, clipped to [-1, 1]."""
        assert self.residual is not None
        correction = self.cfg.residual_scale * torch.tanh(self.residual(torch.cat([feat, base], dim=-1)))
        return (base + correction).clamp(-1.0, 1.0)

    def base_action(self, obs: torch.Tensor, instr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the features (B, F) and the cloned actor's action (B, action_dim), without the residual."""
        feat, _ = self.features(obs, instr)
        return feat, torch.tanh(self.actor(feat))

    def value_heads(self, stages: torch.Tensor) -> torch.Tensor:
        """Value head (B,) int64 of each stage index of the active program; past the last stage, the last head.

        The stage comes from the program whose potential shapes the reward (the environment's ``info["stage"]``),
        not from the observation, whose stage index always follows the family's default program.
        """
        return stages.long().clamp(0, self.cfg.num_stages - 1)

    @staticmethod
    def head_value(values: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """Pick each row's value (B,) from ``values`` (B, num_stages) at its head (:meth:`value_heads`)."""
        return values.gather(1, heads[:, None])[:, 0]

    def set_num_stages(self, num_stages: int) -> None:
        """Give the critic one value head per stage of a program with ``num_stages`` stages.

        Heads present before keep their weights; new heads start as copies of the last existing one.
        """
        if not 1 <= num_stages <= self.cfg.max_stages:
            raise ValueError(f"num_stages={num_stages} must be in [1, max_stages={self.cfg.max_stages}]")
        old = self.critic[-1]
        assert isinstance(old, nn.Linear)
        new = nn.Linear(old.in_features, num_stages)
        with torch.no_grad():
            rows = torch.arange(num_stages).clamp(max=old.out_features - 1)
            new.weight.copy_(old.weight[rows])
            new.bias.copy_(old.bias[rows])
        self.critic[-1] = new
        self.cfg.num_stages = num_stages

    def log_prob(self, mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Diagonal Gaussian log density of ``actions`` (B, A) around ``mean`` with the learnt std."""
        log_std = self.log_std.expand_as(mean)
        z = (actions - mean) / log_std.exp()
        return (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        """Entropy of the Gaussian action noise (a scalar: it does not depend on the state)."""
        return (self.log_std + 0.5 * (1.0 + LOG_2PI)).sum()


def action_targets(actions_m: np.ndarray, max_delta: float) -> np.ndarray:
    """Expert actions ``(dx, dy, dz) m, gripper`` -> the network's normalised targets in [-1, 1]."""
    out = np.asarray(actions_m, dtype=np.float32).copy()
    out[..., :3] /= max_delta
    return np.clip(out, -1.0, 1.0)


def to_metres(action: np.ndarray, max_delta: float) -> np.ndarray:
    """Normalised action -> ``(dx, dy, dz)`` m and gripper, clipped to the bounds."""
    out = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0).copy()
    out[..., :3] *= max_delta
    return out


class CodaPolicy:
    """The policy surface: ``reset``, ``select_action``, ``forward(batch) -> (loss, info)``.

    ``select_action`` needs the instruction embedding of the episode, given to :meth:`reset` (an embedding
    vector, so this class never loads the text model itself).
    """

    def __init__(self, net: CodaPolicyNet) -> None:
        """Wrap ``net``."""
        self.net = net
        self.cfg = net.cfg
        self._instr: torch.Tensor | None = None

    def reset(self, instruction_embedding: np.ndarray) -> None:
        """Start an episode whose instruction has this embedding (instruction_dim,) or (N, instruction_dim)."""
        emb = np.asarray(instruction_embedding, dtype=np.float32)
        if emb.shape[-1] != self.cfg.instruction_dim:
            raise ValueError(f"instruction embedding has length {emb.shape[-1]}, expected {self.cfg.instruction_dim}")
        self._instr = torch.from_numpy(emb.reshape(-1, self.cfg.instruction_dim).copy())

    @torch.no_grad()
    def select_action(self, obs: np.ndarray, generator: torch.Generator | None = None) -> np.ndarray:
        """Action(s) for observation(s) (obs_dim,) or (N, obs_dim): the mean, or a sample with ``generator``.

        Returns normalised actions in [-1, 1] with the same leading shape as ``obs``.
        """
        if self._instr is None:
            raise RuntimeError("call reset(instruction_embedding) before select_action")
        x = torch.from_numpy(np.asarray(obs, dtype=np.float32).reshape(-1, self.cfg.obs_dim))
        instr = self._instr.expand(x.shape[0], -1) if self._instr.shape[0] == 1 else self._instr
        mean, _ = self.net(x, instr)
        if generator is not None:
            noise = torch.randn(mean.shape, generator=generator)
            mean = (mean + noise * self.net.log_std.exp()).clamp(-1.0, 1.0)
        out = mean.numpy()
        return out[0] if np.ndim(obs) == 1 else out

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Behaviour-cloning loss on ``batch`` (``obs``, ``instr``, ``action`` normalised); info has the parts.

        The loss is the mean squared error of the action mean, with the gripper term weighted like one axis.
        """
        mean, _ = self.net(batch["obs"], batch["instr"])
        err = (mean - batch["action"]).pow(2)
        loss = err.mean()
        return loss, {"bc_loss": float(loss.detach()), "mse_xyz": float(err[:, :3].mean().detach()),
                      "mse_gripper": float(err[:, 3].mean().detach())}

    def parameters_count(self) -> int:
        """Return the number of trainable parameters."""
        return sum(p.numel() for p in self.net.parameters() if p.requires_grad)

    def state(self) -> dict[str, Any]:
        """Short description for logs."""
        return {"parameters": self.parameters_count(), "num_stages": self.cfg.num_stages}
