# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""`coda experiment` end to end on a tiny preset: runs per method and seed, the table's figures, read-back.

Real loops (MuJoCo episodes, training, SQLite memories) at sizes that take about a minute; what is checked is
that the table holds what each run measured and that an experiment started again re-runs nothing.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import pytest

from coda_loop.commands import experiment
from coda_loop.config import PRESETS, Preset
from coda_loop.provenance import code_label, code_provenance

TINY = Preset(rounds=1, budget=3, loop={
    "families": ["reach", "push"], "base_demos_per_family": 3, "base_sft_steps": 30, "probe_per_family": 1,
    "finetune_steps": 20, "rl_env_steps": 256, "rl_eval_episodes": 2, "eval_per_family": 1,
    "final_eval_per_family": 2, "eval_splits": ["id", "position"]})
METHODS = ["sft", "closed_loop", "dagger", "coda_pass_fail", "coda"]
pytestmark = pytest.mark.slow


def _args(out: Path) -> argparse.Namespace:
    return argparse.Namespace(preset="tiny", seeds=1, first_seed=1, methods=METHODS, workers=1, out=out, quiet=True,
                              json=True, combine=None, overrides=[])


def _last_round_progress(db: Path) -> dict[str, float]:
    """Mean success per split over families in the run's last round, read from its memory."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT split, AVG(success) FROM progress WHERE round = (SELECT MAX(round) FROM progress) "
                            "GROUP BY split").fetchall()
    return {str(split): float(mean) for split, mean in rows}


def _step_count(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM loop_steps").fetchone()[0])


def test_experiment_tables_what_each_run_measured_and_reruns_nothing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(PRESETS, "tiny", TINY)
    out = tmp_path / "exp"
    overrides = ["demonstrator=state_expert", "closed_loop,dagger,coda_pass_fail,coda:eval_per_family=2"]
    assert experiment.run(argparse.Namespace(**{**vars(_args(out)), "overrides": overrides})) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    result = json.loads((out / "results.json").read_text())
    assert printed["results"] == result["results"]
    assert (result["seeds"], result["budget"], result["rounds"]) == ([1], 3, 1)
    assert result["settings"]["overrides"] == {"*": {"demonstrator": "state_expert"},
                                               **{m: {"eval_per_family": 2} for m in METHODS[1:]}}
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["seed1"]  # --first-seed 1: no seed 0
    assert (out / "results.md").is_file()
    label = code_label(code_provenance())  # every run was computed by this checkout, in this process
    assert result["code"] == {method: {"1": [label]} for method in METHODS}
    assert f"Code: every run computed with {label}." in (out / "results.md").read_text()

    for method in METHODS:
        run = out / "seed1" / method
        config = json.loads((run / "config.json").read_text())
        assert (config["seed"], config["method"], config["demonstrator"]) == (1, method, "state_expert")  # --set
        assert config["eval_per_family"] == (1 if method == "sft" else 2)
        if method == "sft":
            assert config["rounds"] == 0
        else:
            assert (config["rounds"], config["budget"]) == (1, 3)
            assert Path(config["base_from"]) == (out / "seed1" / "sft").resolve()
        measured = _last_round_progress(run / "memory.db")
        table = result["results"][method]
        assert set(measured) == {"id", "position"}
        for split, mean in measured.items():
            assert table[split]["mean"] == pytest.approx(mean)
            assert table[split]["std"] == 0.0  # one seed
            assert table[split]["episodes"] == 2 * 2  # final_eval_per_family x families
            assert table[split]["se"] == pytest.approx((mean * (1 - mean) / 4) ** 0.5)
        assert table["ood"]["mean"] == pytest.approx(measured["position"])  # the only OOD split here

    # the loop methods start from the sft run's policy: round 0's scores are read from it, not measured again
    for method in ("closed_loop", "coda"):
        with sqlite3.connect(out / "seed1" / method / "memory.db") as conn:
            outputs = json.loads(conn.execute(
                "SELECT outputs FROM loop_steps WHERE round = 0 AND step = 'evaluate'").fetchone()[0])
        assert outputs["reused_from"] == str((out / "seed1" / "sft").resolve())

    # what every run spent is in its record, read from its memory: the equal-budget check of the table
    from coda_loop.memory import MemoryStore
    from coda_loop.step_results import DiagnoseResult, EpisodesResult, ProgramsResult, TrainResult

    for method in METHODS[1:]:
        budget = result["runs"][method]["1"]["budget"]
        (row,) = budget["rounds"]
        with MemoryStore(out / "seed1" / method / "memory.db") as store:
            train = store.finished_step(1, TrainResult)
            ran = store.finished_step(1, EpisodesResult)
            lengths = [store.get("episode", e).payload["length"] for e in ran.episode_ids]
            diagnosed = store.finished_step(1, DiagnoseResult)
            diagnoses = [store.get("diagnosis", i).payload for i in diagnosed.diagnosis_ids]
            programs = store.finished_step(1, ProgramsResult)
        assert (row["round"], row["scenes"], row["probe_scenes"], row["cloning_steps"]) == (1, 3, 2, 20)
        assert (row["episodes"], row["env_steps"]) == (5, sum(lengths)) and row["env_steps"] > 5
        assert row["expert_labels"] == train.new_steps > 3 and row["new_demos"] == train.new_demos == 3
        assert row["ppo_env_steps"] == train.rl.env_steps == 256 and train.rl.eval_episodes == 2
        assert row["ppo_gate"] == {"family": train.rl.family, "before": train.rl.success_before,
                                   "after": train.rl.success_after, "kept": train.rl.kept}
        assert budget["totals"]["ppo_kept"] == [int(train.rl.kept), 1] and row["seconds"] > 0
        corrective = train.corrective
        assert (corrective is not None) == (method != "closed_loop")
        if method == "closed_loop":
            assert row["corrective"] == [0, 0]
        else:
            assert row["corrective"] == [corrective.failed_scenes, corrective.recovered]
            assert corrective.failed_scenes >= 1  # a 30-step SFT policy fails its reach scenes
        if method == "dagger":  # no critic: the takeover comes from the progress trace and names no failure mode
            assert diagnoses == [] and diagnosed.skipped
            assert corrective.by_mode and all(k.startswith("failed:") for k in corrective.by_mode)
            # taken over at the peak of the episode's progress: the policy's own steps before it carry labels
            assert corrective.recovered == 0 or any(t > 0 for t in corrective.takeover_steps)
        if method == "coda_pass_fail":  # the critic ran, but only pass or fail reached the programs
            assert len(diagnoses) == 5
            assert {d["failure_mode"] for d in diagnoses} <= {"success", "timed_out"}
            assert all(d["failure_step"] == -1 and d["text"] in ("the task succeeded", f"the {d['family']} task "
                                                                 "was not completed") for d in diagnoses)
            assert programs.potentials == {}  # the families' default programs shape PPO
            assert corrective.by_mode and all(k.startswith("failed:") for k in corrective.by_mode)  # as dagger's
        if method == "coda":
            assert programs.potentials  # the diagnoses' own programs
    assert "Budget spent per run" in (out / "results.md").read_text()
    assert "| dagger | 1 | 3 | 5 |" in (out / "results.md").read_text()

    # paired differences to coda on the same held-out scenes: the point estimate is the difference of the means
    assert set(result["paired"]) == {"sft", "closed_loop", "dagger", "coda_pass_fail"}
    pair = result["paired"]["closed_loop"]["test"]
    expected = result["results"]["coda"]["ood"]["mean"] - result["results"]["closed_loop"]["ood"]["mean"]
    assert pair["diff"] == pytest.approx(expected) and pair["seeds"] == 1 and pair["scenes"] == 2 * 2
    assert pair["ci"][0] <= pair["diff"] <= pair["ci"][1]
    assert "closed_loop" in (out / "results.md").read_text().split("Paired")[1]
    # coda compare reads the same records back: the same paired difference and interval
    from coda_loop.comparison import Side, compare

    again = compare(Side.parse([str(out / "results.json")]), Side.parse([f"{out / 'results.json'}:closed_loop"]))
    assert again["seeds"] == [1]
    assert [again["test"]["diff"], *again["test"]["ci"]] == pytest.approx([pair["diff"], *pair["ci"]])

    # coda analyze: where each round's budget went, from the run's memory
    from coda_loop.analysis import analyze_run, format_analysis

    analysis = analyze_run(out / "seed1" / "coda")
    rows = analysis["rounds"]
    assert [row["round"] for row in rows] == [0, 1] and all(row["generated"] == 3 for row in rows)
    assert sum(rows[1]["by_family"].values()) == 3 and sum(rows[1]["by_kind"].values()) == 3
    corrective = rows[1]["corrective"]
    assert 0 <= corrective["recovered"] <= corrective["failed_scenes"] <= 3
    assert rows[1]["new_demos"] == 3 and rows[1]["new_steps"] > 3  # one demonstration per scene, many steps each
    assert analysis["totals"]["new_steps"] == rows[1]["new_steps"]
    assert rows[1]["eval"]["ood"] == pytest.approx(result["results"]["coda"]["ood"]["mean"])
    assert "(coda, seed 1)" in format_analysis(analysis)
    assert "corrective" not in analyze_run(out / "seed1" / "closed_loop")["rounds"][1]
    with pytest.raises(ValueError, match="not a run folder"):
        analyze_run(tmp_path)
    # where two runs of the seed part: both start from the sft run's weights, and round 1 clones other data
    from coda_loop.analysis import format_shared, weights_shared_through

    closed = analyze_run(out / "seed1" / "closed_loop")
    assert rows[0]["bc_weights"] == closed["rounds"][0]["bc_weights"] is not None
    assert weights_shared_through(analysis, closed) == 0
    assert weights_shared_through(analysis, analysis) == 1
    assert format_shared([analysis, closed]) == [
        "closed_loop (seed 1) cloned the same weights as coda through round 0; they part in round 1"]

    # --combine: result files of experiments over other seeds merge into the table over all seeds
    other = json.loads((out / "results.json").read_text())
    other["runs"] = {m: {"2": {**by_seed["1"], "final": {k: 1.0 - v for k, v in by_seed["1"]["final"].items()}}}
                     for m, by_seed in other["runs"].items()}
    (tmp_path / "seed2.json").write_text(json.dumps(other))
    combined_args = argparse.Namespace(**{**vars(_args(tmp_path / "combined")),
                                          "combine": [out / "results.json", tmp_path / "seed2.json"]})
    assert experiment.run(combined_args) == 0
    capsys.readouterr()
    combined = json.loads((tmp_path / "combined" / "results.json").read_text())
    assert combined["seeds"] == [1, 2]
    for method in METHODS:
        ood = combined["results"][method]["ood"]
        assert ood["mean"] == pytest.approx(0.5)  # the mean of x and 1 - x
        assert ood["std"] == pytest.approx(abs(result["results"][method]["ood"]["mean"] - 0.5))
    assert combined["paired"]["closed_loop"]["test"]["seeds"] == 2
    other["runs"]["coda"]["1"] = other["runs"]["coda"]["2"]  # the same seed with another record: refused
    (tmp_path / "clash.json").write_text(json.dumps(other))
    clash = argparse.Namespace(**{**vars(combined_args), "combine": [out / "results.json", tmp_path / "clash.json"]})
    assert experiment.run(clash) == 2
    assert "method coda seed 1 differs" in capsys.readouterr().err
    # one protocol written two ways combines: an option given to every method by --set, or the preset's own value
    seed2 = json.loads((tmp_path / "seed2.json").read_text())
    settings = seed2["settings"]
    as_preset = {**settings, "loop": {**settings["loop"], "demonstrator": "state_expert"},
                 "overrides": {k: v for k, v in settings["overrides"].items() if k != "*"}}
    (tmp_path / "as-preset.json").write_text(json.dumps({**seed2, "settings": as_preset}))
    both = [out / "results.json", tmp_path / "as-preset.json"]
    assert experiment.run(argparse.Namespace(**{**vars(combined_args), "combine": both})) == 0
    assert json.loads((tmp_path / "combined" / "results.json").read_text())["seeds"] == [1, 2]
    capsys.readouterr()
    other_protocol = {**as_preset, "loop": {**as_preset["loop"], "finetune_steps": 21}}
    (tmp_path / "other-protocol.json").write_text(json.dumps({**seed2, "settings": other_protocol}))
    refused = [out / "results.json", tmp_path / "other-protocol.json"]
    assert experiment.run(argparse.Namespace(**{**vars(combined_args), "combine": refused})) == 2
    assert "only results of one protocol combine" in capsys.readouterr().err

    steps = {m: _step_count(out / "seed1" / m / "memory.db") for m in METHODS}
    assert experiment.run(_args(out)) == 0  # started again: every run is finished and only read back
    again = json.loads((out / "results.json").read_text())
    assert again["results"] == result["results"]
    assert {m: _step_count(out / "seed1" / m / "memory.db") for m in METHODS} == steps


def test_experiment_refuses_bad_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for field, value in (("seeds", 0), ("first_seed", -1), ("workers", -2)):
        args = argparse.Namespace(**{**vars(_args(tmp_path / "exp")), "preset": "small", field: value})
        assert experiment.run(args) == 2
        assert "--seeds must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "exp").exists()


def test_experiment_refuses_a_bad_set_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--set``: each bad option is named before anything runs."""
    assert experiment.parse_overrides(["budget=8", 'coda:planner={"exploration_share": 1}',
                                       "sft,coda:demonstrator=state_expert"]) == {
        "*": {"budget": 8}, "coda": {"planner": {"exploration_share": 1}, "demonstrator": "state_expert"},
        "sft": {"demonstrator": "state_expert"}}
    for bad, named in (("budget", "expected [METHODS:]KEY=VALUE"), ("colour=red", "'colour' is not a LoopConfig"),
                       ("seed=3", "'seed' is not a LoopConfig"), ("codax:budget=3", "unknown methods ['codax']"),
                       ("demonstrator=nobody", "demonstrator"), ("coda:corrective_relabel=-1", "corrective_relabel")):
        args = argparse.Namespace(**{**vars(_args(tmp_path / "exp")), "preset": "small", "overrides": [bad]})
        assert experiment.run(args) == 2, bad
        assert named in capsys.readouterr().err, bad
    assert not (tmp_path / "exp").exists()
