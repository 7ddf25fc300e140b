# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""README.md and docs/*.md against the code: every command they show runs or names what exists.

- A fenced ``bash`` block with ``<!-- runnable -->`` on the line before it is run, in a scratch folder that sees
  the repository's files (every top-level entry linked, except ``runs/``, so what the commands write stays in the
  scratch folder). A block right after it marked ``<!-- output -->`` lists lines its output must contain.
- Every other ``coda`` command of a ``bash`` block or an inline code span must name a subcommand and options that
  ``coda ... --help`` lists; every ``ros2 launch`` argument must be declared by its launch file, every ``ros2 run``
  executable installed and every ``-p`` parameter declared by that node; every ``make`` target must exist.
- Relative links and their anchors resolve; repository paths named in the task pages exist; the node tables of
  docs/ros2.md are what the nodes offer (``scripts/ros_interfaces.py --check``, a runnable block there); the
  settings table of docs/loop.md holds ``LoopConfig``'s defaults; README's picture is what the records draw.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
HISTORY = REPO / "docs" / "results.md"
"""Holds the measurements' history below its opening: its commands are checked, its paths are as they were then."""
RUNNABLE, OUTPUT = "<!-- runnable -->", "<!-- output -->"
LAUNCH_BUILTINS = {"sigterm_timeout", "sigkill_timeout"}
"""Launch configurations every ``ros2 launch`` file reads (``ExecuteProcess``'s signal timeouts)."""
PATH_ROOTS = ("src/", "docs/", "scripts/", "test/", "launch/", "fuzz/", "requirements/")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    info: str
    text: str
    runnable: bool
    output: bool

    @property
    def name(self) -> str:
        """``page:line``, for test ids and messages."""
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Return the fenced code blocks of ``page`` with their markers."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(```+)(.*)$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)))
        before = lines[i - 1].strip() if i > 0 else ""
        found.append(Block(page, i + 1, fence.group(2).strip(), "\n".join(lines[i + 1:end]),
                           runnable=before == RUNNABLE, output=before == OUTPUT))
        i = end + 1
    return found


def runnable_blocks() -> list[tuple[Block, Block | None]]:
    """Return every runnable block with the output block that follows it (or None)."""
    pairs = []
    for page in PAGES:
        found = blocks(page)
        for k, block in enumerate(found):
            if block.runnable:
                assert block.info == "bash", f"{block.name}: a runnable block must be a bash block"
                following = found[k + 1] if k + 1 < len(found) else None
                pairs.append((block, following if following is not None and following.output else None))
    return pairs


def commands(text: str) -> Iterator[list[str]]:
    r"""Yield the simple commands of shell text as token lists (comments dropped, ``\`` lines joined)."""
    text = text.replace("\\\n", " ")
    for line in text.splitlines():
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        command: list[str] = []
        for token in [*tokens, ";"]:
            if token in {";", "&&", "||", "|"}:
                if command:
                    yield command
                command = []
            else:
                command.append(token)


def shell_texts(page: Path) -> Iterator[tuple[str, str]]:
    """Yield (where, shell text) of the page's bash blocks and of its inline code spans that start a command."""
    for block in blocks(page):
        if block.info.startswith("bash"):
            yield block.name, block.text
    prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for span in re.findall(r"`([^`\n]+)`", prose):
        if re.match(r"(coda [a-z]+|ros2 launch (launch/|\w+ )\w+\.launch\.py|ros2 run \w+ \w+|make [a-z]+)( |$)",
                    span):
            yield f"{page.relative_to(REPO)} (inline)", span


