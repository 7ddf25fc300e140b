# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The keep rules (``coda_loop.gates``) on worked before/after values, and the loop deciding with them.

PPO: kept only for a strict gain (a tie keeps the parent), always without a gate (0 evaluation episodes). BC: kept
at most ``tolerance`` below the parent, exactly ``tolerance`` below included. Learned critic: kept when at least as
good. Each rule is also checked against exact fractions on every success share of 1-20 episodes.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from fractions import Fraction

import pytest

from coda_loop import diagnosing, training
from coda_loop.gates import bc_kept, critic_kept, ppo_kept

SHARES = [(k, n) for n in range(1, 21) for k in range(n + 1)]
"""Every success share k / n of 1-20 episodes, as (k, n)."""


@pytest.mark.parametrize(("before", "after", "episodes", "kept"), [
    (0.5, 0.5, 12, False),            # a tie keeps the parent
    (0.0, 0.0, 12, False),
    (1.0, 1.0, 12, False),
    (0.5, 0.5 + 1 / 12, 12, True),     # one more success of 12
    (0.5, 0.5 - 1 / 12, 12, False),    # one fewer
    (0.25, 0.75, 8, True),
    (0.75, 0.25, 8, False),
    (0.0, 1 / 12, 12, True),
    (1.0, 11 / 12, 12, False),
    (0.5, 0.5, 0, True),               # no gate: kept whatever the scores
    (0.75, 0.25, 0, True),
    (1.0, 0.0, 0, True),
])
def test_ppo_is_kept_only_for_a_strict_gain_unless_there_is_no_gate(before: float, after: float, episodes: int,
                                                                      kept: bool) -> None:
    assert ppo_kept(before, after, episodes) is kept


@pytest.mark.parametrize(("before", "after", "tolerance", "kept"), [
    (0.5, 0.5, 0.0, True),             # tolerance 0: as good as the parent is enough
    (0.5, 0.75, 0.0, True),
    (0.5, 0.5 - 1 / 12, 0.0, False),   # one fewer success of 12
    (0.5, 0.5 - 1e-6, 0.0, False),
    (0.0, 0.0, 0.0, True),
    (0.75, 0.5, 0.25, True),           # exactly the tolerance below
    (0.75, 0.5 - 1 / 64, 0.25, False),  # just more than the tolerance below
    (0.75, 0.5 + 1 / 64, 0.25, True),
    (0.4, 0.3, 0.1, True),             # exactly 0.1 below, though 0.4 - 0.1 < 0.3 in floating point
    (0.8, 0.7, 0.1, True),
    (0.4, 0.29, 0.1, False),
    (0.4, 0.31, 0.1, True),
    (1.0, 0.0, 1.0, True),             # tolerance 1: anything is kept
    (1.0, 0.0, 0.99, False),
])
def test_bc_is_kept_at_most_the_tolerance_below_its_parent(before: float, after: float, tolerance: float,
                                                           kept: bool) -> None:
    assert bc_kept(before, after, tolerance) is kept


@pytest.mark.parametrize(("before", "after", "kept"), [
    (0.5, 0.5, True),                  # a tie is kept
    (0.0, 0.0, True),
    (1.0, 1.0, True),
    (0.5, 0.5 + 1 / 40, True),
    (0.5, 0.5 - 1 / 40, False),        # one fewer agreement of 40 held-out examples
    (0.9, 0.1, False),
    (0.1, 0.9, True),
])
def test_a_learned_critic_version_is_kept_when_at_least_as_good(before: float, after: float, kept: bool) -> None:
    assert critic_kept(before, after) is kept


def test_the_rules_agree_with_exact_fractions_on_every_share_of_up_to_20_episodes() -> None:
    """The scores the loop compares are k / n in floating point; each rule decides as exact arithmetic would."""
    for tolerance in ("0", "0.05", "0.1", "0.2", "0.25", "1/3"):
        tol = Fraction(tolerance)
        for kb, nb in SHARES:
            for ka, na in SHARES:
                before, after = Fraction(kb, nb), Fraction(ka, na)
                assert bc_kept(kb / nb, ka / na, float(tol)) is (after >= before - tol), (kb, nb, ka, na, tolerance)
    for kb, n in SHARES:
        for ka in range(n + 1):
            assert ppo_kept(kb / n, ka / n, n) is (ka > kb), (kb, ka, n)
            assert critic_kept(kb / n, ka / n) is (ka >= kb), (kb, ka, n)


def _tree(function: object) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(function)))


def _guarded(function: object, condition: str) -> str:
    """Return the code run under ``if <condition>:`` in ``function`` (empty when there is no such branch)."""
    return "\n".join(ast.unparse(node) for node in ast.walk(_tree(function))
                     if isinstance(node, ast.If) and ast.unparse(node.test) == condition)


def test_the_train_step_decides_with_the_rules_and_acts_on_them() -> None:
    gate = ast.unparse(_tree(training.TrainStep._bc_gate))
    assert "kept=bc_kept(before, after, cfg.bc_gate_tolerance)" in gate, gate
    rl = ast.unparse(_tree(training.TrainStep._rl))
    assert "kept = ppo_kept(before, after, cfg.rl_eval_episodes)" in rl and "kept=kept" in rl, rl
    assert "put_policy_version" in _guarded(training.TrainStep._rl, "kept"), "a refused PPO update must not be stored"
    assert "out.version, folder = (parent," in _guarded(training.TrainStep._train_round, "not out.bc_gate.kept")
    assert "out.version = out.rl.version" in _guarded(training.TrainStep._train_round, "out.rl.kept")


def test_the_diagnose_step_keeps_a_fine_tuned_critic_by_the_rule() -> None:
    critic = ast.unparse(_tree(diagnosing.DiagnoseStep._learned_critic_round))
    assert "kept=critic_kept(before, after)" in critic, critic
    saved = _guarded(diagnosing.DiagnoseStep._learned_critic_round, "out.fine_tune.kept")
    assert "put_critic_version" in saved, "only a kept critic becomes a version"
