# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``scripts/run_tests.sh`` (``make test``, ``make test-fast``): every stage runs, and any failure fails the run.

The script is run from a copy of the workspace's ``scripts/`` layout in a scratch folder, where ``ctest`` and the
sanitizer script are stand-ins that record that they ran and exit as told, and pytest (the real one, with the
workspace's ``conftest.py``) runs a three-test file; the whole suite is never started from here.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STAGE_TESTS = '''\
import os
from pathlib import Path

import pytest


def test_unit():
    Path(os.environ["RAN_DIR"], "pytest-unit").touch()
    assert os.environ["PYTEST_EXIT"] == "0"


@pytest.mark.ros
def test_with_ros():
    Path(os.environ["RAN_DIR"], "pytest-ros").touch()


def test_with_a_ros_fixture_only(ros_domain):
    Path(os.environ["RAN_DIR"], "pytest-ros-fixture").touch()
'''
EVERY_STAGE = {"ctest", "sanitizers", "pytest-unit", "pytest-ros", "pytest-ros-fixture"}
STAND_IN = '#!/usr/bin/env bash\ntouch "$RAN_DIR/{name}"\nexit "${{{variable}}}"\n'


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """Return a scratch workspace: the real run_tests.sh, stand-in ctest and sanitizer script, a small test file."""
    root = tmp_path / "ws"
    (root / "scripts").mkdir(parents=True)
    (root / "build" / "coda_core_cpp").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "ran").mkdir()
    shutil.copy(REPO / "scripts" / "run_tests.sh", root / "scripts" / "run_tests.sh")
    shutil.copy(REPO / "conftest.py", root / "conftest.py")
    (root / "scripts" / "env.sh").write_text("# the test's environment is already the workspace's\n")
    _executable(root / "scripts" / "run_sanitized_cpp_tests.sh", STAND_IN.format(name="sanitizers",
                                                                               variable="SANITIZERS_EXIT"))
    _executable(root / "bin" / "ctest", STAND_IN.format(name="ctest", variable="CTEST_EXIT"))
    (root / "test_stages.py").write_text(STAGE_TESTS)
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    ros: ROS 2\n    slow: slow\n")
    return root


def _run(root: Path, *args: str, ctest: int = 0, sanitizers: int = 0, pytest_exit: int = 0
         ) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    env = {**os.environ, "PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}", "RAN_DIR": str(root / "ran"),
           "CTEST_EXIT": str(ctest), "SANITIZERS_EXIT": str(sanitizers), "PYTEST_EXIT": str(pytest_exit)}
    done = subprocess.run(["bash", str(root / "scripts" / "run_tests.sh"), *args, "-p", "no:cacheprovider",
                           "test_stages.py"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    return done, {p.name for p in (root / "ran").iterdir()}


def _failed_stages(output: str) -> list[str]:
    """Return the stage names listed after the script's ``== FAILED`` line."""
    _, found, rest = output.partition("== FAILED:")
    return [line.strip() for line in rest.splitlines()[1:] if line.startswith("   ")] if found else []


def test_a_failing_ctest_still_runs_pytest_and_fails_the_run(workspace: Path) -> None:
    done, ran = _run(workspace, ctest=8)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ran == EVERY_STAGE
    assert "3 passed" in done.stdout and "== C++ tests (ctest) failed (exit 1)" in done.stdout, done.stdout
    assert _failed_stages(done.stdout) == ["C++ tests (ctest)"], done.stdout


def test_every_failing_stage_is_named(workspace: Path) -> None:
    done, ran = _run(workspace, sanitizers=3, pytest_exit=1)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ran == EVERY_STAGE
    assert _failed_stages(done.stdout) == ["C++ tests under AddressSanitizer + UBSan, ThreadSanitizer",
                                           "Python tests (pytest)"], done.stdout


def test_all_stages_passing_pass_the_run(workspace: Path) -> None:
    done, ran = _run(workspace)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran == EVERY_STAGE
    assert "== every stage passed" in done.stdout and "FAILED" not in done.stdout


def test_the_fast_subset_leaves_out_ros_tests_and_the_sanitizers_and_still_fails_on_ctest(workspace: Path) -> None:
    """A test taking ``ros_domain`` is left out like one marked ``ros`` (``conftest.py`` marks it)."""
    done, ran = _run(workspace, "--fast")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran == {"ctest", "pytest-unit"}
    assert "1 passed, 2 deselected" in done.stdout, done.stdout
    done, ran = _run(workspace, "--fast", ctest=1)
    assert done.returncode == 1 and ran == {"ctest", "pytest-unit"}
    assert _failed_stages(done.stdout) == ["C++ tests (ctest)"], done.stdout
