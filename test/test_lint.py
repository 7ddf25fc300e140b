# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Linters, per package: ruff (pycodestyle, pyflakes, pep257, annotations, ...) and copyright headers."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.name for p in (REPO / "src").iterdir() if (p / "package.xml").exists())
# Folders outside src/ that hold project code.
EXTRA_TREES = [t for t in ("test", "scripts", "launch", "fuzz", "conftest.py") if (REPO / t).exists()]
HEADER_SUFFIXES = {".py", ".cpp", ".hpp", ".h", ".sh"}
HEADER_NAMES = {"CMakeLists.txt"}
COPYRIGHT = "Copyright 2026 The CoDA for ROS 2 Authors"
LICENSE = "SPDX-License-Identifier: Apache-2.0"


def _ruff() -> list[str]:
    exe = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    return [exe]


def _source_files(tree: Path) -> list[Path]:
    if tree.is_file():
        return [tree]
    return sorted(
        p
        for p in tree.rglob("*")
        if p.is_file()
        and (p.suffix in HEADER_SUFFIXES or p.name in HEADER_NAMES)
        and not any(part in {"__pycache__", ".pytest_cache", "data"} for part in p.parts)
    )


@pytest.mark.parametrize("target", PACKAGES + EXTRA_TREES)
def test_ruff_clean(target: str) -> None:
    path = REPO / "src" / target if target in PACKAGES else REPO / target
    result = subprocess.run([*_ruff(), "check", "--no-cache", str(path)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, f"ruff found problems in {target}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("target", PACKAGES + EXTRA_TREES)
def test_copyright_headers(target: str) -> None:
    path = REPO / "src" / target if target in PACKAGES else REPO / target
    files = _source_files(path)
    assert files, f"no source files found under {path}"
    missing = [
        str(f.relative_to(REPO))
        for f in files
        if COPYRIGHT not in f.read_text()[:600] or LICENSE not in f.read_text()[:600]
    ]
    assert not missing, f"files without the copyright/licence header: {missing}"


def test_header_check_catches_a_missing_header(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('"""No header."""\n')
    assert COPYRIGHT not in bad.read_text()
    assert _source_files(tmp_path) == [bad]
