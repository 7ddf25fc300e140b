# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The potential compiler's fuzz corpus (``fuzz/corpus/potential/``) replayed in-process, without the fuzzer.

Every input, the hand-written seeds and the inputs the coverage-guided runs kept, goes through the fuzz target
itself (``test_one_input`` of ``fuzz/potential_compiler.py``: the C++ compiler and the Python reference agree,
accepted programs evaluate alike, the translator never raises; docs/security.md, "Fuzzing"). Each program is also
compiled once more here and must be accepted or refused with ``PotentialError`` (``ValueError`` naming the layout
for a bad layout), never another exception. Every input is replayed and every failure named, not just the first.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "fuzz" / "potential_compiler.py"
CORPUS = REPO / "fuzz" / "corpus" / "potential"
KEPT_BY_THE_RUNS = 1332
"""Inputs the fuzzing runs kept (docs/security.md); libFuzzer names each by the SHA-1 of its bytes."""


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    """Return the fuzz target's module, loaded from its file (``fuzz/`` is not a package)."""
    spec = importlib.util.spec_from_file_location("potential_compiler_harness", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs() -> list[Path]:
    return sorted(p for p in CORPUS.iterdir() if p.is_file())


def _compiled(harness: ModuleType, data: bytes) -> str:
    """Compile one program input with the C++ compiler; return ``accepted`` or the documented refusal's type."""
    import coda_core_cpp as core
    from coda_core_cpp.errors import PotentialError
    from coda_engine.sim.layout import LAYOUT

    _, source, layout, _ = harness.decode(data)
    try:
        core.PotentialProgram.compile(source, dict(LAYOUT) if layout is None else layout)
    except PotentialError as error:
        assert error.message and error.line >= 1 and error.column >= 1, error
        return "PotentialError"
    except ValueError as error:
        assert type(error) is ValueError and str(error).startswith("layout"), f"{type(error).__name__}: {error}"
        return "ValueError (layout)"
    return "accepted"


def test_the_corpus_is_the_runs_inputs_unedited() -> None:
    kept = [p for p in _inputs() if re.fullmatch(r"[0-9a-f]{40}", p.name)]
    assert len(kept) >= KEPT_BY_THE_RUNS, f"{len(kept)} inputs in {CORPUS}, the runs kept {KEPT_BY_THE_RUNS}"
    edited = [p.name for p in kept if hashlib.sha1(p.read_bytes()).hexdigest() != p.name]
    assert not edited, f"inputs whose bytes no longer match their name: {edited[:10]}"
    seeds = [p.name for p in _inputs() if p.suffix == ".pot"]
    assert {"finding-comment-not-utf8.pot", "finding-layout-nul-name.pot", "layout-header.pot"} <= set(seeds)


def test_every_corpus_input_keeps_the_fuzz_contract(harness: ModuleType) -> None:
    outcomes: Counter[str] = Counter()
    problems = []
    for path in _inputs():
        data = path.read_bytes()
        try:
            harness.test_one_input(data)
            kind = harness.decode(data)[0]
            outcomes["text translated" if kind == "text" else _compiled(harness, data)] += 1
        except Exception as error:  # every input is replayed, each failure named
            problems.append(f"{path.name}: {type(error).__name__}: {str(error)[:300]}")
    assert not problems, f"{len(problems)} of {len(_inputs())} inputs break the contract:\n" + "\n".join(problems)
    assert sum(outcomes.values()) == len(_inputs())
    # The replay reached every way out: programs accepted, refused by the compiler and by the layout check, texts.
    assert min(outcomes[k] for k in ("accepted", "PotentialError", "ValueError (layout)", "text translated")) > 0, \
        outcomes
