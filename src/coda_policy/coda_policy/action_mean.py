# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The policy network's action mean for one observation, outside torch, checked against the network.

- :class:`NumpyActionMean` (built and checked by :func:`numpy_action_mean`): the network's action mean for one
  instruction in NumPy (instruction branch computed once, value heads left out): a few dozen small array
  operations instead of ~100 dispatched torch operators per observation. It is also the readable reference of
  ``coda_core_cpp.ObjectTokenActor``, the same arithmetic in C++ (one call per observation), built from its
  :meth:`~NumpyActionMean.spec`.
- :func:`compiled_action_mean`: the fastest of them that passes :func:`check_action_mean` (C++, else NumPy), as the
  ``policy`` node's controller (:mod:`coda_policy.control`) and ``coda bench control`` use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from coda_policy.model import CodaPolicyNet


class NumpyActionMean:
    """``obs -> tanh(actor(features(obs, embedding)))`` of a :class:`CodaPolicyNet` in NumPy, for one observation.

    The same arithmetic as the network's eval-mode forward (float32), with the instruction branch computed once
    and the value heads left out; per call it runs a few dozen small NumPy operations instead of the ~100
    dispatched torch operators of the traced graph, which is what a single observation through this small network
    costs. Built by :func:`numpy_action_mean` (which checks it against the network); ``net`` must not be changed
    afterwards (the weights are copied, but the result would no longer match the version).
    """

    def __init__(self, net: CodaPolicyNet, embedding: torch.Tensor) -> None:
        """Copy the weights; NotImplementedError for a layer this forward does not reproduce."""
        from scipy.special import erf

        cfg, ix = net.cfg, net.index
        self._erf = erf
        for layer in net.self_attn:
            if layer.activation is not torch.nn.functional.relu or not layer.norm_first:
                raise NotImplementedError("self-attention layers other than pre-norm ReLU")
        for mha in [net.cross_attn] + [layer.self_attn for layer in net.self_attn]:
            if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
                raise NotImplementedError("attention with separate key/value sizes, key/value bias or zero attention")

        def f32(t: torch.Tensor) -> np.ndarray:
            return np.ascontiguousarray(t.detach().cpu().numpy(), dtype=np.float32)

        def linear(m: torch.nn.Linear) -> tuple[np.ndarray, np.ndarray]:
            return f32(m.weight.T), f32(m.bias) if m.bias is not None else np.zeros(m.out_features, np.float32)

        with torch.no_grad():
            lang = net.instr_proj(embedding)
            gamma, beta = net.film(lang).chunk(2, dim=-1)
            self.lang, self.scale, self.beta = f32(lang[0]), f32(1.0 + gamma[0]), f32(beta[0])
            self.query_base = f32(net.queries + lang)
        self.heads, self.d, self.obs_dim = cfg.num_heads, cfg.d_model, cfg.obs_dim
        self.num_shapes, self.max_stages = cfg.num_shapes, cfg.max_stages
        self.shape_eye = np.eye(cfg.num_shapes, dtype=np.float32)
        self.stage_eye = np.eye(cfg.max_stages + 1, dtype=np.float32)
        self.pos_ix, self.rgb_ix, self.size_ix = ix.pos.numpy(), ix.rgb.numpy(), ix.size.numpy()
        self.shape_ix, self.present_ix, self.proprio_ix = ix.shape.numpy(), ix.present.numpy(), ix.proprio.numpy()
        ee = ix.ee_pos.tolist()
        self.ee = slice(ee[0], ee[-1] + 1)
        self.stage_col = ix.stage
        self.token1, self.token2 = linear(net.token_mlp[0]), linear(net.token_mlp[2])
        self.layers = [
            (
                (f32(layer.norm1.weight), f32(layer.norm1.bias), layer.norm1.eps),
                (f32(layer.self_attn.in_proj_weight.T), f32(layer.self_attn.in_proj_bias)),
                linear(layer.self_attn.out_proj),
                (f32(layer.norm2.weight), f32(layer.norm2.bias), layer.norm2.eps),
                linear(layer.linear1),
                linear(layer.linear2),
            )
            for layer in net.self_attn
        ]
        self.proprio = linear(net.proprio_proj)
        w_in, b_in = f32(net.cross_attn.in_proj_weight.T), f32(net.cross_attn.in_proj_bias)
        d = self.d
        self.cross_q, self.cross_kv = (w_in[:, :d], b_in[:d]), (np.ascontiguousarray(w_in[:, d:]), b_in[d:])
        self.cross_out = linear(net.cross_attn.out_proj)
        self.actor = [linear(net.actor[i]) for i in (0, 2, 4)]

    def spec(self) -> dict[str, Any]:
        """Return the sizes, observation columns and weights as the spec of ``coda_core_cpp.ObjectTokenActor``."""
        def columns(ix: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(ix, dtype=np.int32).ravel()

        return {
            "obs_dim": int(self.obs_dim), "d_model": self.d, "num_heads": self.heads,
            "num_shapes": self.num_shapes, "max_stages": self.max_stages,
            "pos_ix": columns(self.pos_ix), "rgb_ix": columns(self.rgb_ix), "size_ix": columns(self.size_ix),
            "shape_ix": columns(self.shape_ix), "present_ix": columns(self.present_ix),
            "ee_ix": columns(np.arange(self.ee.start, self.ee.stop)), "proprio_ix": columns(self.proprio_ix),
            "stage_col": int(self.stage_col),
            "token1": self.token1, "token2": self.token2, "film_scale": self.scale, "film_shift": self.beta,
            "blocks": [
                {"norm1": norm1, "qkv": qkv, "attn_out": out, "norm2": norm2, "ff1": ff1, "ff2": ff2}
                for norm1, qkv, out, norm2, ff1, ff2 in self.layers
            ],
            "lang": self.lang, "query_base": self.query_base, "proprio": self.proprio,
            "cross_q": self.cross_q, "cross_kv": self.cross_kv, "cross_out": self.cross_out, "head": self.actor,
        }

    def _gelu(self, x: np.ndarray) -> np.ndarray:
        return 0.5 * x * (1.0 + self._erf(x * np.float32(0.7071067811865476)))

    @staticmethod
    def _norm(x: np.ndarray, params: tuple[np.ndarray, np.ndarray, float]) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        centred = x - mean
        var = (centred * centred).mean(-1, keepdims=True)
        return centred / np.sqrt(var + np.float32(params[2])) * params[0] + params[1]

    def _attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Multi-head attention of projected (L, d) queries over (S, d) keys/values; (L, d) and (H, L, S) weights."""
        h, hd = self.heads, self.d // self.heads
        qh = q.reshape(-1, h, hd).transpose(1, 0, 2)
        kh = k.reshape(-1, h, hd).transpose(1, 2, 0)
        vh = v.reshape(-1, h, hd).transpose(1, 0, 2)
        scores = (qh @ kh) * np.float32(hd**-0.5) + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        weights = scores / scores.sum(-1, keepdims=True)
        return (weights @ vh).transpose(1, 0, 2).reshape(-1, self.d), weights

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Return the (action_dim,) action mean in [-1, 1] of a finite (obs_dim,) float32 observation."""
        o = obs
        pos = o[self.pos_ix]
        rel = pos - o[self.ee]
        shape = self.shape_eye[np.clip(np.rint(o[self.shape_ix]), 0, self.num_shapes - 1).astype(np.intp)]
        tokens = np.concatenate([pos, rel, o[self.rgb_ix], shape, o[self.size_ix]], axis=1)
        mask = np.where(o[self.present_ix] < 0.5, np.float32(-np.inf), np.float32(0.0))
        (w1, b1), (w2, b2) = self.token1, self.token2
        tokens = (self._gelu(tokens @ w1 + b1) @ w2 + b2) * self.scale + self.beta
        for norm1, (w_in, b_in), (w_out, b_out), norm2, (wa, ba), (wb, bb) in self.layers:
            qkv = self._norm(tokens, norm1) @ w_in + b_in
            attn, _ = self._attend(qkv[:, :self.d], qkv[:, self.d:2 * self.d], qkv[:, 2 * self.d:], mask)
            tokens = tokens + (attn @ w_out + b_out)
            hidden = np.maximum(self._norm(tokens, norm2) @ wa + ba, np.float32(0.0))
            tokens = tokens + (hidden @ wb + bb)
        stage = self.stage_eye[int(np.clip(np.rint(o[self.stage_col]), 0, self.max_stages))]
        proprio = np.concatenate([o[self.proprio_ix], stage])
        query = self.query_base + (proprio @ self.proprio[0] + self.proprio[1])
        q = query @ self.cross_q[0] + self.cross_q[1]
        kv = tokens @ self.cross_kv[0] + self.cross_kv[1]
        pooled, weights = self._attend(q, kv[:, :self.d], kv[:, self.d:], mask)
        pooled = pooled @ self.cross_out[0] + self.cross_out[1]
        w = weights.mean(0)
        pointer = np.concatenate([w @ rel, w @ pos], axis=1)
        x = np.concatenate([self.lang, proprio, pooled.ravel(), pointer.ravel()])
        (a0, c0), (a1, c1), (a2, c2) = self.actor
        x = self._gelu(x @ a0 + c0)
        x = self._gelu(x @ a1 + c1)
        return np.tanh(x @ a2 + c2)


def check_action_mean(fn: Callable[[np.ndarray], np.ndarray], net: CodaPolicyNet, embedding: torch.Tensor,
                      checks: int = 8, name: str = "action mean") -> None:
    """Compare ``fn`` with the eager network on ``checks`` random observations; RuntimeError on any difference.

    The observations have 1 to ``max_objects`` objects and every stage index (plus one past the last).
    """
    cfg = net.cfg
    rng = np.random.default_rng(0)
    present_cols = [cfg.layout[f"obj{k}_present"][0] for k in range(cfg.max_objects)]
    stage_col = cfg.layout["stage_index"][0]
    for i in range(checks):
        obs = rng.uniform(-1.0, 1.0, cfg.obs_dim).astype(np.float32)
        obs[present_cols] = np.arange(cfg.max_objects) < 1 + i % cfg.max_objects
        obs[stage_col] = i % (cfg.max_stages + 2)
        with torch.no_grad():
            expected = net(torch.from_numpy(obs)[None], embedding)[0][0].numpy()
        got = np.asarray(fn(obs))
        if got.shape != expected.shape or not np.allclose(got, expected, atol=1e-5, rtol=1e-4):
            gap = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
            raise RuntimeError(f"{name} differs from the network by {gap}")


def numpy_action_mean(net: CodaPolicyNet, embedding: torch.Tensor, checks: int = 8) -> NumpyActionMean:
    """Return the :class:`NumpyActionMean` of ``net`` for one instruction, checked against the eager network.

    RuntimeError when the check of :func:`check_action_mean` fails; ValueError for an embedding of the wrong
    shape; NotImplementedError or ImportError when this network cannot be run in NumPy here.
    """
    cfg = net.cfg
    if embedding.shape != (1, cfg.instruction_dim):
        raise ValueError(f"embedding shape {tuple(embedding.shape)} != (1, {cfg.instruction_dim})")
    fn = NumpyActionMean(net, embedding)
    check_action_mean(fn, net, embedding, checks, "NumPy action mean")
    return fn


def action_means(net: CodaPolicyNet, embedding: torch.Tensor,
                 checks: int = 8) -> tuple[NumpyActionMean, Callable[[np.ndarray], np.ndarray] | None, str]:
    """Return the checked NumPy action mean of ``net`` for one instruction, the checked C++ one and a note.

    The C++ one (``coda_core_cpp.ObjectTokenActor``, built from the NumPy one's :meth:`~NumpyActionMean.spec`) is
    None when it cannot be built or fails its check, and the note says why (empty otherwise). Errors as
    :func:`numpy_action_mean`.
    """
    reference = numpy_action_mean(net, embedding, checks)
    try:
        from coda_core_cpp import ObjectTokenActor

        actor = ObjectTokenActor(reference.spec())
        check_action_mean(actor, net, embedding, checks, "C++ action mean")
    except (ImportError, ValueError, RuntimeError) as exc:
        return reference, None, f"{type(exc).__name__}: {exc}"
    return reference, actor, ""


def compiled_action_mean(net: CodaPolicyNet, embedding: torch.Tensor,
                         checks: int = 8) -> tuple[Callable[[np.ndarray], np.ndarray], str, str]:
    """Return the fastest checked action mean of ``net`` for one instruction, its backend and a note.

    ``coda_core_cpp.ObjectTokenActor`` (backend ``"cpp"``, tens of microseconds per observation) built from the
    :class:`NumpyActionMean` (``"numpy"``), which is returned instead if the C++ one cannot be built or fails its
    check; the note then says why (empty otherwise). Errors as :func:`numpy_action_mean`.
    """
    reference, actor, note = action_means(net, embedding, checks)
    return (actor, "cpp", "") if actor is not None else (reference, "numpy", note)
