# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Fixtures shared by every test of the workspace.

ROS 2 isolation: each test that asks for ``ros_domain`` gets a ROS_DOMAIN_ID held through an
exclusive lock file for the test's whole duration, so parallel test runs (pytest-xdist
workers, or two checkouts testing at once) never see each other's participants. Discovery
is kept on this host.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent
# Domain ids 1..100 keep Fast DDS's port numbers well below the ephemeral range.
DOMAIN_IDS = range(1, 101)
LOCK_DIR = Path(os.environ.get("CODA_LOCK_DIR", "/tmp"))


@pytest.fixture
def repo_root() -> Path:
    """Return the workspace root (the folder holding src/)."""
    return REPO_ROOT


@pytest.fixture
def ros_domain(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Reserve a free ROS_DOMAIN_ID for this test and export it (with localhost-only discovery)."""
    start = (os.getpid() * 7) % len(DOMAIN_IDS)
    for i in range(len(DOMAIN_IDS)):
        domain_id = DOMAIN_IDS[(start + i) % len(DOMAIN_IDS)]
        handle = open(LOCK_DIR / f"coda-ros-domain-{domain_id}.lock", "w")  # noqa: SIM115 - held until teardown
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        monkeypatch.setenv("ROS_DOMAIN_ID", str(domain_id))
        monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
        try:
            yield domain_id
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        return
    pytest.fail("no free ROS_DOMAIN_ID in 1..100: too many concurrent ROS test runs on this host")
