# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Which action function acts for a version: the expert here, trained versions through an installed policy loader.

The engine depends on no policy package; the loader of trained versions is found at run time (entry-point group
``coda_engine.policy_loaders``). coda_policy's tests check that it registers one; here a process whose path lacks
every policy package shows what a worker without one answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coda_engine.policies import EXPERT, PolicyNotAvailableError, resolve
from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import run_episode
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams


def test_the_expert_acts_without_any_policy_package() -> None:
    scene = generate_seeded("reach", 3, SceneParams())
    act = resolve(EXPERT, scene, None)
    result = run_episode(SimArm(), scene, act)
    assert result.success


@pytest.mark.parametrize("version,root,message", [
    ("", None, "empty policy version"),
    ("r001-bc", None, "no checkpoint_root configured"),
    ("r001-bc", Path("/nonexistent/checkpoints"), "no checkpoint folder"),
])
def test_versions_a_worker_cannot_run_are_named(version: str, root: Path | None, message: str) -> None:
    with pytest.raises(PolicyNotAvailableError, match=message):
        resolve(version, generate_seeded("reach", 3, SceneParams()), root)


def test_a_worker_without_a_policy_package_says_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "r001-bc").mkdir(parents=True)
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and "coda_policy" not in p]
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from coda_engine.policies import PolicyNotAvailableError, resolve
        from coda_engine.sim.generator import generate_seeded
        from coda_engine.sim.scene import SceneParams
        assert "coda_policy" not in " ".join(sys.path)
        try:
            resolve("r001-bc", generate_seeded("reach", 3, SceneParams()), Path({str(tmp_path / "checkpoints")!r}))
        except PolicyNotAvailableError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "policy version 'r001-bc': no policy loader is installed" in done.stdout, done.stdout
    assert "coda_engine.policy_loaders" in done.stdout and "install coda_policy" in done.stdout