# ---------------------------------------------------------------- coda subcommands and options
@functools.cache
def coda_help(*words: str) -> tuple[int, str]:
    """Return the exit code and output of ``coda WORDS --help``."""
    done = subprocess.run([sys.executable, "-m", "coda_loop.cli", *words, "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def coda_problems(tokens: list[str]) -> list[str]:
    """Return what is wrong with one ``coda ...`` command: an unknown subcommand or option."""
    from coda_loop.cli import SUBCOMMANDS

    if len(tokens) < 2 or tokens[1] in {"-h", "--help"}:
        return []
    words = [tokens[1]]
    if words[0] not in SUBCOMMANDS:
        return [f"`coda {words[0]}`: no such subcommand (coda --help lists {', '.join(SUBCOMMANDS)})"]
    code, text = coda_help(*words)
    if code != 0:
        return [f"`coda {words[0]} --help` exits {code}: {text[-300:]}"]
    usage = text.split("\n\n", 1)[0]
    rest = tokens[2:]
    if usage.rstrip().endswith("..."):  # subparsers: the next word names the nested command
        nested = next((t for t in rest if not t.startswith("-")), None)
        if nested is None:
            return []
        rest = rest[rest.index(nested) + 1:]
        if "|" in nested:  # `coda critic train|eval`: each of the alternatives
            return [p for alt in nested.split("|") for p in coda_problems(["coda", words[0], alt, *rest])]
        words.append(nested)
        code, text = coda_help(*words)
        if code != 0:
            return [f"`coda {' '.join(words)}`: no such command ({text.strip().splitlines()[-1]})"]
    options = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text))
    return [f"`coda {' '.join(words)}` has no option {option} (see its --help)"
            for option in (t.split("=", 1)[0] for t in rest if t.startswith("--")) if option not in options]


# ---------------------------------------------------------------- launch files
class _Anything:
    """Stands for every class and function of ``launch`` / ``launch_ros`` while a launch file is read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return _Anything()

    def __getattr__(self, name: str) -> _Anything:
        return _Anything()


class _Declared(_Anything):
    def __init__(self, name: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(name, *args, **kwargs)
        self.name, self.default = name, kwargs.get("default_value")


class _Description:
    def __init__(self, entities: Any = ()) -> None:
        self.entities = list(entities)


@functools.cache
def launch_arguments(path: Path) -> dict[str, str]:
    """Return the arguments a launch file declares (name -> default), read with stand-ins for ``launch``."""
    def module(name: str, **attributes: Any) -> types.ModuleType:
        stub = types.ModuleType(name)
        stub.__getattr__ = lambda _: _Anything  # type: ignore[method-assign]
        stub.__dict__.update(attributes)
        return stub

    stubs = {name: module(name) for name in ("launch.event_handlers", "launch.events", "launch.events.process",
                                             "launch.substitutions", "launch_ros", "launch_ros.actions",
                                             "launch_ros.parameter_descriptions")}
    stubs["launch"] = module("launch", LaunchDescription=_Description)
    stubs["launch.actions"] = module("launch.actions", DeclareLaunchArgument=_Declared)
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location(f"launch_file_{path.stem.replace('.', '_')}", path)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        description = loaded.generate_launch_description()
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return {e.name: e.default for e in description.entities if isinstance(e, _Declared)}


def ros2_problems(tokens: list[str]) -> list[str]:
    """Return what is wrong with one ``ros2 launch`` or ``ros2 run`` command."""
    if len(tokens) < 3 or tokens[1] not in {"launch", "run"}:
        return []
    if tokens[1] == "launch":  # the path form (launch/<file>) or the package form (<package> <file>)
        packaged = len(tokens) > 3 and ":=" not in tokens[3] and not tokens[2].endswith(".py")
        name = " ".join(tokens[2:4]) if packaged else tokens[2]
        path = (REPO / "install" / tokens[2] / "share" / tokens[2] / "launch" / tokens[3]) if packaged \
            else REPO / tokens[2]
        if not path.is_file():
            return [f"`ros2 launch {name}`: no such launch file ({path.relative_to(REPO)})"]
        declared = launch_arguments(path)
        return [f"`ros2 launch {name}` declares no argument {arg!r} (it has {sorted(declared)})"
                for arg in (t.split(":=", 1)[0] for t in tokens[3 + packaged:] if ":=" in t)
                if arg not in declared and arg not in LAUNCH_BUILTINS]
    if len(tokens) < 4:
        return [f"`{' '.join(tokens)}`: ros2 run needs a package and an executable"]
    package, executable = tokens[2], tokens[3]
    if not (REPO / "install" / package / "lib" / package / executable).exists():
        return [f"`ros2 run {package} {executable}`: not installed (install/{package}/lib/{package}/{executable})"]
    if executable == "coda":
        return coda_problems(tokens[3:])
    known = node_parameters().get(executable)
    parameters = [tokens[i + 1].split(":=", 1)[0] for i, t in enumerate(tokens[:-1]) if t == "-p"]
    if parameters and known is None:
        return [f"`ros2 run {package} {executable}`: no parameter table for it in docs/ros2.md"]
    return [f"`ros2 run {package} {executable}` has no parameter {name!r}" for name in parameters
            if name not in (known or set())]


@functools.cache
def node_parameters() -> dict[str, set[str]]:
    """Return executable -> parameter names, from docs/ros2.md's generated tables (held to the code below)."""
    out: dict[str, set[str]] = {}
    current = None
    for line in (REPO / "docs" / "ros2.md").read_text().splitlines():
        heading = re.match(r"^### `(\w+)` \(`ros2 run \w+ \w+`\)", line)
        if heading:
            current = out.setdefault(heading.group(1), set())
        elif current is not None and (row := re.match(r"^\| `(\w+)` \| `", line)):
            current.add(row.group(1))
    return out


