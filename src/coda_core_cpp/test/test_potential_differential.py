# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Differential tests: the C++ potential language against the pure-Python reference.

Property-generated well-typed programs must give bit-identical phi and stages on generated
states (NaN/inf included); random and mutated sources must never crash and must be rejected (or
accepted) identically, with the same line, column and message.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import coda_core_cpp as core
from coda_core_cpp import reference
from coda_core_cpp.errors import PotentialError

LAYOUT = {"a": (0, 1), "b": (1, 1), "p": (2, 3), "q": (5, 3), "u": (8, 2), "w": (10, 2)}
DIM = 13
NAMES = {1: ["a", "b"], 2: ["u", "w"], 3: ["p", "q"]}
NUMBERS = ["0", "1", "2", "0.5", "0.02", "0.3", "1e-3", "1.5e2", ".25", "3.", "1e30", "0.1"]

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _expr(draw: st.DrawFn, width: int, depth: int) -> str:
    leaf = depth <= 0 or draw(st.integers(0, 3)) == 0
    if width > 1:
        if leaf:
            return draw(st.sampled_from(NAMES[width]))
        kind = draw(st.integers(0, 5))
        if kind == 0:
            return f"-{_expr(draw, width, depth - 1)}"
        if kind == 1:
            op = draw(st.sampled_from(["+", "-"]))
            return f"({_expr(draw, width, depth - 1)} {op} {_expr(draw, width, depth - 1)})"
        if kind == 2:
            return f"{_expr(draw, 1, depth - 1)} * {_expr(draw, width, depth - 1)}"
        if kind == 3:
            op = draw(st.sampled_from(["*", "/"]))
            return f"({_expr(draw, width, depth - 1)} {op} {_expr(draw, 1, depth - 1)})"
        return f"({_expr(draw, width, depth - 1)})"
    if leaf:
        choice = draw(st.integers(0, 2))
        if choice == 0:
            return draw(st.sampled_from(NUMBERS))
        if choice == 1:
            return draw(st.sampled_from(NAMES[1]))
        w = draw(st.sampled_from([2, 3]))
        return f"{draw(st.sampled_from(NAMES[w]))}.{draw(st.sampled_from('xyz'[:w]))}"
    kind = draw(st.integers(0, 11))
    sub = depth - 1
    if kind == 0:
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        return f"({_expr(draw, 1, sub)} {op} {_expr(draw, 1, sub)})"
    if kind == 1:
        return f"-{_expr(draw, 1, sub)}"
    if kind == 2:
        op = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
        return f"({_expr(draw, 1, sub)} {op} {_expr(draw, 1, sub)})"
    if kind == 3:
        op = draw(st.sampled_from(["and", "or"]))
        return f"({_expr(draw, 1, sub)} {op} {_expr(draw, 1, sub)})"
    if kind == 4:
        return f"(not {_expr(draw, 1, sub)})"
    if kind == 5:
        w = draw(st.sampled_from([2, 3]))
        return f"dist({_expr(draw, w, sub)}, {_expr(draw, w, sub)})"
    if kind == 6:
        return f"dist_xy({_expr(draw, draw(st.sampled_from([2, 3])), sub)}, " \
               f"{_expr(draw, draw(st.sampled_from([2, 3])), sub)})"
    if kind == 7:
        return f"norm({_expr(draw, draw(st.sampled_from([2, 3])), sub)})"
    if kind == 8:
        return f"{draw(st.sampled_from(['abs', 'exp']))}({_expr(draw, 1, sub)})"
    if kind == 9:
        n = draw(st.integers(2, 4))
        args = ", ".join(_expr(draw, 1, sub) for _ in range(n))
        return f"{draw(st.sampled_from(['min', 'max']))}({args})"
    if kind == 10:
        return f"clip({_expr(draw, 1, sub)}, {_expr(draw, 1, sub)}, {_expr(draw, 1, sub)})"
    w = draw(st.sampled_from([2, 3]))
    return f"({_expr(draw, w, sub)}).{draw(st.sampled_from('xyz'[:w]))}"


@st.composite
def programs(draw: st.DrawFn) -> str:
    k = draw(st.integers(1, 4))
    lines = []
    for i in range(k):
        lines.append(f"stage s{i}:")
        lines.append(f"  progress = {_expr(draw, 1, draw(st.integers(0, 4)))}")
        lines.append(f"  done = {_expr(draw, 1, draw(st.integers(0, 4)))}")
    return "\n".join(lines) + "\n"


SPECIAL = [0.0, -0.0, 1.0, 0.5, 0.02, 0.3, np.nan, np.inf, -np.inf, 1e-45, 3.4e38, -1.0]
elements = st.one_of(
    st.floats(-2.0, 2.0, width=32),
    st.sampled_from(SPECIAL),
    st.sampled_from([np.nan, np.inf, -np.inf]),
    st.floats(width=32, allow_nan=True, allow_infinity=True),
)


