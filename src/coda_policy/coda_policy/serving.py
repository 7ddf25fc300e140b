# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Running a trained policy version: ``load_action_fn(folder, scene)`` for the engine's workers and bridges.

setup.py registers it as the engine's policy loader (entry-point group ``coda_engine.policy_loaders``), so the
engine runs trained versions without importing this package (:mod:`coda_engine.policies`).

A version folder is ``<checkpoint_root>/<version_id>/`` (see :mod:`coda_policy.checkpoint`). Loaded networks
are cached per folder (and reloaded when its weights file changes); the instruction is embedded once per
string by the process-wide :class:`coda_engine.text_embedding.TextEmbedder`. The returned action function
has the engine's ``ActionFn`` signature: ``act(obs, world_state) -> (dx, dy, dz, gripper)`` with metres
bounded by the checkpoint's ``max_delta`` and the gripper in [-1, 1]; it reads only ``obs``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda_policy.checkpoint import MODEL_FILE, check_control_hz, load_policy
from coda_policy.model import CodaPolicyNet, to_metres

ActionFn = Callable[[np.ndarray, Any], np.ndarray]
"""(observation, privileged state) -> (dx, dy, dz, gripper); the state is ignored by trained policies."""

SERVING_THREADS = 1
"""torch threads of the instruction embedding and the action mean wherever a version runs an episode (a loop's
local worker, a ``sim_bridge``, an ``arm_bridge``): at another thread count the embedding differs in its last
bits, the episode drifts, and the same version would act differently on a remote worker than on a local one."""

_LOCK = threading.Lock()
_NETS: dict[Path, tuple[float, CodaPolicyNet, dict[str, Any]]] = {}
_EMBEDDER: Any = None


def embedder() -> Any:
    """Return the process-wide text embedder (MiniLM, cached per string), created on first use.

    It encodes every string alone (``batch_size=1``): a string's vector then never depends on which strings this
    process encoded before, so a run gives the same numbers whether it was resumed or shared its process.
    """
    global _EMBEDDER
    with _LOCK:
        if _EMBEDDER is None:
            from coda_engine.text_embedding import TextEmbedder

            _EMBEDDER = TextEmbedder(batch_size=1)
    return _EMBEDDER


def cached_policy(folder: Path, control_hz: float | None = None) -> CodaPolicyNet:
    """Return the network of ``folder``, loaded once and reloaded when its weights file's mtime changes.

    ``control_hz``: the caller's arm rate, checked against the rate the version was trained at (ValueError).
    """
    folder = Path(folder).resolve()
    mtime = (folder / MODEL_FILE).stat().st_mtime
    with _LOCK:
        hit = _NETS.get(folder)
        if hit is None or hit[0] != mtime:
            net, config = load_policy(folder)
            _NETS[folder] = (mtime, net, config)
            hit = _NETS[folder]
    if control_hz is not None:
        check_control_hz(hit[2], control_hz)
    return hit[1]


def make_action_fn(net: CodaPolicyNet, instruction_embedding: np.ndarray) -> ActionFn:
    """Deterministic action function (the action mean) of ``net`` for one instruction embedding."""
    instr = torch.from_numpy(np.asarray(instruction_embedding, dtype=np.float32).reshape(1, -1).copy())
    max_delta = net.cfg.max_delta
    dim = net.cfg.obs_dim

    def act(obs: np.ndarray, state: Any = None) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(1, -1)
        if x.shape[1] != dim:
            raise ValueError(f"observation has length {x.shape[1]}, the policy expects {dim}")
        with torch.inference_mode():
            mean, _ = net(torch.from_numpy(x), instr)
        return to_metres(mean[0].numpy(), max_delta)

    return act


def load_action_fn(folder: Path, scene: Any, control_hz: float | None = None) -> ActionFn:
    """Return an action function of the policy version in ``folder`` for one episode of ``scene`` (its instruction).

    ``control_hz``: the rate the caller's arm runs at; a version trained at another rate is refused (ValueError).
    The process computes with ``SERVING_THREADS`` torch threads from here on.
    """
    if torch.get_num_threads() != SERVING_THREADS:
        torch.set_num_threads(SERVING_THREADS)
    net = cached_policy(Path(folder), control_hz)
    embedding = embedder().embed_one(str(scene.instruction))
    return make_action_fn(net, embedding)
