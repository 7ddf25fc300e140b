# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Structural check of the launch files, without importing `launch` (not installable here).

Each ``Node(package=..., executable=...)`` must name a package and executable that the
workspace really installs (``install/<pkg>/lib/<pkg>/<exe>``, where ``ros2 run`` looks), and
each parameter file it names must exist in the package's ``config/`` and parse as ROS 2
parameter YAML.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "install"
LAUNCH_FILES = sorted((REPO / "launch").glob("*.launch.py"))


@dataclass
class NodeUse:
    """One Node(...) action found in a launch file."""

    line: int
    package: str | None
    executable: str | None
    parameter_files: list[str] = field(default_factory=list)


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _param_files(call: ast.Call) -> list[str]:
    """Parameter files named as PathJoinSubstitution/os.path.join(..., 'config', 'x.yaml') or literals."""
    files = []
    for kw in call.keywords:
        if kw.arg not in ("parameters", "ros_arguments"):
            continue
        for sub in ast.walk(kw.value):
            text = _literal(sub)
            if text and text.endswith((".yaml", ".yml")):
                files.append(text)
    return files


def scan(path: Path) -> list[NodeUse]:
    """Return every Node(...) call of a launch file with its literal arguments."""
    tree = ast.parse(path.read_text(), filename=str(path))
    uses = []
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == "Node":
            kwargs = {kw.arg: kw.value for kw in call.keywords}
            uses.append(
                NodeUse(
                    line=call.lineno,
                    package=_literal(kwargs["package"]) if "package" in kwargs else None,
                    executable=_literal(kwargs["executable"]) if "executable" in kwargs else None,
                    parameter_files=_param_files(call),
                )
            )
    return uses


def problems(path: Path, install: Path = INSTALL) -> list[str]:
    """Everything wrong with one launch file, as readable sentences."""
    found = []
    uses = scan(path)
    if not uses:
        found.append(f"{path.name}: starts no Node")
    for use in uses:
        where = f"{path.name}:{use.line}"
        if not use.package or not use.executable:
            found.append(f"{where}: Node needs literal package= and executable=")
            continue
        exe = install / use.package / "lib" / use.package / use.executable
        if not (exe.exists() and os.access(exe, os.X_OK)):
            found.append(f"{where}: {use.package}/{use.executable} is not installed at {exe}")
        for name in use.parameter_files:
            candidates = [REPO / "src" / use.package / "config" / Path(name).name, REPO / name]
            param_file = next((c for c in candidates if c.exists()), None)
            if param_file is None:
                found.append(f"{where}: parameter file {name} not found in src/{use.package}/config/")
                continue
            try:
                data = yaml.safe_load(param_file.read_text())
            except yaml.YAMLError as exc:
                found.append(f"{where}: {name} does not parse: {exc}")
                continue
            if not isinstance(data, dict) or not all(
                isinstance(v, dict) and isinstance(v.get("ros__parameters"), dict) for v in data.values()
            ):
                found.append(f"{where}: {name} is not ROS 2 parameter YAML (<node>: ros__parameters: {{...}})")
    return found


def test_launch_folder_has_launch_files() -> None:
    assert LAUNCH_FILES, "launch/ holds no *.launch.py"


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file(path: Path) -> None:
    assert problems(path) == []


def test_checker_reports_missing_executable_and_bad_params(tmp_path: Path) -> None:
    (tmp_path / "x.launch.py").write_text(
        "from launch_ros.actions import Node\n"
        "def generate_launch_description():\n"
        "    return [Node(package='coda_engine', executable='no_such_node'),\n"
        "            Node(package='coda_engine', executable='dds_check', parameters=['missing_params.yaml'])]\n"
    )
    found = problems(tmp_path / "x.launch.py")
    assert any("no_such_node is not installed" in p for p in found)
    assert any("missing_params.yaml not found" in p for p in found)
    assert len(found) == 2


def test_every_launch_file_is_installed_in_coda_loops_share_folder() -> None:
    """`ros2 launch coda_loop <file>` and FindPackageShare("coda_loop") find each file: one copy, the repository's."""
    from ament_index_python.packages import get_package_share_directory

    share = Path(get_package_share_directory("coda_loop")) / "launch"
    assert sorted(p.name for p in share.iterdir()) == [p.name for p in LAUNCH_FILES]
    for path in LAUNCH_FILES:
        assert (share / path.name).read_bytes() == path.read_bytes(), f"{share / path.name} is not {path}"


def _first_line(tree: ast.AST, name: str) -> int:
    lines = [call.lineno for call in ast.walk(tree) if isinstance(call, ast.Call)
             and getattr(call.func, "id", getattr(call.func, "attr", None)) == name]
    assert lines, f"no call of {name}"
    return min(lines)


def test_the_sim_launch_refuses_a_second_loop_before_it_starts_or_writes_anything() -> None:
    """The domain check of coda_sim.launch.py comes before its first Node and its first folder.

    What the check does is tested with a real loop on the domain (test/test_coda_run.py); the launch file's order
    is what is checked here, since `launch` does not install from PyPI.
    """
    tree = ast.parse((REPO / "launch" / "coda_sim.launch.py").read_text())
    check = _first_line(tree, "refuse_before_launch")
    assert check < _first_line(tree, "Node") and check < _first_line(tree, "makedirs")


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_nodes_get_their_parameters_as_ros_arguments(path: Path) -> None:
    """Parameters go in ``ros_arguments``, none in ``parameters=``.

    launch_ros writes each dict there to a temporary file it never removes, and puts those files after
    ``ros_arguments``, where they would undo the launch's values (``coda_engine.ros.launch_params``).
    """
    tree = ast.parse(path.read_text())
    given = [call.lineno for call in ast.walk(tree) if isinstance(call, ast.Call)
             and getattr(call.func, "id", getattr(call.func, "attr", None)) == "Node"
             and any(kw.arg == "parameters" for kw in call.keywords)]
    assert given == [], f"{path.name}: Node(parameters=...) at lines {given}; use ros_arguments=parameter_arguments()"
