# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""PotentialProgram (C++) and its reference: API, stage semantics, errors, shaping, benchmark command."""

from __future__ import annotations

import json

import numpy as np
import pytest

import coda_core_cpp as core
from coda_core_cpp import bench, reference
from coda_core_cpp.errors import PotentialError

LAYOUT = {"ee_pos": (0, 3), "red_cube_pos": (3, 3), "gripper": (6, 1), "xy": (7, 2)}
EXAMPLE = """\
stage reach:
  progress = 1 - clip(dist(ee_pos, red_cube_pos) / 0.3, 0, 1)
  done     = dist(ee_pos, red_cube_pos) < 0.02
stage lift:
  progress = clip((red_cube_pos.z - 0.42) / 0.1, 0, 1)
  done     = red_cube_pos.z > 0.50
"""
IMPLS = [pytest.param(core, id="cpp"), pytest.param(reference, id="reference")]


def _state(ee: tuple[float, float, float], cube: tuple[float, float, float]) -> np.ndarray:
    return np.array([*ee, *cube, 0.0, 0.0, 0.0], np.float32)


@pytest.mark.parametrize("impl", IMPLS)
def test_metadata(impl: object) -> None:
    prog = impl.PotentialProgram.compile(EXAMPLE, LAYOUT)
    assert prog.num_stages == 2
    assert prog.stage_names == ["reach", "lift"]
    assert prog.stages == [
        ("reach", "1 - clip(dist(ee_pos, red_cube_pos) / 0.3, 0, 1)", "dist(ee_pos, red_cube_pos) < 0.02"),
        ("lift", "clip((red_cube_pos.z - 0.42) / 0.1, 0, 1)", "red_cube_pos.z > 0.50"),
    ]
    assert prog.source == EXAMPLE
    assert prog.layout == LAYOUT
    assert prog.required_dim == 9


@pytest.mark.parametrize("impl", IMPLS)
def test_stage_semantics(impl: object) -> None:
    prog = impl.PotentialProgram.compile(EXAMPLE, LAYOUT)
    phi, stage = prog.evaluate(_state((0, 0, 0.4), (0.15, 0, 0.4)), 0)
    assert stage == 0 and phi == pytest.approx(0.25, abs=1e-6)
    phi, stage = prog.evaluate(_state((0.1, 0.1, 0.47), (0.1, 0.1, 0.47)), 0)
    assert stage == 1 and phi == pytest.approx(0.75, abs=1e-6)
    assert prog.evaluate(_state((0.1, 0.1, 0.6), (0.1, 0.1, 0.6)), 0) == (1.0, 2)
    assert prog.evaluate(_state((0, 0, 0), (1, 1, 0)), 2) == (1.0, 2)
    with pytest.raises(ValueError, match=r"stage must be in \[0, 2\], got 3"):
        prog.evaluate(_state((0, 0, 0), (1, 1, 0)), 3)
    with pytest.raises(ValueError, match="needs at least 9"):
        prog.evaluate(np.zeros(8, np.float32), 0)


@pytest.mark.parametrize("impl", IMPLS)
def test_evaluate_batch_and_its_errors(impl: object) -> None:
    prog = impl.PotentialProgram.compile(EXAMPLE, LAYOUT)
    states = np.stack([_state((0, 0, 0.4), (0.15, 0, 0.4)), _state((0.1, 0.1, 0.6), (0.1, 0.1, 0.6))])
    phi, stages = prog.evaluate_batch(states, np.array([0, 1], np.int32))
    assert phi.dtype == np.float32 and stages.dtype == np.int32
    np.testing.assert_allclose(phi, [0.25, 1.0], atol=1e-6)
    np.testing.assert_array_equal(stages, [0, 2])
    with pytest.raises(ValueError, match=r"stages\[1\] must be in \[0, 2\], got 5"):
        prog.evaluate_batch(states, np.array([0, 5], np.int32))
    with pytest.raises(ValueError, match="stages"):
        prog.evaluate_batch(states, np.array([0], np.int32))
    with pytest.raises(ValueError, match="states"):
        prog.evaluate_batch(states[0], np.array([0], np.int32))


