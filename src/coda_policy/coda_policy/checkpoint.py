# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Checkpoints: ``<root>/<version_id>/model.safetensors`` + ``config.json``; loadable without any trainer.

``config.json`` holds ``format``, ``version_id``, ``policy`` (the :class:`PolicyConfig` as a dict) and
``meta`` (free-form facts: how it was trained, metrics, the parent version). Optional training state
(optimiser, step counters) goes to ``trainer_state.pt`` beside them and is ignored by :func:`load_policy`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from coda_policy.config import PolicyConfig
from coda_policy.model import CodaPolicyNet

FORMAT = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TRAINER_FILE = "trainer_state.pt"


def make_version_id(prefix: str, payload: dict[str, Any]) -> str:
    """Deterministic version id ``<prefix>-<8 hex>`` from a JSON-able payload (e.g. a training config)."""
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{prefix}-{digest}"


def run_config_dict(config: Any, with_version: bool = True) -> dict[str, Any]:
    """Return a training run's config (SFTConfig, RLConfig) as a JSON-friendly dict.

    Without version id and output dir it is what the version id hashes.
    """
    data = asdict(config)
    data["policy"] = config.policy.to_dict()
    data["output_dir"] = str(config.output_dir)
    data.pop("progress")
    if not with_version:
        data.pop("version_id")
        data.pop("output_dir")
    return data


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def save_checkpoint(
    folder: Path | str,
    net: CodaPolicyNet,
    version_id: str,
    meta: dict[str, Any] | None = None,
    trainer_state: dict[str, Any] | None = None,
) -> Path:
    """Write ``net`` to ``folder`` (created); the weights file is replaced atomically. Returns ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().clone() for k, v in net.state_dict().items()}
    tmp = folder / (MODEL_FILE + ".tmp")
    save_file(tensors, str(tmp), metadata={"version_id": version_id, "format": str(FORMAT)})
    os.replace(tmp, folder / MODEL_FILE)
    config = {"format": FORMAT, "version_id": version_id, "policy": net.cfg.to_dict(), "meta": meta or {}}
    _atomic_write_text(folder / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True, default=str))
    if trainer_state is not None:
        torch.save(trainer_state, folder / (TRAINER_FILE + ".tmp"))
        os.replace(folder / (TRAINER_FILE + ".tmp"), folder / TRAINER_FILE)
    return folder


def read_config(folder: Path | str) -> dict[str, Any]:
    """Return the parsed ``config.json`` of a checkpoint; ValueError if it is missing or of another format."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"{path}: no checkpoint config")
    config = json.loads(path.read_text())
    if config.get("format") != FORMAT:
        raise ValueError(f"{path}: format {config.get('format')!r}, expected {FORMAT}")
    return config


def load_policy(folder: Path | str) -> tuple[CodaPolicyNet, dict[str, Any]]:
    """Rebuild the network of a checkpoint in eval mode; returns it and the parsed ``config.json``."""
    folder = Path(folder)
    config = read_config(folder)
    net = CodaPolicyNet(PolicyConfig.from_dict(config["policy"]))
    state = load_file(str(folder / MODEL_FILE))
    net.load_state_dict(state, strict=True)
    net.eval()
    return net, config


def load_trainer_state(folder: Path | str) -> dict[str, Any] | None:
    """Return the optional trainer state saved beside a checkpoint (None if there is none)."""
    path = Path(folder) / TRAINER_FILE
    return torch.load(path, weights_only=False) if path.is_file() else None