@SETTINGS
@given(source=programs(), data=st.data())
def test_cpp_equals_reference_on_generated_programs(source: str, data: st.DataObject) -> None:
    cpp = core.PotentialProgram.compile(source, LAYOUT)
    ref = reference.PotentialProgram.compile(source, LAYOUT)
    assert cpp.stages == ref.stages
    n = data.draw(st.integers(1, 70))
    states = data.draw(hnp.arrays(np.float32, (n, DIM), elements=elements))
    stages = data.draw(hnp.arrays(np.int32, (n,), elements=st.integers(0, cpp.num_stages)))
    phi, new = cpp.evaluate_batch(states, stages)
    ref_phi, ref_new = ref.evaluate_batch(states, stages)
    np.testing.assert_array_equal(new, ref_new)
    np.testing.assert_array_equal(phi, ref_phi)
    assert np.all((phi >= 0) & (phi <= 1))
    for i in range(min(n, 5)):
        single = cpp.evaluate(states[i], int(stages[i]))
        assert single == ref.evaluate(states[i], int(stages[i]))
        assert single == (float(phi[i]), int(new[i]))


def test_non_finite_leaves_agree() -> None:
    """Every construct applied directly to NaN / inf / -0.0 inputs, on both implementations."""
    exprs = ["a", "not a", "a and b", "a or b", "a < b", "a == a", "a != a", "min(a, b)", "max(a, b)", "clip(a, b, 1)",
             "abs(a)", "exp(a)", "a / b", "a * b", "a - b", "-a", "norm(p)", "dist(p, q)", "dist_xy(u, q)", "(a * p).z"]
    values = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 1e-45, 3.4e38, 88.8]
    grid = np.array([[x, y] for x in values for y in values], np.float32)
    states = np.tile(np.linspace(-1, 1, DIM, dtype=np.float32), (len(grid), 1))
    states[:, 0:2] = grid
    states[:, 2:5] = grid[:, :1]
    for e in exprs:
        source = f"stage one:\n  progress = {e}\n  done = {e}\nstage two:\n  progress = {e}\n  done = 0\n"
        cpp = core.PotentialProgram.compile(source, LAYOUT)
        ref = reference.PotentialProgram.compile(source, LAYOUT)
        stages = np.zeros(len(grid), np.int32)
        phi, new = cpp.evaluate_batch(states, stages)
        ref_phi, ref_new = ref.evaluate_batch(states, stages)
        np.testing.assert_array_equal(new, ref_new, err_msg=e)
        np.testing.assert_array_equal(phi, ref_phi, err_msg=e)


def _outcome(impl: object, source: str) -> tuple:
    try:
        prog = impl.PotentialProgram.compile(source, LAYOUT)
    except PotentialError as err:
        return ("error", err.line, err.column, err.message)
    state = np.linspace(-1, 1, DIM, dtype=np.float32)
    return ("ok", prog.stages, *(prog.evaluate(state, s) for s in range(prog.num_stages + 1)))


def _assert_same(source: str) -> None:
    cpp, ref = _outcome(core, source), _outcome(reference, source)
    assert cpp == ref, source
    if cpp[0] == "error":
        assert cpp[1] >= 1 and cpp[2] >= 1


ALPHABET = [*"stagepr od=():,.+-*/<>!#\n \t0123456789eE_xyzapquw", "and", "or", "not", "dist", "clip", "\x00", "\xff",
            "\u00e9", "\ud800"]


@SETTINGS
@given(st.lists(st.sampled_from(ALPHABET), max_size=60).map("".join))
def test_random_sources_are_rejected_identically(source: str) -> None:
    _assert_same(source)


@SETTINGS
@given(st.text(max_size=60))
def test_arbitrary_unicode_never_crashes(source: str) -> None:
    _assert_same(source)


@SETTINGS
@given(source=programs(), data=st.data())
def test_mutated_programs_are_rejected_identically(source: str, data: st.DataObject) -> None:
    for _ in range(data.draw(st.integers(1, 4))):
        if not source:
            break
        at = data.draw(st.integers(0, len(source) - 1))
        op = data.draw(st.integers(0, 3))
        if op == 0:
            source = source[:at] + source[at + data.draw(st.integers(1, 4)):]
        elif op == 1:
            source = source[:at] + data.draw(st.sampled_from(ALPHABET)) + source[at:]
        elif op == 2:
            source = source[:at] + data.draw(st.sampled_from(ALPHABET)) + source[at + 1:]
        else:
            start = data.draw(st.integers(0, len(source) - 1))
            source = source[:at] + source[start:start + data.draw(st.integers(1, 12))] + source[at:]
    _assert_same(source)


def test_deep_and_wide_hostile_sources_agree() -> None:
    cases = [
        "stage a:\n progress = " + "-" * 70 + "1\n done = 1\n",
        "stage a:\n progress = " + "not " * 70 + "1\n done = 1\n",
        "stage a:\n progress = " + " + ".join(["1"] * 70) + "\n done = 1\n",
        "stage a:\n progress = min(" + ", ".join(str(i) for i in range(3000)) + ")\n done = 1\n",
        "stage a:\n progress = " + "abs(" * 70 + "1" + ")" * 70 + "\n done = 1\n",
        "stage a:\n progress = (" + "p + " * 62 + "p).x\n done = 1\n",
    ]
    for source in cases:
        _assert_same(source)
