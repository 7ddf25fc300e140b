# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Policy versions for workers and arms that do not share the run's disk: what is sent, checked and cached.

A run keeps each trained version in ``<run>/checkpoints/<version>/``. A ``sim_bridge`` worker or an ``arm_bridge``
on another machine cannot read that folder, so the loop serves the version over ROS (``coda_msgs/srv/GetCheckpoint``,
see ``coda_engine.ros.checkpoints``) and names the service and the model's SHA-256 in every ``RunEpisode`` goal.
The worker then finds the folder in this order (:func:`find_version`):

1. its own ``checkpoint_root`` (a shared or synced disk), when the model there has the goal's hash;
2. its cache, ``<cache>/<sha256[:16]>/<version>/``: version ids repeat across runs (every run has an
   ``r001-rl``), so cached folders are keyed by the model's hash and never confused;
3. otherwise it fetches the files and :meth:`CheckpointCache.store` checks them before anything is loaded.

Pure module: no rclpy.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from coda_engine.digests import file_sha256
from coda_engine.real.safety import EVALUATION_FILE

MODEL_FILE = "model.safetensors"
"""The network's weights (``coda_policy.checkpoint.MODEL_FILE``); its SHA-256 identifies the version."""
CONFIG_FILE = "config.json"
"""The network's configuration (``coda_policy.checkpoint.CONFIG_FILE``)."""
SHARED_FILES = (MODEL_FILE, CONFIG_FILE, EVALUATION_FILE)
"""Files sent for a version, in this order; the loop's evaluation (what an arm's sim-first gate reads) is optional.
Trainer state and metrics stay with the run."""
MAX_FILE_BYTES = 256 * 1024 * 1024
"""Largest file sent (a policy of this project is about 1 MB)."""
STALE_STAGING_S = 600.0
"""A staging folder (``.<version>-*`` beside the version) untouched this long was left by a worker killed while
storing; the next store of that version removes it. A store in progress takes well under a second."""
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class CheckpointShareError(LookupError):
    """A version that cannot be sent, found or stored; the message names it and says why."""


def check_version(version: str) -> str:
    """Return ``version`` if it is a plain version id (a folder name, never a path), else raise."""
    if not isinstance(version, str) or not _VERSION.fullmatch(version) or version in (".", ".."):
        raise CheckpointShareError(f"policy version {version!r} is not a version id (letters, digits, _ . -)")
    return version


def check_sha256(sha256: str) -> str:
    """Return ``sha256`` if empty or 64 lowercase hex digits, else raise."""
    if sha256 and not _SHA256.fullmatch(sha256):
        raise CheckpointShareError(f"sha256 {sha256!r} is not 64 lowercase hex digits")
    return sha256


def model_sha256(folder: Path) -> str:
    """Return the SHA-256 of the folder's model file; empty when there is none."""
    path = Path(folder) / MODEL_FILE
    return file_sha256(path) if path.is_file() else ""


def model_mismatch(folder: Path, sha256: str) -> str:
    """'' when ``folder`` holds a model whose hash is ``sha256`` (empty: any model), else why it does not."""
    local = model_sha256(folder)
    if local and (not sha256 or local == sha256):
        return ""
    return (f"{folder} holds a model with sha256 {local[:16]}..., not {sha256[:16]}..." if local
            else f"no checkpoint folder {folder}")


def read_version(root: Path, version: str, sha256: str = "") -> tuple[str, dict[str, bytes]]:
    """Return the files to send for ``<root>/<version>`` and its model's hash; refuse a model other than ``sha256``."""
    folder = Path(root) / check_version(version)
    check_sha256(sha256)
    if not (folder / MODEL_FILE).is_file() or not (folder / CONFIG_FILE).is_file():
        raise CheckpointShareError(f"policy version {version!r}: no {MODEL_FILE} and {CONFIG_FILE} in {folder}")
    files: dict[str, bytes] = {}
    for name in SHARED_FILES:
        path = folder / name
        if path.is_file():
            if path.stat().st_size > MAX_FILE_BYTES:
                raise CheckpointShareError(f"policy version {version!r}: {name} is larger than {MAX_FILE_BYTES} bytes")
            files[name] = path.read_bytes()
    digest = file_sha256(folder / MODEL_FILE)
    if sha256 and digest != sha256:
        raise CheckpointShareError(f"policy version {version!r}: this run's model has sha256 {digest[:16]}..., "
                                   f"not the {sha256[:16]}... asked for (another run's version of that name?)")
    return digest, files


