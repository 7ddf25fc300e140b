# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Fixtures shared by every test of the workspace.

ROS 2 isolation: each test that asks for ``ros_domain`` gets a ROS_DOMAIN_ID held through an
exclusive lock file for the test's whole duration, so parallel test runs (pytest-xdist
workers, or two checkouts testing at once) never see each other's participants. Discovery
is kept on this host.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent
STAND_IN_ROBOT_FILE = REPO_ROOT / "src" / "coda_engine" / "config" / "robots" / "panda_fake.yaml"
"""The robot file of the stand-in arm (``fake_ros2_control_arm``) as shipped."""
# Domain ids 1..100 keep Fast DDS's port numbers well below the ephemeral range.
DOMAIN_IDS = range(1, 101)
LOCK_DIR = Path(os.environ.get("CODA_LOCK_DIR", "/tmp"))
_DOMAIN_TURN = itertools.count()


ROS_FIXTURES = frozenset({"ros_domain", "rclpy_node", "start_process", "hold_ros_domain"})
"""Fixtures that start ROS 2 participants: a test using any of them (directly or through another fixture) gets the
``ros`` marker, so ``-m "not ros"`` (the fast subset, ``scripts/run_tests.sh --fast``) leaves it out even where the
marker was not written."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that takes a ROS 2 fixture with ``ros``."""
    for item in items:
        if ROS_FIXTURES.intersection(getattr(item, "fixturenames", ())) and item.get_closest_marker("ros") is None:
            item.add_marker(pytest.mark.ros)


@pytest.fixture
def repo_root() -> Path:
    """Return the workspace root (the folder holding src/)."""
    return REPO_ROOT


@pytest.fixture
def stand_in_robot(tmp_path: Path) -> Any:
    """Return ``write(name="robot.yaml", top=None, **safety) -> Path``: the stand-in's robot file, some fields changed.

    ``top`` replaces top-level fields (``robot_id``, ``gate``, ``success_check``...), ``safety`` keywords replace
    fields of its ``safety`` section; the file is written under the test's ``tmp_path``.
    """
    import yaml

    def write(name: str = "robot.yaml", top: dict[str, Any] | None = None, **safety: Any) -> Path:
        data = yaml.safe_load(STAND_IN_ROBOT_FILE.read_text())
        data.update(top or {})
        data.setdefault("safety", {}).update(safety)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data))
        return path

    return write


@pytest.fixture
def save_policy_version() -> Any:
    """Return ``save(folder, id_success=None) -> sha256``: an untrained tiny policy saved as version ``folder.name``.

    With ``id_success`` the folder also gets the loop's ``evaluation.json`` (what an arm's sim-first gate reads) and
    a trainer state (which stays with the run); the return value is the model file's SHA-256.
    """

    def save(folder: Path, id_success: float | None = None) -> str:
        import json

        from coda_engine.checkpoint_share import model_sha256
        from coda_policy.checkpoint import save_checkpoint
        from coda_policy.config import PolicyConfig
        from coda_policy.sft import build_policy

        net = build_policy(PolicyConfig(d_model=32, num_heads=2, hidden_dim=64), 0).net.eval()
        save_checkpoint(folder, net, folder.name)
        (folder / "trainer_state.pt").write_bytes(b"optimizer state")
        if id_success is not None:
            (folder / "evaluation.json").write_text(json.dumps({"version": folder.name,
                                                                "per_split": {"id": id_success}}))
        return model_sha256(folder)

    return save


@pytest.fixture
def coda_subcommand() -> Any:
    """Return ``run(module, argv) -> exit code``: one ``coda`` subcommand's module on its own arguments.

    What ``coda NAME ARGS`` does once it has chosen ``module``, so each package tests its own subcommands
    (``coda_critic.commands``, ``coda_policy.cli``, ...) without ``coda_loop.cli``, the package above it.
    """
    import argparse

    def run(module: Any, argv: list[str]) -> int:
        parser = argparse.ArgumentParser(prog=f"coda {module.__name__}")
        module.add_arguments(parser)
        return int(module.run(parser.parse_args(argv)) or 0)

    return run


def load_test_module(package: str, name: str) -> Any:
    """Import ``src/<package>/test/<name>.py`` (a package's test helpers used by a test above that package)."""
    import importlib.util

    path = REPO_ROOT / "src" / package / "test" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{package}_test_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def engine_test_helpers() -> Any:
    """Return ``get(name)``: coda_engine's test module ``name`` (helpers that drive its nodes)."""
    return lambda name: load_test_module("coda_engine", name)


@contextlib.contextmanager
def hold_ros_domain() -> Iterator[int]:
    """Hold a free ROS_DOMAIN_ID (an exclusive lock file) until the block ends; export it, discovery on this host.

    ``ros_domain`` is this for one test; a module-scoped fixture that starts nodes once for many tests uses it too.
    """
    # A different id for each use in a session: a participant killed by one test (its shared-memory ports and
    # discovery leases outlive it for a while) never meets the next test's processes.
    start = (os.getpid() * 7 + next(_DOMAIN_TURN) * 37) % len(DOMAIN_IDS)
    for i in range(len(DOMAIN_IDS)):
        domain_id = DOMAIN_IDS[(start + i) % len(DOMAIN_IDS)]
        handle = open(LOCK_DIR / f"coda-ros-domain-{domain_id}.lock", "w")  # noqa: SIM115 - held until teardown
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("ROS_DOMAIN_ID", str(domain_id))
                patch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
                yield domain_id
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        return
    pytest.fail("no free ROS_DOMAIN_ID in 1..100: too many concurrent ROS test runs on this host")


@pytest.fixture(name="hold_ros_domain", scope="session")
def hold_ros_domain_fixture() -> Any:
    """Return :func:`hold_ros_domain`, for module-scoped fixtures that start nodes once for many tests."""
    return hold_ros_domain


@pytest.fixture
def ros_domain() -> Iterator[int]:
    """Reserve a free ROS_DOMAIN_ID for this test and export it (with localhost-only discovery)."""
    with hold_ros_domain() as domain_id:
        yield domain_id


@pytest.fixture
def rclpy_node(ros_domain: int) -> Iterator[Any]:
    """Yield an rclpy node on the test's reserved domain, in its own context; destroyed at teardown."""
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(context=context, domain_id=ros_domain)
    node = rclpy.create_node(f"test_client_{os.getpid()}", context=context)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


@pytest.fixture
def start_process(ros_domain: int) -> Iterator[Any]:
    """Start workspace executables as separate processes on the test's domain; all are killed at teardown.

    ``start_process([sys.executable, "-m", "coda_engine.ros.scene_generator_node", ...])`` returns the
    ``subprocess.Popen``; stdout and stderr go to a log file whose text is printed when the test fails.
    """
    started: list[tuple[subprocess.Popen, Path]] = []

    def start(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = Path(tempfile.mkstemp(prefix="coda-proc-", suffix=".log")[1])
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        proc = subprocess.Popen(cmd, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        started.append((proc, log))
        return proc

    try:
        yield start
    finally:
        for proc, log in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            sys.stderr.write(f"--- output of {' '.join(map(str, proc.args))} (exit {proc.returncode}):\n")
            sys.stderr.write(log.read_text()[-4000:])
            log.unlink(missing_ok=True)