@pytest.mark.parametrize("impl", IMPLS)
def test_non_finite_states_are_defined(impl: object) -> None:
    prog = impl.PotentialProgram.compile(EXAMPLE, LAYOUT)
    for bad in (np.nan, np.inf, -np.inf):
        state = _state((bad, 0, 0), (0, 0, bad))
        phi, stage = prog.evaluate(state, 0)
        assert 0.0 <= phi <= 1.0 and 0 <= stage <= 2
    phi, stage = prog.evaluate(_state((np.nan, 0, 0), (0, 0, 0.45)), 0)
    assert (phi, stage) == (0.0, 0)  # NaN distance: not done, no progress
    phi, stage = prog.evaluate(_state((0, 0, 0), (0, 0, np.inf)), 1)
    assert (phi, stage) == (1.0, 2)  # inf height is above 0.5


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("source", "line", "column", "message"),
    [
        ("stage a:\n  progress = foo\n  done = 1\n", 2, 14, "unknown name 'foo'"),
        ("stage a:\n  progress = 1 + ee_pos\n  done = 1\n", 2, 16, "type mismatch: cannot add scalar and vec3"),
        ("stage a:\n  progress = 1\n  done = (1 <\n", 4, 1, "expected an expression, got end of line"),
        ("stage a:\n  progress = xy.z\n  done = 1\n", 2, 16, "type mismatch: '.z' on a vec2"),
        ("stage a:\n  progress = dist(ee_pos)\n  done = 1\n", 2, 14, "'dist' takes 2 arguments, got 1"),
        ("stage a\n", 1, 8, "expected ':' after the stage name, got end of line"),
        ("stage a:\n  progress = 1\n", 1, 7, "stage 'a' has no 'done'"),
        ("", 1, 1, "the program has no stages"),
        ("stage a:\n  progress = 1 @ 2\n", 2, 16, "unexpected character '@'"),
    ],
)
def test_errors_carry_line_column_and_problem(impl: object, source: str, line: int, column: int,
                                              message: str) -> None:
    with pytest.raises(PotentialError) as info:
        impl.PotentialProgram.compile(source, LAYOUT)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.line, err.column) == (line, column)
    assert err.message.startswith(message)
    assert str(err).startswith(f"line {line}, column {column}: ")


def test_potential_error_is_the_package_exception() -> None:
    assert core.PotentialError is PotentialError
    with pytest.raises(core.PotentialError):
        core.PotentialProgram.compile("stage", {})


@pytest.mark.parametrize("impl", IMPLS)
def test_limits(impl: object) -> None:
    deep = "(" * 80 + "1" + ")" * 80
    with pytest.raises(PotentialError, match="nested too deeply"):
        impl.PotentialProgram.compile(f"stage a:\n progress = {deep}\n done = 1\n", LAYOUT)
    many = "".join(f"stage s{i}:\n progress = 0\n done = 0\n" for i in range(40))
    with pytest.raises(PotentialError, match="too many stages"):
        impl.PotentialProgram.compile(many, LAYOUT)
    with pytest.raises(PotentialError, match="too large"):
        impl.PotentialProgram.compile("#" * 70000, LAYOUT)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("layout", "match"),
    [
        ({"a": (0, 4)}, "length must be 1, 2 or 3"),
        ({"a": (-1, 1)}, "offset must be"),
        ({"not": (0, 1)}, "not a valid name"),
        ({"a": (0, 1.5)}, "expected integers"),
        ({"a": 3}, "expected \\(offset, length\\)"),
    ],
)
def test_layout_errors(impl: object, layout: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        impl.PotentialProgram.compile(EXAMPLE, layout)


@pytest.mark.parametrize("impl", IMPLS)
def test_shape_rewards(impl: object) -> None:
    rewards = np.array([[1.0, 0.0], [-1.0, 0.5]], np.float32)
    phi = np.array([[0.25, 0.5], [0.75, 0.0]], np.float32)
    next_phi = np.array([[0.5, 1.0], [0.0, 0.25]], np.float32)
    dones = np.array([[0, 1], [0, 0]], bool)
    out = impl.shape_rewards(rewards, phi, next_phi, dones, 0.5)
    assert out.dtype == np.float32 and out.shape == (2, 2)
    np.testing.assert_allclose(out, rewards + 0.5 * next_phi * (1 - dones) - phi, atol=1e-7)
    assert out[0, 1] == -0.5  # terminal: the next potential counts as 0
    with pytest.raises(ValueError, match="phi"):
        impl.shape_rewards(rewards, phi[0], next_phi, dones, 0.5)


def test_shape_rewards_cpp_equals_reference_bitwise() -> None:
    rng = np.random.default_rng(5)
    args = [rng.normal(size=1000).astype(np.float32) for _ in range(3)] + [rng.random(1000) < 0.1]
    np.testing.assert_array_equal(core.shape_rewards(*args, 0.99), reference.shape_rewards(*args, 0.99))


def test_bench_numpy_program_matches_the_compiled_program() -> None:
    prog = core.PotentialProgram.compile(bench.PROGRAM, bench.LAYOUT)
    states, stages = bench._potential_states(np.random.default_rng(3), 2000)
    phi, new = prog.evaluate_batch(states, stages)
    np_phi, np_new = bench.numpy_potential(states, stages)
    assert np.mean(new == np_new) > 0.999
    np.testing.assert_allclose(phi[new == np_new], np_phi[new == np_new], atol=1e-5)
    assert len(set(new.tolist())) == 5  # the data exercises every stage


def test_bench_command_prints_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--json", "--repeat", "1"]) == 0
    figures = json.loads(capsys.readouterr().out)
    for key in ("gae_ratio_vs_sb3", "add_ratio_vs_sb3", "eval_single_us", "eval_batch_ns_per_state",
                "eval_batch_ratio_vs_reference", "eval_batch_ratio_vs_numpy", "gae_sb3_s", "gae_ours_s",
                "add_sb3_us", "add_ours_us", "eval_batch_reference_s", "eval_batch_numpy_s"):
        assert figures[key] > 0, key
    assert set(figures["targets_met"]) == set(bench.TARGETS)