@dataclass(frozen=True)
class CheckpointCache:
    """Versions fetched from other machines, one folder per model hash (see the module docstring)."""

    root: Path
    """Cache folder; each entry is ``<root>/<sha256[:16]>/<version>/``."""

    def version_root(self, sha256: str) -> Path:
        """Return the folder holding the version folders of this model hash (what ``policies.resolve`` takes)."""
        return Path(self.root) / check_sha256(sha256)[:16]

    def find(self, version: str, sha256: str) -> Path | None:
        """Return the cached version's root when a complete copy with this model hash is there, else None."""
        if not sha256:
            return None
        folder = self.version_root(sha256) / check_version(version)
        return folder.parent if model_sha256(folder) == sha256 and (folder / CONFIG_FILE).is_file() else None

    def store(self, version: str, sha256: str, files: dict[str, bytes]) -> Path:
        """Check fetched files (names, model and config present, model hash) and cache them; return the root.

        ``sha256``: the hash the goal asked for (empty: take the sender's). The folder appears whole or not at all
        (written next to it, then renamed), so a worker killed while storing leaves nothing half-written behind, and
        workers of one machine sharing the cache may store the same version at once.
        """
        check_version(version)
        unknown = sorted(set(files) - set(SHARED_FILES))
        if unknown:
            raise CheckpointShareError(f"policy version {version!r}: unexpected files {unknown}")
        missing = [name for name in (MODEL_FILE, CONFIG_FILE) if name not in files]
        if missing:
            raise CheckpointShareError(f"policy version {version!r}: the checkpoint sent lacks {missing}")
        digest = hashlib.sha256(files[MODEL_FILE]).hexdigest()
        if sha256 and digest != check_sha256(sha256):
            raise CheckpointShareError(f"policy version {version!r}: the model sent has sha256 {digest[:16]}..., "
                                       f"not the {sha256[:16]}... the episode asked for")
        folder = self.version_root(digest) / version
        if self.find(version, digest) is not None:
            return folder.parent
        folder.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_staging(folder.parent, version)
        staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=folder.parent))
        try:
            for name, data in files.items():
                (staging / name).write_bytes(data)
            try:
                os.replace(staging, folder)  # atomic; fails when the folder exists and is not empty
            except OSError:
                if self.find(version, digest) is not None:  # another worker on this machine stored it meanwhile
                    return folder.parent
                aside = Path(tempfile.mkdtemp(prefix=f".{version}-damaged-", dir=folder.parent))
                os.replace(folder, aside / version)  # a damaged copy: moved aside, then replaced
                os.replace(staging, folder)
                shutil.rmtree(aside, ignore_errors=True)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return folder.parent


def _remove_stale_staging(parent: Path, version: str, now: float | None = None) -> list[Path]:
    """Remove the staging folders of ``version`` under ``parent`` untouched for :data:`STALE_STAGING_S`.

    Returns the folders removed.
    """
    now = time.time() if now is None else now
    removed = []
    for path in parent.glob(f".{version}-*"):
        try:
            stale = path.is_dir() and now - path.stat().st_mtime > STALE_STAGING_S
        except OSError:  # removed by another worker meanwhile
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def find_version(version: str, sha256: str, checkpoint_root: Path | None,
                 cache: CheckpointCache | None) -> tuple[Path | None, str]:
    """Where ``version`` (model hash ``sha256``, empty = unchecked) is on this machine: (root, '') or (None, why).

    The root is the folder holding ``<version>/``, for ``coda_engine.policies.resolve``.
    """
    check_version(version)
    check_sha256(sha256)
    why = "this worker has no checkpoint_root"
    if checkpoint_root is not None:
        why = model_mismatch(Path(checkpoint_root) / version, sha256)
        if not why:
            return Path(checkpoint_root), ""
    if cache is not None:
        cached = cache.find(version, sha256)
        if cached is not None:
            return cached, ""
    return None, why
