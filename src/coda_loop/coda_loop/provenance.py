# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Where a run's code comes from and what it runs on: recorded in memory at every start of a run.

A run that is resumed on other code, or a table whose runs came from several commits, shows it: the loop's
summary, ``coda experiment``'s results and the report name the commits each run was computed with. Pure module:
no rclpy.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "numpy", "mujoco", "transformers", "safetensors")
"""PyPI distributions whose versions change results; recorded with their installed version."""
WORKSPACE_MARKER = Path("src") / "coda_engine" / "package.xml"
"""A file at this path under a git checkout's top level makes it this workspace (not some enclosing repository)."""


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def workspace_commit(source: Path | None = None) -> tuple[str, bool | None]:
    """Return (commit, dirty) of the workspace checkout holding ``source`` (default: this module's real file).

    ("", None) when the code does not come from a git checkout of this workspace (an installed copy, no git).
    ``dirty``: tracked files differ from the commit (untracked files are not counted).
    """
    folder = Path(source if source is not None else __file__).resolve().parent  # symlink installs lead to src/
    top = _git(folder, "rev-parse", "--show-toplevel")
    if not top or not (Path(top) / WORKSPACE_MARKER).is_file():
        return "", None
    commit = _git(Path(top), "rev-parse", "HEAD") or ""
    status = _git(Path(top), "status", "--porcelain", "--untracked-files=no")
    return commit, (None if status is None else bool(status))


def code_provenance(source: Path | None = None) -> dict[str, Any]:
    """Return the facts of this process that decide a run's numbers besides its config.

    Keys: ``commit`` and ``dirty`` (:func:`workspace_commit`), ``python``, ``packages`` (name -> version, "" when
    not installed), ``ros_distro``, ``rmw``, ``host``, ``cpus``, ``platform``, ``cpu_model`` and
    ``torch_cpu_capability`` (the instruction set torch's CPU kernels were chosen for: ``AVX512``, ``AVX2``, ...;
    kernels of different sets round differently, so the same seed and code give another run on another processor).
    """
    commit, dirty = workspace_commit(source)
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = ""
    return {
        "commit": commit,
        "dirty": dirty,
        "python": platform.python_version(),
        "packages": packages,
        "ros_distro": os.environ.get("ROS_DISTRO", ""),
        "rmw": os.environ.get("RMW_IMPLEMENTATION", ""),
        "host": platform.node(),
        "cpus": os.cpu_count() or 0,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "torch_cpu_capability": torch_cpu_capability(),
    }


def cpu_model() -> str:
    """Return the processor's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere), "" if unknown."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def torch_cpu_capability() -> str:
    """Return the instruction set torch's CPU kernels run with here ("" without torch)."""
    try:
        import torch
    except ImportError:
        return ""
    return str(torch.backends.cpu.get_cpu_capability())


def code_label(provenance: dict[str, Any]) -> str:
    """Short name of the code of one start: 12 hex digits of the commit (+ ``-dirty``), or ``unknown``."""
    commit = str(provenance.get("commit") or "")
    if not commit:
        return "unknown"
    return commit[:12] + ("-dirty" if provenance.get("dirty") else "")