def make_problems(tokens: list[str]) -> list[str]:
    """Return what is wrong with one ``make`` command."""
    targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), re.M))
    return [f"`make {t}`: no such target (Makefile has {sorted(targets)})"
            for t in tokens[1:] if "=" not in t and not t.startswith("-") and t not in targets]


def command_problems(text: str) -> list[str]:
    """Return every problem of the commands in shell text."""
    problems = []
    for tokens in commands(text):
        if tokens[0] == "coda":
            problems += coda_problems(tokens)
        elif tokens[0] == "ros2":
            problems += ros2_problems(tokens)
        elif tokens[0] == "make":
            problems += make_problems(tokens)
    return problems


# ---------------------------------------------------------------- the tests
@pytest.mark.ros
@pytest.mark.parametrize(("block", "expected"), runnable_blocks(), ids=lambda b: b.name if b else "")
def test_runnable_block_runs(block: Block, expected: Block | None, tmp_path: Path, ros_domain: int) -> None:
    for entry in REPO.iterdir():
        if entry.name not in {"runs", ".git"}:
            (tmp_path / entry.name).symlink_to(entry)
    env = {**os.environ, "ROS_DOMAIN_ID": str(ros_domain)}
    script = f"set -eo pipefail\nsource scripts/env.sh\n{block.text}\n"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{block.name} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    if expected is not None:
        printed = {line.rstrip() for line in (done.stdout + done.stderr).splitlines()}
        missing = [line for line in expected.text.splitlines() if line.rstrip() not in printed]
        assert not missing, f"{block.name}: the output lacks the lines of {expected.name}: {missing}\n{done.stdout}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_names_what_exists(page: Path) -> None:
    problems = [f"{where}: {problem}" for where, text in shell_texts(page) for problem in command_problems(text)]
    assert not problems, "\n".join(problems)


