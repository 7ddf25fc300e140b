# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The launch tests of this folder are collected only where launch_testing's pytest plugin is active.

``test_launch_*.py`` start the workspace's launch files the way ``ros2 launch`` does, through launch_testing:
its pytest plugin collects them (``colcon test``, or pytest on a ROS 2 install), and ``launch_test FILE`` runs
one. Without ``launch``, ``launch_ros`` and ``launch_testing`` they are left out of the collection; so they
are where the plugin is disabled (``-p no:launch_testing``: ``scripts/run_tests.sh`` does that when the
installed plugin cannot load under this pytest, and runs them with ``launch_test`` instead). The test summary
says which files were left out and why. The structural check of every launch file
(``test/test_launch_files.py``) runs either way.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LAUNCH_TESTS = sorted(p.name for p in HERE.glob("test_launch_*.py"))
"""The launch_testing files of this folder."""
IMPORTABLE = all(importlib.util.find_spec(name) is not None for name in ("launch", "launch_ros", "launch_testing"))
_left_out: set[str] = set()


def _why_not(config: pytest.Config) -> str:
    """Return why the launch tests cannot be collected in this session ('' when they can)."""
    if not IMPORTABLE:
        return "launch, launch_ros and launch_testing are not importable here"
    if not config.pluginmanager.has_plugin("launch_testing"):
        return "launch_testing's pytest plugin is not active (-p no:launch_testing); run them with launch_test"
    return ""


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave the launch tests out when launch_testing's plugin cannot collect them."""
    if collection_path.parent == HERE and collection_path.name in LAUNCH_TESTS and _why_not(config):
        _left_out.add(collection_path.name)
        return True
    return None


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Say which launch tests were not collected, and why."""
    if _left_out:
        terminalreporter.write_sep("=", "launch tests not collected", yellow=True)
        terminalreporter.write_line(
            f"{len(_left_out)} launch test file(s) of src/coda_loop/test not collected "
            f"({', '.join(sorted(_left_out))}): {_why_not(config)}. They run on a ROS 2 install: "
            "colcon test --packages-select coda_loop, or launch_test FILE (docs/ros2.md, 'ros2 launch').")
