# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda report``: a real run folder (MuJoCo episodes, grounded diagnoses, programs) -> one offline HTML page.

Also the SVG primitives and the experiment table of ``coda experiment``. ``build_run`` is shared
with test_export_mcap.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coda_critic.generation import GenerationPlanner
from coda_critic.grounded import GroundedCritic
from coda_critic.text2potential import training_plan
from coda_engine.episodes import RecordingConfig, run_recorded_episode
from coda_engine.policies import resolve
from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams
from coda_loop.cli import main
from coda_loop.memory import MemoryStore
from coda_loop.provenance import code_label, code_provenance
from coda_loop.report import svg
from coda_loop.report.data import ReportData
from coda_loop.report.experiment import ExperimentInputError, render_experiment, round_means
from coda_loop.report.html import render
from coda_loop.step_results import EvaluateResult

SCRIPT = "<script>alert('memory')</script>"
"""Put in front of one diagnosis explanation: the page must show it as text."""
FAMILIES = ("reach", "pick_place")
SPLITS = ("id", "position")


def _idle(obs: np.ndarray, state: Any) -> np.ndarray:
    """Do nothing (a policy whose episodes fail)."""
    return np.array([0.0, 0.0, 0.0, 1.0], dtype=np.float32)


def build_run(run_dir: Path) -> dict[str, Any]:
    """Write a two-round run folder through MemoryStore; return what was written (for the checks).

    Round 0: an idle policy on every family x split (failures); round 1: the expert (successes) plus one
    idle pick_place episode. Episodes are real MuJoCo runs with keyframes; diagnoses come from the grounded
    critic; generation, training and potential programs from the critic's planners.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    arm = SimArm()
    store = MemoryStore(run_dir / "memory.db")
    store.record_start(0, code_provenance())
    written: dict[str, Any] = {"episodes": {}, "diagnoses": {}, "rounds": {0: [], 1: []}}
    recording = RecordingConfig(keyframe_size=32)
    history = []
    try:
        for rnd in (0, 1):
            episodes = []
            plan = [(f, s, "idle") if rnd == 0 else (f, s, "expert") for f in FAMILIES for s in SPLITS]
            if rnd == 1:
                plan.append(("pick_place", "id", "idle"))
            for i, (family, split, who) in enumerate(plan):
                scene = generate(family, rng, SceneParams(split=split), round_index=rnd)
                act = _idle if who == "idle" else resolve("expert", scene, None)
                ep = run_recorded_episode(
                    arm,
                    scene,
                    act,
                    episode_id=f"r{rnd}-e{i}",
                    policy_version=f"v{rnd}",
                    robot_id="sim_0",
                    max_steps=12 if who == "idle" else 0,
                    config=recording,
                )
                store.put_scene(rnd, scene.to_dict(), origin="probe")
                store.put_episode(rnd, ep.to_result_dict(), ep.keyframes, purpose="eval", scene=scene.to_dict())
                episodes.append((ep, split))
                written["episodes"][ep.episode_id] = ep
                written["rounds"][rnd].append(ep.episode_id)
            diagnoses = GroundedCritic().diagnose([ep for ep, _ in episodes])
            if rnd == 0:
                first_failure = next(d for d in diagnoses if d.is_failure)
                first_failure.text = f"{SCRIPT} {first_failure.text}"
            for d in diagnoses:
                store.put_diagnosis(rnd, d.to_dict())
                written["diagnoses"][d.diagnosis_id] = d
            program = GenerationPlanner().plan(diagnoses, budget=8, round_index=rnd + 1, history=history)
            store.put_program(
                rnd,
                "generation_program",
                program.to_dict(),
                record_id=program.program_id,
                diagnosis_ids=[d.diagnosis_id for d in diagnoses if d.is_failure],
            )
            training = training_plan(diagnoses, rnd + 1)
            store.put_program(
                rnd,
                "training_program",
                training.to_dict(),
                record_id=training.program_id,
                diagnosis_ids=training.cause_diagnosis_ids,
            )
            for potential in training.potentials:
                store.put_program(
                    rnd,
                    "potential_program",
                    potential.to_dict(),
                    record_id=potential.program_id,
                    diagnosis_ids=[potential.source_diagnosis_id],
                )
            for family in FAMILIES:
                for split in SPLITS:
                    wins = [ep.success for ep, s in episodes if ep.scene.family == family and s == split]
                    store.put_progress(
                        rnd,
                        family=family,
                        split=split,
                        success=float(np.mean(wins)),
                        episodes=len(wins),
                        policy_version=f"v{rnd}",
                    )
            checkpoint = run_dir / "checkpoints" / f"v{rnd}"
            checkpoint.mkdir(parents=True)
            (checkpoint / "model.safetensors").write_bytes(bytes([rnd]) * 64)
            store.put_policy_version(
                rnd,
                version_id=f"v{rnd}",
                checkpoint_dir=checkpoint,
                parent=f"v{rnd - 1}" if rnd else "",
                metrics={"success_id": 0.5 * rnd},
            )
            store.finish_step(rnd, EvaluateResult(version=f"v{rnd}", rates={"id": {"push": 0.5}},
                                                  per_split={"id": 0.5}, ood=float("nan"),
                                                  episodes_per_family={"id": 4}))
            history += diagnoses
    finally:
        store.close()
        arm.close()
    return written


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    run_dir = tmp_path_factory.mktemp("runs") / "run-a"
    return run_dir, build_run(run_dir)


EXTERNAL = re.compile(r"https?://|<link\b|<script\b|@import|url\(|\bsrc\s*=|<iframe|<img\b", re.IGNORECASE)


def test_report_of_a_real_run(run_folder, capsys):
    run_dir, written = run_folder
    assert main(["report", str(run_dir)]) == 0
    assert str(run_dir / "report.html") in capsys.readouterr().out
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    # the four plots, each an inline SVG with its title, axis labels and a legend
    svgs = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    assert len(svgs) == 4
    for title in (
        "Success per round per split",
        "Failure modes over rounds",
        "Budget allocation over rounds",
        "Potential-stage progress",
    ):
        chart = next(s for s in svgs if f"<title>{title}" in s)
        assert 'class="x-label"' in chart and 'class="y-label"' in chart and 'class="legend"' in chart
    success_chart, modes_chart = svgs[0], svgs[1]
    assert success_chart.count("<polyline") == 2 and 'data-name="position"' in success_chart  # one line per split
    failed_modes = {d.failure_mode for d in written["diagnoses"].values() if d.is_failure}
    assert failed_modes and all(f">{mode}</text>" in modes_chart for mode in failed_modes)
    # the tables
    for cls in ("progress", "policy-versions", "diagnoses", "generation-programs", "training-programs"):
        assert f'<table class="{cls}">' in page
    assert "<td>v0</td>" in page and "v1" in page  # policy versions and their parent
    # offline and escaped: nothing external, the script tag from the database shows as text
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    assert "&lt;script&gt;alert(&#x27;memory&#x27;)&lt;/script&gt;" in page
    # success per round: round 0 failed everywhere, round 1's expert succeeded on the id split
    assert "0.00 (n=1)" in page
    # the run's start, with the code it ran
    starts = re.search(r"<h2>Starts of the run.*?</table>", page, flags=re.S).group(0)
    assert f"<td>{code_label(code_provenance())}</td>" in starts and "torch " in starts
    assert f"<td>{code_provenance()['torch_cpu_capability']}</td>" in starts  # which CPU kernels it ran on


def test_report_out_option_and_bad_run_dirs(run_folder, tmp_path, capsys):
    run_dir, _ = run_folder
    out = tmp_path / "elsewhere" / "r.html"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0 and out.stat().st_size > 5000
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no memory.db" in capsys.readouterr().err
    (tmp_path / "empty" / "memory.db").write_bytes(b"this is not SQLite" * 100)
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "is not a readable memory database" in capsys.readouterr().err


def test_report_of_a_run_without_finished_rounds(tmp_path):
    run_dir = tmp_path / "fresh"
    run_dir.mkdir()
    MemoryStore(run_dir / "memory.db").close()
    assert main(["report", str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert 'id="no-rounds"' in page and "No finished rounds" in page
    assert page.count("<svg") == 4 and page.count(">no data</text>") == 4
    assert "No learning progress recorded." in page


def test_render_escapes_every_database_string():
    evil = '<img src=x onerror="alert(1)">'
    data = ReportData(
        title=evil,
        source=evil,
        progress=[{"round": 0, "family": evil, "split": evil, "success": 0.5, "episodes": 2, "policy_version": evil}],
    )
    page = render(data)
    assert "<img" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


def test_svg_primitives():
    assert svg.nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert svg.nice_ticks(0, 37)[-1] >= 37
    chart = svg.line_chart(
        title="t<",
        x_label="round",
        y_label="rate",
        x=[0, 1, 2],
        series={"a": [0.1, None, 0.3], "b": [0.2, 0.4, 0.6]},
        dashed=["b"],
    )
    assert "t&lt;" in chart and chart.count("<circle") == 5 and 'stroke-dasharray="6 4"' in chart
    assert chart.count("<polyline") == 1  # 'a' has a gap: two single points, no line
    bars = svg.stacked_bar_chart(
        title="s", x_label="x", y_label="y", categories=["0", "1"], stacks={"m": [1.0, 0.0], "n": [2.0, 3.0]}
    )
    assert bars.count("<rect") == 3
    grouped = svg.grouped_bar_chart(
        title="g", x_label="x", y_label="y", groups=["id", "ood"], series={"a": [0.5, 0.25]}, errors={"a": [0.1, 0.0]}
    )
    assert grouped.count("<rect") == 2 and grouped.count('class="error"') == 1
    with pytest.raises(ValueError, match="series 'a' has 2 values for 3"):
        svg.line_chart(title="t", x_label="x", y_label="y", x=[0, 1, 2], series={"a": [0.1, 0.2]})
    with pytest.raises(ValueError, match="negative"):
        svg.stacked_bar_chart(title="s", x_label="x", y_label="y", categories=["0"], stacks={"m": [-1.0]})


def _experiment() -> dict[str, Any]:
    base = {
        "sft": 0.05,
        "open_loop": 0.10,
        "closed_loop": 0.15,
        "coda_no_potential": 0.18,
        "coda_no_memory": 0.2,
        "coda": 0.3,
    }
    results = {
        m: {
            s: {"mean": v + 0.01 * i, "std": 0.02}
            for i, s in enumerate(("id", "position", "instruction", "object", "distractor"))
        }
        for m, v in base.items()
    }
    results["coda"]["ood"] = {"mean": 0.345, "std": 0.015}
    per_round = {m: [{"round": r, "split": "id", "mean": v * (r + 1) / 3} for r in range(3)] for m, v in base.items()}
    return {"results": results, "budget": 32, "rounds": 3, "seeds": [0, 1, 2], "per_round": per_round}


def test_render_experiment(tmp_path):
    md_path, html_path = render_experiment(_experiment(), tmp_path / "exp")
    lines = md_path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "| method | id | position | instruction | object | distractor | OOD mean |"
    rows = [line.split(" | ")[0].lstrip("| ") for line in lines[2:8]]
    assert rows == ["sft", "open_loop", "closed_loop", "coda_no_potential", "coda_no_memory", "coda"]
    assert (
        lines[2] == "| sft | 0.050 ± 0.020 | 0.060 ± 0.020 | 0.070 ± 0.020 | 0.080 ± 0.020 | 0.090 ± 0.020 | "
        "0.075 ± 0.020 |"
    )
    assert lines[7].endswith("| 0.345 ± 0.015 |")  # the exact OOD entry wins over the estimate
    assert "budget 32 scenes per round, 3 rounds, seeds [0, 1, 2]" in md_path.read_text(encoding="utf-8")
    page = html_path.read_text(encoding="utf-8")
    assert page.count("<svg") == 2 and "Success per round (mean over seeds): split id" in page  # bars + lines
    # a result over several seeds holds one value per seed and round: the line is their mean, not the last seed's
    assert round_means([(0, 0.2), (1, 0.5), (0, 0.4), (1, 0.7), (2, 0.9)]) == pytest.approx({0: 0.3, 1: 0.6, 2: 0.9})
    assert not EXTERNAL.search(page)
    bars = re.search(r'<svg class="chart grouped-bar-chart".*?</svg>', page, flags=re.S).group(0)
    assert bars.count("<rect") == 6 * 6  # 6 methods x (5 splits + OOD mean)
    # which code the runs came from: one line naming the commit, or every run when they differ
    one = {**_experiment(), "code": {"sft": {"0": ["aaaaaaaaaaaa"]}, "coda": {"0": ["aaaaaaaaaaaa"]}}}
    assert "Code: every run computed with aaaaaaaaaaaa." in render_experiment(one, tmp_path / "one")[0].read_text()
    mixed = {**_experiment(), "code": {"sft": {"1": ["aaaaaaaaaaaa"]},
                                        "coda": {"1": ["aaaaaaaaaaaa", "bbbbbbbbbbbb-dirty"]}}}
    text = render_experiment(mixed, tmp_path / "mixed")[0].read_text()
    assert ("Code (runs were computed with more than one commit): coda seed 1: aaaaaaaaaaaa then "
            "bbbbbbbbbbbb-dirty; sft seed 1: aaaaaaaaaaaa.") in text
    # a method run on some seeds only (combined records): its paired cells name the seeds they pool
    pair = {"diff": 0.05, "ci": [-0.01, 0.11], "per_seed": {"0": 0.04, "1": 0.06}}
    every = {"diff": 0.1, "ci": [0.02, 0.18], "per_seed": {"0": 0.1, "1": 0.1, "2": 0.1}}
    paired = {**_experiment(), "paired": {"open_loop": {"test": every, "validation": every},
                                          "coda_no_memory": {"test": pair, "validation": pair}}}
    text = render_experiment(paired, tmp_path / "paired")[0].read_text()
    assert "| open_loop | +0.100 [+0.020, +0.180] | +0.100 [+0.020, +0.180] |" in text
    assert "| coda_no_memory | +0.050 [-0.010, +0.110] (seeds 0, 1) | +0.050 [-0.010, +0.110] (seeds 0, 1) |" in text


def test_render_experiment_rejects_malformed_input(tmp_path):
    bad = _experiment()
    bad["results"]["coda"]["position"] = {"mean": "high"}
    with pytest.raises(ExperimentInputError, match=r"results\['coda'\]\['position'\]"):
        render_experiment(bad, tmp_path)
    with pytest.raises(ExperimentInputError, match="no non-empty 'results'"):
        render_experiment({"budget": 1}, tmp_path)
    assert not (tmp_path / "results.md").exists()
    partial = {"results": {"sft": {"id": {"mean": 0.5, "std": 0.1}}}, "budget": 4, "rounds": 1, "seeds": [0]}
    md_path, _ = render_experiment(partial, tmp_path)
    text = md_path.read_text(encoding="utf-8")
    assert "| sft | 0.500 ± 0.100 | n/a | n/a | n/a | n/a | n/a |" in text and "Not in this result: open_loop" in text


def test_experiment_aggregate_gives_spread_over_seeds_and_sampling_error(tmp_path):
    from coda_loop.commands.experiment import aggregate

    first = {"id": 0.8, "position": 0.6, "instruction": 0.5, "object": 0.7, "distractor": 0.8, "ood": 0.65}
    finals = {"coda": [first, {**first, "id": 0.9, "position": 0.7, "ood": 0.675}]}
    per_seed = {s: 100 for s in ("id", "position", "instruction", "object", "distractor")}
    results = aggregate(finals, {"coda": [per_seed, per_seed]})["coda"]
    assert results["id"]["mean"] == pytest.approx(0.85) and results["id"]["std"] == pytest.approx(0.05)
    assert results["id"]["episodes"] == 200 and results["id"]["se"] == pytest.approx((0.85 * 0.15 / 200) ** 0.5)
    # the OOD mean averages four splits of 200 episodes each: its variance is the mean of theirs over 4
    split_vars = [m * (1 - m) / 200 for m in (0.65, 0.5, 0.7, 0.8)]
    assert results["ood"]["se"] == pytest.approx((sum(split_vars) / 16) ** 0.5) and results["ood"]["episodes"] == 800
    assert "se" not in aggregate(finals)["coda"]["id"]  # no episode counts: spread over seeds only
    # a run evaluated on some splits only (LoopConfig.eval_splits): the OOD mean's error comes from those alone
    subset = aggregate({"coda": [{"id": 0.8, "position": 0.6, "ood": 0.6}]}, {"coda": [{"id": 40, "position": 40}]})
    assert subset["coda"]["ood"]["episodes"] == 40 and subset["coda"]["ood"]["se"] == pytest.approx((0.24 / 40) ** 0.5)

    one_seed = {"results": aggregate({"coda": finals["coda"][:1]}, {"coda": [per_seed]}), "budget": 64, "rounds": 15,
                "seeds": [0]}
    text = render_experiment(one_seed, tmp_path)[0].read_text(encoding="utf-8")
    assert "| coda | 0.800 ± 0.000 |" in text
    assert "standard error of a split's mean from its held-out episodes is 0.040-0.050" in text
    assert "one seed: the ± over seeds is 0 by construction" in text