def test_the_checks_catch_a_renamed_subcommand_option_or_argument() -> None:
    assert command_problems("coda eval --policy runs/x --json") == []
    assert command_problems("coda evaluate --policy runs/x")  # a renamed subcommand
    assert command_problems("coda eval --policies runs/x")  # a renamed option
    assert command_problems("coda train sft --steps 2") == [] and command_problems("coda train sfx --steps 2")
    assert command_problems("coda bench core --json") == [] and command_problems("coda bench core --jsn")
    assert command_problems("ros2 launch launch/coda_sim.launch.py run_dir:=runs/x") == []
    assert command_problems("ros2 launch launch/coda_sim.launch.py rundir:=runs/x")
    assert command_problems("ros2 launch coda_loop coda_sim.launch.py run_dir:=runs/x") == []
    assert command_problems("ros2 launch coda_loop coda_sim.launch.py rundir:=runs/x")
    assert command_problems("ros2 launch coda_engine coda_sim.launch.py run_dir:=runs/x")  # not that package's
    assert command_problems("ros2 run coda_loop memory --ros-args -p db_path:=m.db") == []
    assert command_problems("ros2 run coda_loop memory --ros-args -p db:=m.db")
    assert command_problems("make run") == [] and command_problems("make start")


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", prose, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_and_paths_resolve(page: Path) -> None:
    prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            problems.append(f"link {target}: no {path}")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            problems.append(f"link {target}: no heading #{anchor} in {path.name}")
    if page != HISTORY:
        ignored = [line.strip("/") for line in (REPO / ".gitignore").read_text().splitlines() if "/" in line.strip("/")]
        text = page.read_text()
        for span in re.findall(r"`([^`\n]+)`", text) + [t for b in blocks(page) for t in b.text.split()]:
            if not span.startswith(PATH_ROOTS) or "<" in span or " " in span or span.startswith(tuple(ignored)):
                continue
            path = re.sub(r"\.json:\w+$", ".json", span.rstrip(".,:;)"))  # FILE:METHOD of coda compare
            expanded = re.sub(r"\{([\d,]+)\}", lambda m: f"[{m.group(1).replace(',', '')}]", path)
            # a package's own paths (src/gae.cpp in coda_core_cpp's table) count too
            if not list(REPO.glob(expanded)) and not list(REPO.glob(f"src/*/{expanded}")):
                problems.append(f"path {span}: nothing in the repository")
    assert not problems, f"{page.relative_to(REPO)}:\n" + "\n".join(problems)


def test_launch_table_lists_every_declared_argument() -> None:
    section = (REPO / "docs" / "ros2.md").read_text().split("\n## Launch files\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+\.launch\.py)` \| [^|]+ \| (.+) \|$", section, re.M)
    files = sorted(p.name for p in (REPO / "launch").glob("*.launch.py"))
    assert sorted(name for name, _ in rows) == files
    for name, cell in rows:
        declared = launch_arguments(REPO / "launch" / name)
        shown = re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", cell))
        assert sorted(shown) == sorted(declared), f"{name}: the table shows {shown}, the file declares {declared}"
        for argument, default in re.findall(r"`(\w+)` \(`([^`]*)`\)", cell):
            assert declared[argument] == default, f"{name}: {argument} defaults to {declared[argument]!r}"


def test_loop_settings_table_holds_the_defaults() -> None:
    from coda_loop.config import METHODS, LoopConfig

    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                for f in dataclasses.fields(LoopConfig)}
    text = (REPO / "docs" / "loop.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", text, re.M)
    assert len(rows) >= 10
    for field, shown in rows:
        assert field in defaults, f"docs/loop.md: LoopConfig has no field {field}"
        value = defaults[field]
        written = (str(value).lower() if isinstance(value, bool) else
                   "[" + ", ".join(f'"{v}"' for v in value) + "]" if isinstance(value, tuple) else str(value))
        assert written == shown, f"docs/loop.md: {field} defaults to {written}, the page says {shown}"
    section = text.split("\n## Methods\n", 1)[1].split("\n## ", 1)[0]
    methods = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert methods == list(METHODS), f"docs/loop.md's methods table lists {methods}; METHODS is {METHODS}"


def test_readme_is_short_and_its_picture_is_what_the_records_draw() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 160
    assert "docs/images/bench-ood-per-round.svg" in readme and "python scripts/results_plot.py" in readme
    done = subprocess.run([sys.executable, "scripts/results_plot.py", "--check"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
