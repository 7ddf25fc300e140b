# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What a run records about its code: this checkout's commit, a dirty tree, code outside any checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from coda_loop.provenance import WORKSPACE_MARKER, code_label, code_provenance, workspace_commit

REPO = Path(__file__).resolve().parents[3]


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_this_checkout_is_named_by_its_commit() -> None:
    commit, dirty = workspace_commit()
    if not (REPO / ".git").exists():  # a copy of the tree, not a clone: nothing to name
        assert (commit, dirty) == ("", None)
        return
    assert commit == _git(REPO, "rev-parse", "HEAD") and dirty is not None
    facts = code_provenance()
    assert facts["commit"] == commit and facts["packages"]["torch"].startswith("2.") and facts["cpus"] >= 1
    assert facts["torch_cpu_capability"] in {"DEFAULT", "NO AVX", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256"}
    assert code_label(facts) == commit[:12] + ("-dirty" if dirty else "")


def test_the_cpu_capability_torch_was_told_to_use_is_recorded() -> None:
    """A run forced to other kernels (ATEN_CPU_CAPABILITY) records the set it ran with."""
    code = "from coda_loop.provenance import code_provenance; print(code_provenance()['torch_cpu_capability'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ATEN_CPU_CAPABILITY": "default"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "DEFAULT"


def test_without_git_the_code_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")  # no git executable to run
    assert workspace_commit() == ("", None)
    assert code_label(code_provenance()) == "unknown"


def test_a_changed_tracked_file_makes_it_dirty_and_other_repositories_do_not_count(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / WORKSPACE_MARKER).parent.mkdir(parents=True)
    (workspace / WORKSPACE_MARKER).write_text("<package/>\n")
    module = workspace / "src" / "coda_engine" / "module.py"
    module.write_text("x = 1\n")
    _git(workspace, "init", "-q")
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-qm", "one")
    head = _git(workspace, "rev-parse", "HEAD")
    assert workspace_commit(module) == (head, False)
    (workspace / "notes.txt").write_text("untracked files do not count\n")
    assert workspace_commit(module) == (head, False)
    module.write_text("x = 2\n")
    assert workspace_commit(module) == (head, True)
    assert code_label({"commit": head, "dirty": True}) == head[:12] + "-dirty"
    # a git repository that is not this workspace, and a folder outside any repository
    other = tmp_path / "other"
    other.mkdir()
    (other / "module.py").write_text("")
    _git(other, "init", "-q")
    assert workspace_commit(other / "module.py") == ("", None)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert workspace_commit(plain / "module.py") == ("", None)
    assert code_label({"commit": "", "dirty": None}) == "unknown"
