# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What the launch tests (``test_launch_*.py``) share: a ROS domain of their own, and nothing left in the temp dir.

``launch_test`` loads a test file by its path, so the files load this one by path too (``load_support``); it
imports nothing of ROS or ``launch`` beyond the event type of :func:`note_parameter_files`.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

_HELD: list[Any] = []
SCRATCH: list[Path] = []
"""What the test created in the temporary directory: its folder, and the parameter files launch_ros wrote for the
launched processes (one per dict given as ``parameters``); removed when the test process exits."""


def remove_scratch() -> None:
    """Remove everything in :data:`SCRATCH` (registered with atexit below).

    At exit rather than in a post-shutdown test: launch_testing runs no post-shutdown test when the launch dies
    early or the processes never get ready, and the post-shutdown tests read the folder; ``launch_test`` ends with
    ``sys.exit`` and pytest returns normally, so atexit runs after every test of the file, however they went.
    """
    for path in SCRATCH:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


atexit.register(remove_scratch)


def scratch_folder(prefix: str) -> Path:
    """Return a new folder in the temporary directory, removed with what it holds when this process exits."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    SCRATCH.append(folder)
    return folder


def parameter_files(cmd: list[str]) -> list[Path]:
    """Return the temporary parameter files launch_ros wrote for a process (``launch_params_*`` in the temp dir)."""
    temp = Path(tempfile.gettempdir())
    return [Path(arg) for arg in cmd if Path(arg).parent == temp and Path(arg).name.startswith("launch_params_")]


def note_parameter_files(event: Any, context: Any) -> None:
    """Keep the parameter files of a started process for removal at exit."""
    SCRATCH.extend(parameter_files(event.cmd))


def reserve_domain() -> int:
    """Return a ROS_DOMAIN_ID in 1..100 held (the lock files of conftest.py's ``ros_domain``) until exit."""
    lock_dir = Path(os.environ.get("CODA_LOCK_DIR", "/tmp"))
    for domain in random.sample(range(1, 101), 100):
        handle = open(lock_dir / f"coda-ros-domain-{domain}.lock", "w")  # noqa: SIM115 - held until exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        _HELD.append(handle)
        return domain
    raise RuntimeError("no free ROS_DOMAIN_ID in 1..100")
