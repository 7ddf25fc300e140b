# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Dependencies run one way: what each package imports is what its package.xml declares, and the graph has no cycle.

The checker is ``scripts/package_graph.py``. It runs here on the workspace, and on copies of the workspace's
package.xml and Python files with a back-import planted in them (lazy, through importlib, as a ``-m`` module string,
in a test, with and without the matching ``exec_depend``): each must be reported with its file and line.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "package_graph.py"
_spec = importlib.util.spec_from_file_location("coda_package_graph", SCRIPT)
package_graph = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = package_graph  # dataclasses look their module up while the class is created
_spec.loader.exec_module(package_graph)

LAYERS = [["coda_msgs"], ["coda_core_cpp"], ["coda_engine"], ["coda_critic", "coda_policy"], ["coda_loop"]]
"""The intended architecture, bottom up. Changing it is a design decision: update README's package map with it."""


def test_every_import_is_declared_and_the_graph_runs_one_way() -> None:
    graph = package_graph.check(REPO / "src")
    assert graph.problems == [], "\n".join(graph.problems)
    assert package_graph.layers(graph.workspace_edges()) == LAYERS


def test_readme_package_map_shows_the_declared_graph() -> None:
    readme = (REPO / "README.md").read_text()
    shown = re.findall(r"^(coda_\w+) +-> (.+)$", readme, re.M)
    edges = package_graph.check(REPO / "src").workspace_edges()
    assert {pkg: set() if deps == "(none)" else set(deps.split(", ")) for pkg, deps in shown} == edges
    assert "\n".join(package_graph.graph_lines(edges)) in readme  # the same lines, top of the graph first


def test_local_rosdep_keys_are_defined_and_pinned() -> None:
    """Keys rosdistro lacks are defined in requirements/rosdep.yaml with a pip package the constraints pin."""
    import yaml

    local = yaml.safe_load((REPO / package_graph.LOCAL_ROSDEP_FILE).read_text())
    pinned = {re.split(r"==", line)[0].lower().replace("_", "-")
              for line in (REPO / "requirements" / "constraints.txt").read_text().splitlines() if "==" in line}
    declared = {key for pkg in package_graph.check(REPO / "src").packages.values()
                for key in pkg.declared(package_graph.TEST_CATEGORIES)}
    needed = {key for key in package_graph.IMPORT_KEYS.values() if key in declared and key in local}
    assert needed == set(local), "requirements/rosdep.yaml defines keys no package uses, or misses some"
    for key, rules in local.items():
        for os_name in ("debian", "ubuntu"):
            (dist,) = rules[os_name]["pip"]["packages"]
            assert dist.lower() in pinned, f"{key}: pip package {dist} is not pinned in requirements/constraints.txt"


# ---------------------------------------------------------------- the checker on planted back-imports
@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """Return a copy of every package.xml and Python file of src/ and launch/ (the checker reads nothing else)."""
    src = tmp_path / "src"
    for folder in ("src", "launch"):
        for path in (REPO / folder).rglob("*"):
            wanted = path.name == "package.xml" or path.suffix == ".py"
            if path.is_file() and wanted and "__pycache__" not in path.parts:
                target = tmp_path / path.relative_to(REPO)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
    return src


def _plant(file: Path, code: str) -> int:
    """Append ``code`` to ``file``; return the line number of its last line (where the planted import stands)."""
    text = file.read_text()
    file.write_text(text + "\n\n" + code.strip("\n") + "\n")
    return len(file.read_text().splitlines())


def _declare(package_xml: Path, tag: str, key: str) -> None:
    text = package_xml.read_text()
    package_xml.write_text(text.replace("  <export>", f"  <{tag}>{key}</{tag}>\n\n  <export>", 1))


def test_the_copy_of_the_workspace_is_clean(workspace: Path) -> None:
    assert package_graph.check(workspace).problems == []


def test_a_lazy_back_import_is_reported_with_its_file_and_line(workspace: Path) -> None:
    scene = workspace / "coda_engine" / "coda_engine" / "sim" / "scene.py"
    line = _plant(scene, '''
def _planted() -> object:
    from coda_loop.memory import MemoryStore
    return MemoryStore''')
    problems = package_graph.check(workspace).problems
    assert problems == [
        f"src/coda_engine/coda_engine/sim/scene.py:{line - 1}: lazy import of 'coda_loop.memory' needs 'coda_loop', "
        "which coda_engine's package.xml does not declare (depend/exec_depend)"
    ]
    result = subprocess.run([sys.executable, str(SCRIPT), "--check", "--src", str(workspace)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and problems[0] in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("package,relative,code,how,needs", [
    ("coda_engine", "coda_engine/policies.py",
     'def _planted() -> object:\n    return importlib.import_module("coda_policy.serving")',
     "import_module of 'coda_policy.serving'", "coda_policy"),
    ("coda_policy", "coda_policy/bench_control.py",
     'PLANTED = [sys.executable, "-m", "coda_loop.ros.loop_node"]',
     "named in a string of 'coda_loop.ros.loop_node'", "coda_loop"),
    ("coda_critic", "coda_critic/grounded.py",
     "try:\n    from coda_policy.model import CodaPolicyNet\nexcept ImportError:\n    CodaPolicyNet = None",
     "import of 'coda_policy.model'", "coda_policy"),
    ("coda_engine", "test/test_sim_scene.py",
     "def test_planted() -> None:\n    import coda_critic.grounded  # noqa: F401",
     "lazy import of 'coda_critic.grounded'", "coda_critic"),
])
def test_every_form_of_back_import_is_reported(workspace: Path, package: str, relative: str, code: str, how: str,
                                               needs: str) -> None:
    line = _plant(workspace / package / relative, code)
    problems = package_graph.check(workspace).problems
    assert len(problems) == 1, problems
    where = f"src/{package}/{relative}:"
    assert problems[0].startswith(where) and f"{how} needs '{needs}'" in problems[0], problems
    assert int(problems[0][len(where):].split(":")[0]) in range(line - 3, line + 1), problems


def test_declaring_the_back_edge_makes_a_cycle(workspace: Path) -> None:
    _plant(workspace / "coda_engine" / "coda_engine" / "episodes.py",
           "def _planted() -> object:\n    from coda_policy.serving import load_action_fn\n    return load_action_fn")
    _declare(workspace / "coda_engine" / "package.xml", "exec_depend", "coda_policy")
    problems = package_graph.check(workspace).problems
    assert problems == ["cycle among the declared dependencies: coda_engine -> coda_policy -> coda_engine"]
    # a test_depend closes a cycle too: colcon orders packages by their test dependencies as well
    _declare(workspace / "coda_engine" / "package.xml", "test_depend", "coda_loop")
    _plant(workspace / "coda_engine" / "test" / "test_sim_scene.py", "from coda_loop.fleet import Fleet  # noqa: F401")
    cycles = [p for p in package_graph.check(workspace).problems if p.startswith("cycle")]
    assert len(cycles) == 1 and "coda_engine -> coda_loop" in cycles[0], cycles


def test_an_arrow_the_code_does_not_have_and_an_unknown_import_are_reported(workspace: Path) -> None:
    _declare(workspace / "coda_critic" / "package.xml", "exec_depend", "coda_policy")
    _plant(workspace / "coda_policy" / "coda_policy" / "metrics.py", "import no_such_distribution  # noqa: F401")
    problems = package_graph.check(workspace).problems
    assert any(p.startswith("src/coda_critic/package.xml: declares 'coda_policy' for its code") for p in problems)
    assert any("import of 'no_such_distribution': no dependency key known" in p for p in problems), problems
    assert len(problems) == 2, problems
