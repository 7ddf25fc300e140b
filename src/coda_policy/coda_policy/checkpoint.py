# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Checkpoints: ``<root>/<version_id>/model.safetensors`` + ``config.json``; loadable without any trainer.

``config.json`` holds ``format``, ``version_id``, ``policy`` (the :class:`PolicyConfig` as a dict),
``control_hz`` (the control rate it was trained at: its observed velocities and its displacements are per tick,
so every node that runs it checks its own rate against this one, :func:`check_control_hz`) and ``meta``
(free-form facts: how it was trained, metrics, the parent version). Optional training state
(optimiser, step counters, random generator state) goes beside them as ``trainer_state.safetensors`` (its
tensors) + ``trainer_state.json`` (the rest of its structure) and is ignored by :func:`load_policy`.

Nothing here unpickles: a run folder may come from someone else, and a pickle executes code when loaded.
A ``trainer_state.pt`` (the pickle format of earlier versions) is refused with an error saying so.
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

from coda_engine.sim.arm import ArmConfig
from coda_policy.config import PolicyConfig
from coda_policy.model import CodaPolicyNet

FORMAT = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TRAINER_TENSORS = "trainer_state.safetensors"
TRAINER_JSON = "trainer_state.json"
LEGACY_TRAINER_FILE = "trainer_state.pt"
TRAINED_CONTROL_HZ = ArmConfig.control_hz
"""The simulator's control rate, Hz: every version is trained at it; a ``config.json`` without ``control_hz``
(written before the field existed) was trained at it too."""


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
    control_hz: float = TRAINED_CONTROL_HZ,
) -> Path:
    """Write ``net`` (trained at ``control_hz``) to ``folder`` (created); the weights file is replaced atomically.

    Returns ``folder``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().clone() for k, v in net.state_dict().items()}
    tmp = folder / (MODEL_FILE + ".tmp")
    # One metadata entry: safetensors writes the metadata map in no fixed order, and a version is named by its
    # file's sha256 (memory, worker caches, the policy node), so equal weights must give equal bytes.
    header = json.dumps({"format": FORMAT, "version_id": version_id}, sort_keys=True)
    save_file(tensors, str(tmp), metadata={"coda_checkpoint": header})
    os.replace(tmp, folder / MODEL_FILE)
    config = {"format": FORMAT, "version_id": version_id, "policy": net.cfg.to_dict(), "meta": meta or {},
              "control_hz": float(control_hz)}
    _atomic_write_text(folder / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True, default=str))
    if trainer_state is not None:
        save_trainer_state(folder, trainer_state)
    return folder


def _encode(value: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    """``value`` as JSON, its tensors moved to ``tensors`` (by their path in the structure)."""
    if isinstance(value, torch.Tensor):
        tensors[path] = value.detach().contiguous().clone()
        return {"tensor": path}
    if isinstance(value, dict):
        if not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in value):
            raise TypeError(f"trainer state at {path or '/'}: keys must be str or int")
        return {"dict": [[k, _encode(v, tensors, f"{path}/{k}")] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"tuple" if isinstance(value, tuple) else "list":
                [_encode(v, tensors, f"{path}/{i}") for i, v in enumerate(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"trainer state at {path or '/'}: {type(value).__name__} cannot be stored without pickle")


def _decode(node: Any, tensors: dict[str, torch.Tensor], where: Path) -> Any:
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError(f"{where}: malformed trainer state node {str(node)[:80]!r}")
    (kind, body), = node.items()
    if kind == "tensor":
        if body not in tensors:
            raise ValueError(f"{where}: tensor {body!r} is missing from {TRAINER_TENSORS}")
        return tensors[body]
    if kind == "dict" and isinstance(body, list):
        return {k: _decode(v, tensors, where) for k, v in body}
    if kind in ("list", "tuple") and isinstance(body, list):
        items = [_decode(v, tensors, where) for v in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "value" and (body is None or isinstance(body, (bool, int, float, str))):
        return body
    raise ValueError(f"{where}: malformed trainer state node of kind {kind!r}")


def save_trainer_state(folder: Path | str, state: dict[str, Any]) -> None:
    """Write ``state`` (nested dicts / lists / tuples of tensors, numbers, strings) without pickle."""
    folder = Path(folder)
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(state, tensors, "")
    tmp = folder / (TRAINER_TENSORS + ".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, folder / TRAINER_TENSORS)
    _atomic_write_text(folder / TRAINER_JSON, json.dumps({"format": FORMAT, "state": tree}))


def read_config(folder: Path | str) -> dict[str, Any]:
    """Return the parsed ``config.json`` of a checkpoint; ValueError if it is missing or of another format."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"{path}: no checkpoint config")
    config = json.loads(path.read_text())
    if config.get("format") != FORMAT:
        raise ValueError(f"{path}: format {config.get('format')!r}, expected {FORMAT}")
    return config


def trained_control_hz(config: dict[str, Any]) -> float:
    """Return the control rate (Hz) a checkpoint's parsed ``config.json`` was trained at."""
    value = config.get("control_hz", TRAINED_CONTROL_HZ)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"checkpoint {config.get('version_id', '?')}: control_hz={value!r} is not a rate in Hz")
    return float(value)


def check_control_hz(config: dict[str, Any], rate_hz: float) -> None:
    """Raise ValueError, naming both rates, when a checkpoint was trained at another rate than ``rate_hz``."""
    trained = trained_control_hz(config)
    if abs(trained - float(rate_hz)) > 1e-9 * trained:
        raise ValueError(f"policy version {config.get('version_id', '?')} was trained at {trained:g} Hz and cannot "
                         f"run at {float(rate_hz):g} Hz (its velocities and steps are per control tick)")


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
    """Return the optional trainer state saved beside a checkpoint (None if there is none).

    ValueError if the folder holds a pickled ``trainer_state.pt`` (never loaded: it could run code) or a
    malformed state.
    """
    folder = Path(folder)
    meta, weights = folder / TRAINER_JSON, folder / TRAINER_TENSORS
    if not meta.is_file():
        if (folder / LEGACY_TRAINER_FILE).exists():
            raise ValueError(f"{folder / LEGACY_TRAINER_FILE}: a pickled trainer state is not loaded (unpickling "
                             f"runs code from the file); resume is possible only from {TRAINER_JSON} + "
                             f"{TRAINER_TENSORS}: remove the file and train this version again")
        return None
    try:
        data = json.loads(meta.read_text())
        tensors = load_file(str(weights))
    except Exception as error:  # OSError, JSON errors, safetensors' own error type for a corrupt file
        raise ValueError(f"{folder}: unreadable trainer state ({error})") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{meta}: format {data.get('format') if isinstance(data, dict) else None!r}, "
                         f"expected {FORMAT}")
    state = _decode(data.get("state"), tensors, meta)
    if not isinstance(state, dict):
        raise ValueError(f"{meta}: the trainer state must be a mapping")
    return state
