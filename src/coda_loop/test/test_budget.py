# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The budget record's arithmetic on values worked out by hand (a real run's record: test/test_coda_experiment.py)."""

from __future__ import annotations

import pytest

from coda_loop.budget import budget_table, label_spread, step_seconds


def test_step_seconds_count_from_the_previous_step_or_from_a_resume():
    finished = [(0, "train", 110.0), (0, "generate", 112.5), (1, "generate", 200.0), (1, "episodes", 230.0)]
    # started at 100; killed after round 0's generate step; resumed at 190
    seconds = step_seconds(finished, [100.0, 190.0])
    assert seconds == {(0, "train"): 10.0, (0, "generate"): 2.5, (1, "generate"): 10.0, (1, "episodes"): 30.0}
    assert step_seconds([], [1.0]) == {}


def _budget(labels: list[int], kept: list[bool]) -> dict:
    rounds = [{"round": r + 1, "expert_labels": n} for r, n in enumerate(labels)]
    totals = {"scenes": 64 * len(labels), "episodes": 80 * len(labels), "env_steps": 1000, "expert_labels": sum(labels),
              "cloning_steps": 5000 * len(labels), "ppo_env_steps": 8192 * len(labels), "seconds": 600.0,
              "ppo_kept": [sum(kept), len(kept)]}
    return {"rounds": rounds, "totals": totals}


def test_label_spread_names_the_largest_difference_in_one_round_of_one_seed():
    budgets = {"dagger": {"4": _budget([1000, 900], [True, False])},
               "coda": {"4": _budget([1050, 1000], [False, False])},
               "open_loop": {"4": _budget([800, 700], [False, True])}}
    spread = label_spread(budgets)
    assert spread["largest"] == pytest.approx(300 / 1000)  # round 2: coda 1000, open_loop 700
    assert spread["where"] == ("4", 2, "coda", 1000, "open_loop", 700) and not spread["within"]
    close = label_spread({m: budgets[m] for m in ("dagger", "coda")})
    assert close["largest"] == pytest.approx(100 / 1000) and close["within"]  # 10% is still within
    assert label_spread({"coda": budgets["coda"]})["where"] is None  # one method: nothing to compare
    table = budget_table(budgets)
    assert "| dagger | 1 | 128 | 160 | 1,000 | 1,900 | 10,000 | 16,384 | 1/2 | 10.0 |" in table
    assert "differ by more than 10%; the largest difference is 30.0% (seed 4, round 2: coda 1,000, open_loop 700)" \
        in table
    assert "within 10% of each other" in budget_table({m: budgets[m] for m in ("dagger", "coda")})
    assert budget_table({"sft": {"4": {"rounds": [], "totals": {}}}}) == "\n".join([
        "", "Budget spent per run (rounds after round 0, mean over seeds; `coda_loop.budget`):", "",
        "| method | seeds | scenes | episodes | env steps | expert labels | cloning steps | PPO env steps "
        "| PPO kept | wall min |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]) + "\n"
