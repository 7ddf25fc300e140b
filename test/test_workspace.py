# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The workspace itself: packages, installed entry points, the coda command, an idempotent set-up."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from coda_loop.cli import SUBCOMMANDS

REPO = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (REPO / "src").iterdir() if (p / "package.xml").exists())


def test_design_card_packages_exist() -> None:
    names = {p.name for p in PACKAGES}
    assert {"coda_msgs", "coda_core_cpp", "coda_engine", "coda_critic", "coda_policy", "coda_loop"} <= names


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.name)
def test_package_xml_format_3(pkg: Path) -> None:
    root = ET.parse(pkg / "package.xml").getroot()
    assert root.get("format") == "3"
    assert root.findtext("name") == pkg.name
    build_type = root.find("export/build_type").text
    assert build_type == ("ament_python" if (pkg / "setup.py").exists() else "ament_cmake")


@pytest.mark.parametrize("pkg", [p for p in PACKAGES if (p / "setup.py").exists()], ids=lambda p: p.name)
def test_console_scripts_installed_where_ros2_run_looks(pkg: Path) -> None:
    console = re.search(r'"console_scripts": \[(.*?)\]', (pkg / "setup.py").read_text(), re.S)
    scripts = re.findall(r'"(\w+) = [\w.]+:\w+"', console.group(1))
    assert scripts, f"{pkg.name}/setup.py lists no console scripts"
    for script in scripts:
        exe = REPO / "install" / pkg.name / "lib" / pkg.name / script
        assert exe.exists() and os.access(exe, os.X_OK), f"{exe} missing"


def test_core_extension_imports() -> None:
    import coda_core_cpp

    assert coda_core_cpp.version()


def _coda(*args: str) -> subprocess.CompletedProcess:
    coda = Path(sys.prefix) / "bin" / "coda"
    return subprocess.run([str(coda), *args], capture_output=True, text=True, timeout=120)


def test_coda_help() -> None:
    result = _coda("--help")
    assert result.returncode == 0
    for name in SUBCOMMANDS:
        assert name in result.stdout


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_coda_subcommand_help(name: str) -> None:
    result = _coda(name, "--help")
    assert result.returncode == 0, result.stderr
    assert f"usage: coda {name}" in result.stdout


def test_coda_unknown_subcommand_is_a_clear_error() -> None:
    result = _coda("no-such-command")
    assert result.returncode == 2
    assert "invalid choice: 'no-such-command'" in result.stderr


@pytest.mark.slow
def test_bootstrap_second_run_changes_nothing() -> None:
    """A second set-up on a built workspace installs and builds nothing (it says so for both)."""
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "bootstrap.sh")], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "packages up to date" in result.stdout
    assert "build up to date" in result.stdout
