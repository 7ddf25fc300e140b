# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""SHA-256 digests of files and folders: how checkpoints, the policy node and the memory name a model's bytes.

Pure module: no rclpy.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def folder_sha256(folder: Path) -> tuple[str, dict[str, str]]:
    """Hash of a folder: SHA-256 over its files' relative paths and hashes (sorted); also each file's hash."""
    if not folder.is_dir():
        raise ValueError(f"checkpoint_dir {str(folder)!r} is not a folder")
    files = {p.relative_to(folder).as_posix(): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    if not files:
        raise ValueError(f"checkpoint_dir {str(folder)!r} holds no files")
    digest = hashlib.sha256("".join(f"{name}\0{h}\n" for name, h in sorted(files.items())).encode())
    return digest.hexdigest(), files
