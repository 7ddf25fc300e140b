# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""`coda run` end to end on a tiny budget: the loop's rounds, its memory, resume after SIGKILL, ROS workers.

Everything is real (MuJoCo episodes, training, the SQLite memory, rclpy nodes over DDS); only the
sizes are small, so the policy barely learns: these tests check what the loop does and records,
not how well the policy gets (that is `coda experiment`'s job).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coda_engine.sim.families import get_family
from coda_loop.config import LoopConfig, MethodSpec, load_config, run_config
from coda_loop.rounds import ROUND0_STEPS, ROUND_STEPS
from coda_loop.step_results import (
    BCGate,
    DiagnoseResult,
    EpisodesResult,
    EvaluateResult,
    GenerateResult,
    ProgramsResult,
    TrainResult,
)

TINY = {
    "rounds": 1, "budget": 3, "workers": 1, "families": ["reach", "push"], "base_demos_per_family": 3,
    "base_sft_steps": 30, "probe_per_family": 1, "finetune_steps": 20, "rl_env_steps": 256, "rl_eval_episodes": 2,
    "eval_per_family": 1, "final_eval_per_family": 1, "eval_splits": ["id", "position"], "progress": False,
}
CODA = [str(Path(sys.prefix) / "bin" / "coda")]
pytestmark = pytest.mark.slow


def _finished(db: Path) -> list[tuple[int, str]]:
    if not db.is_file():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return [(int(r), str(s)) for r, s in conn.execute("SELECT round, step FROM loop_steps")]
    except sqlite3.OperationalError:
        return []


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Tell whether the process exists and is not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="method='bogus'"):
        LoopConfig(method="bogus")
    with pytest.raises(ValueError, match="budget=0"):
        LoopConfig(budget=0)
    with pytest.raises(ValueError, match="eval_splits"):
        LoopConfig(eval_splits=("id", "mars"))
    with pytest.raises(ValueError, match="critic='oracle'"):
        LoopConfig(critic="oracle")
    with pytest.raises(ValueError, match=r"critic_model=.* is not a critic folder"):
        LoopConfig(critic="learned", critic_model=str(tmp_path))
    with pytest.raises(ValueError, match="finetune_lr=0"):
        LoopConfig(finetune_lr=0.0)
    with pytest.raises(ValueError, match="demonstrator='oracle' must be one of"):
        LoopConfig(demonstrator="oracle")
    with pytest.raises(ValueError, match=r"bc_potential_weight=1\.0 needs a method with Text2potential"):
        LoopConfig(method="open_loop", bc_potential_weight=1.0)
    with pytest.raises(ValueError, match=r"bc_potential_weight=-1.0 must be in \[0, 100\]"):
        LoopConfig(bc_potential_weight=-1.0)
    with pytest.raises(ValueError, match=r"corrective_skip_families=\('shove',\) must be a subset of"):
        LoopConfig(corrective_skip_families=["shove"])
    skip = LoopConfig(corrective_skip_families=[])
    assert skip.corrective_skip_families == () and LoopConfig.from_dict(skip.to_dict()) == skip
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text('{"method": "sft"}')  # demonstrated by the scripted expert
    with pytest.raises(ValueError, match=r"demonstrator='state_expert' but base_from=.* was demonstrated by 'expert'"):
        LoopConfig(base_from=str(tmp_path / "base"), demonstrator="state_expert")
    with pytest.raises(ValueError, match=r"planner=.*unknown GenerationConfig fields \['exploraton_share'\]"):
        LoopConfig(planner={"exploraton_share": 0.5})
    with pytest.raises(ValueError, match=r"planner=.*must be in"):
        LoopConfig(planner={"exploration_share": 0.7, "scene_replay_share": 0.5})
    assert LoopConfig(planner={"exploration_share": 0.5}).generation_config().exploration_share == 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text("budget: 4\nbudgte: 5\n")
    with pytest.raises(ValueError, match=r"unknown keys \['budgte'\]"):
        load_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text("budget: 5\nmethod: open_loop\n")
    assert load_config(good, {"rounds": 7}) == LoopConfig(budget=5, method="open_loop", rounds=7)
    assert run_config(tmp_path / "nothing") is None  # no run folder
    (tmp_path / "broken").mkdir()
    for text, error in (("{", r"broken/config.json is not valid JSON"), ("[1]", r"must hold a mapping"),
                        ('{"budgte": 5}', r"unknown keys \['budgte'\]")):
        (tmp_path / "broken" / "config.json").write_text(text)
        with pytest.raises(ValueError, match=error):
            run_config(tmp_path / "broken")
    (tmp_path / "broken" / "config.json").write_text('{"budget": 5, "method": "open_loop"}')
    # a run folder written before demonstrator and corrective_skip_families existed keeps what it ran: the scripted
    # expert demonstrating, no family skipped
    assert run_config(tmp_path / "broken") == LoopConfig(budget=5, method="open_loop", demonstrator="expert",
                                                         corrective_skip_families=())
    assert LoopConfig().corrective_skip_families == ("push",)
    assert not LoopConfig(method="closed_loop").uses_critic
    ablation = LoopConfig(method="coda_no_potential")
    assert ablation.uses_memory and ablation.uses_critic and not ablation.uses_potentials
    # the baselines with corrective data take over at the episode's recorded progress peak; coda from the diagnosis
    takeovers = {m: (LoopConfig(method=m).spec.corrective, LoopConfig(method=m).spec.takeover)
                 for m in ("open_loop", "dagger", "closed_loop_dagger", "coda_pass_fail", "coda")}
    assert takeovers == {"open_loop": (False, "progress_trace"), "dagger": (True, "progress_trace"),
                         "closed_loop_dagger": (True, "progress_trace"), "coda_pass_fail": (True, "progress_trace"),
                         "coda": (True, "diagnosis")}
    assert LoopConfig(method="closed_loop", corrective=True).spec.corrective  # any method may get corrective data
    assert LoopConfig(method="closed_loop_dagger").generation_config() == LoopConfig().generation_config()
    assert LoopConfig(method="coda_pass_fail").uses_critic and LoopConfig(method="coda_pass_fail").uses_memory
    with pytest.raises(ValueError, match="reduced diagnoses need the critic"):
        MethodSpec("uniform", critic=False, corrective=True, potentials=False, memory=False, diagnosis="pass_fail")
    with pytest.raises(ValueError, match="diagnosis='some' must be one of"):
        MethodSpec("diagnoses", critic=True, corrective=True, potentials=True, memory=True, diagnosis="some")
    with pytest.raises(ValueError, match="potentials need the critic"):
        MethodSpec("uniform", critic=False, corrective=False, potentials=True, memory=False)


def test_a_run_folder_keeps_the_settings_its_method_resolved_when_the_defaults_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """config.json holds the planner, ``corrective`` and ``focus_share`` written out, so a resume plans as before."""
    import coda_loop.config as config_module
    from coda_critic.generation import CODA_PLANNER
    from coda_loop.rounds import CoevolutionLoop

    config = LoopConfig(**{**TINY, "method": "coda"})
    planned = config.generation_config()
    pinned = config.pinned()
    assert pinned.generation_config() == planned
    assert {k: pinned.planner[k] for k in CODA_PLANNER} == dict(CODA_PLANNER)
    assert pinned.corrective is True and pinned.focus_share == 0.0 and pinned.pinned() == pinned
    assert LoopConfig.from_dict(json.loads(json.dumps(pinned.to_dict()))) == pinned  # JSON round trip
    run_dir = tmp_path / "run"
    CoevolutionLoop(run_dir, config).close()
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["planner"]["scene_replay_share"] == CODA_PLANNER["scene_replay_share"]
    assert saved["corrective"] is True
    # A later release changes the coda methods' split and turns corrective demonstrations off by default.
    changed = dataclasses.replace(config_module.METHOD_SPECS["coda"], corrective=False,
                                  planner={"exploration_share": 0.5, "replay_share": 0.2,
                                           "scene_replay_share": 0.3})
    monkeypatch.setitem(config_module.METHOD_SPECS, "coda", changed)
    assert LoopConfig(**{**TINY, "method": "coda"}).generation_config().exploration_share == 0.5
    resumed = CoevolutionLoop(run_dir)
    try:
        assert resumed.config.generation_config() == planned
        assert resumed.config.spec.corrective is True
    finally:
        resumed.close()
    with pytest.raises(ValueError, match=r"another config \(corrective, planner differ\)"):
        CoevolutionLoop(run_dir, LoopConfig(**{**TINY, "method": "coda"}))
    assert json.loads((run_dir / "config.json").read_text()) == saved  # a refused start leaves the folder as it was
    # the run's own settings, written out, with more rounds and progress bars: accepted (`coda experiment --quiet`)
    CoevolutionLoop(run_dir, dataclasses.replace(pinned, rounds=3, progress=True)).close()
    assert json.loads((run_dir / "config.json").read_text()) == {**saved, "rounds": 3, "progress": True}


@pytest.mark.ros
def test_run_records_every_step_and_uses_ros_workers(tmp_path: Path, ros_domain: int, start_process) -> None:
    """One tiny run with one local process and one sim_bridge worker on the domain."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    start_process([sys.executable, "-m", "coda_engine.ros.sim_bridge_node", "--ros-args", "-r", "__ns:=/far_arm",
                   "-p", f"checkpoint_root:={run_dir / 'checkpoints'}", "-p", "camera_rate_hz:=0.0"])
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**TINY, "seed": 3}))
    time.sleep(3.0)  # discovery of the worker's action server
    result = subprocess.run([*CODA, "run", "--config", str(config), "--run-dir", str(run_dir), "--json"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert [row["round"] for row in summary["rounds"]] == [0, 1]
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    for row in summary["rounds"]:
        assert set(row["per_split"]) == {"id", "position"}
        assert all(0.0 <= v <= 1.0 for v in row["per_split"].values())
    steps = _finished(run_dir / "memory.db")
    assert sorted(steps) == sorted([(0, s) for s in ROUND0_STEPS] + [(1, s) for s in ROUND_STEPS])

    from coda_loop.memory import MemoryStore

    with MemoryStore(run_dir / "memory.db") as store:
        episodes = store.finished_step(1, EpisodesResult)
        assert len(episodes.episode_ids) == 3 + 2  # budget + one probe per family
        assert episodes.remote.get("far_arm", 0) >= 1, episodes  # the ROS worker took a share
        robots = {store.get("episode", e).payload["robot_id"] for e in episodes.episode_ids}
        assert any(r.startswith("local_") for r in robots) and len(robots) >= 2
        diagnose = store.finished_step(1, DiagnoseResult)
        assert len(diagnose.diagnosis_ids) == 5
        assert store.get("critic_version", diagnose.critic_version).payload["backend"] == "grounded"
        # grounded+learned: the learned critic acting in round 1 is the one round 0 kept; both are in memory
        from coda_critic.models import EMBEDDED_MODEL

        learned0, learned1 = store.finished_step(0, DiagnoseResult).learned, diagnose.learned
        assert learned0.version == EMBEDDED_MODEL.name and learned1.version == learned0.next_version
        assert learned1.agreement["episodes"] == 5 and len(learned1.verdicts) == 5
        assert 0.0 <= learned1.agreement["failure_mode"] <= 1.0
        for done in (learned0, learned1):
            assert store.get("critic_version", done.version).payload["backend"] == "learned"
            tuned = done.fine_tune
            assert tuned.parent == done.version and tuned.held_out_examples >= 1
            assert tuned.kept == (done.next_version != done.version)
            assert (run_dir / done.next_folder / "model.safetensors").is_file() or not tuned.kept
        programs = store.finished_step(1, ProgramsResult)
        assert store.get("generation_program", programs.generation_program_id) is not None
        assert store.get("training_program", programs.training_program_id) is not None
        generate = store.finished_step(1, GenerateResult)
        round0 = store.finished_step(0, ProgramsResult)
        assert generate.program_id == round0.generation_program_id  # round 1 spent what round 0 planned
        train = store.finished_step(1, TrainResult)
        assert store.get("policy_version", train.version) is not None
        assert (run_dir / "checkpoints" / train.version / "config.json").is_file()
        rows = {(p["round"], p["split"]) for p in store.progress()}
        assert rows == {(r, s) for r in (0, 1) for s in ("id", "position")}
    report = (run_dir / "report.html").read_text()
    assert 'class="critic-agreement"' in report and learned1.version in report


RESUMED = {**TINY, "base_sft_steps": 400, "rl_env_steps": 1024}
"""Round 0 and round 1, with a behaviour-cloning SFT and a PPO update long enough (seconds) to be killed inside."""


def _wait_and_stop(proc: subprocess.Popen, run_dir: Path, at: Any, sig: int, what: str) -> list[tuple[int, str]]:
    """Poll ``at(run_dir)`` until true, send ``sig`` to ``proc`` and wait for it; return the finished steps then.

    A run that ends before the kill point fails the test (the point was missed, nothing was shown).
    """
    deadline = time.monotonic() + 400
    while not at(run_dir):
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"{what} never came"
        time.sleep(0.02)
    children = _children(proc.pid)
    os.kill(proc.pid, sig)
    proc.wait(timeout=120)
    end = time.monotonic() + 15.0
    while [pid for pid in children if _alive(pid)] and time.monotonic() < end:
        time.sleep(0.2)
    assert [pid for pid in children if _alive(pid)] == [], "workers outlived the stopped run"
    return _finished(run_dir / "memory.db")


def _in_sft(run: Path) -> bool:  # round 0's demonstrations are written and its SFT checkpoint is not
    return (run / "demos" / "r000.npz").is_file() and not (run / "checkpoints" / "r000-sft" / "config.json").is_file()


def _in_episodes(run: Path) -> bool:  # round 1's scenes are generated (its episodes run next, for seconds)
    return (1, "generate") in _finished(run / "memory.db")


def _in_ppo(run: Path) -> bool:  # round 1's PPO saved its first update and the train step has not finished
    return (run / "checkpoints" / "r001-rl" / "trainer_state.json").is_file()


KILL_POINTS = {
    "sft": (_in_sft, [], (0, "train")),
    "episodes": (_in_episodes, [(0, s) for s in ROUND0_STEPS] + [(1, "generate")], (1, "episodes")),
    "ppo": (_in_ppo, [(0, s) for s in ROUND0_STEPS] + [(1, s) for s in ("generate", "episodes", "diagnose",
                                                                          "programs")], (1, "train")),
}
"""Kill point: (when, the steps finished by then, the step it interrupts)."""


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return the uninterrupted run that every stopped and resumed run must equal."""
    root = tmp_path_factory.mktemp("straight")
    (root / "config.json").write_text(json.dumps(RESUMED))
    result = subprocess.run([*CODA, "run", "--config", str(root / "config.json"), "--run-dir", str(root / "run"),
                             "--no-ros", "--no-report"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (root / "run" / "checkpoints" / "r001-rl" / "trainer_state.json").is_file(), "round 1 ran no PPO"
    return root / "run"


def _assert_same_run(straight: Path, resumed: Path) -> None:
    """Every policy version's weights bit for bit and every success rate are the straight run's."""
    from safetensors.numpy import load_file

    versions = sorted(p.name for p in (straight / "checkpoints").iterdir())
    assert versions == sorted(p.name for p in (resumed / "checkpoints").iterdir())
    for version in versions:
        a = load_file(straight / "checkpoints" / version / "model.safetensors")
        b = load_file(resumed / "checkpoints" / version / "model.safetensors")
        assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a), f"{version} differs after the resume"
    rates = "SELECT round, family, split, success, episodes FROM progress ORDER BY round, family, split"
    with sqlite3.connect(straight / "memory.db") as one, sqlite3.connect(resumed / "memory.db") as two:
        assert one.execute(rates).fetchall() == two.execute(rates).fetchall()
        steps = "SELECT round, step FROM loop_steps ORDER BY round, step"
        assert one.execute(steps).fetchall() == two.execute(steps).fetchall()


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_a_run_killed_at_any_point_resumes_to_the_uninterrupted_run(point: str, tmp_path: Path,
                                                                   straight_run: Path) -> None:
    """SIGKILL during round 0's SFT, during round 1's episodes or during round 1's PPO, then --resume.

    Finished steps are kept as they were (not redone), the interrupted one runs again, and the run ends equal to
    the uninterrupted one: every policy version's weights bit for bit, every success rate.
    """
    at, done_before, interrupted = KILL_POINTS[point]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(RESUMED))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([*CODA, "run", "--config", str(config), "--run-dir", str(run_dir), "--no-ros",
                             "--no-report"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        before = _wait_and_stop(proc, run_dir, at, signal.SIGKILL, f"the kill point {point}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sorted(before) == sorted(done_before) and interrupted not in before, before
    with sqlite3.connect(run_dir / "memory.db") as conn:
        kept = dict(((r, s), o) for r, s, o in conn.execute("SELECT round, step, outputs FROM loop_steps"))
        scenes_before = conn.execute("SELECT COUNT(*) FROM scenes").fetchone()[0]
    result = subprocess.run([*CODA, "run", "--resume", str(run_dir), "--no-ros", "--no-report", "--json"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with sqlite3.connect(run_dir / "memory.db") as conn:
        again = dict(((r, s), o) for r, s, o in conn.execute("SELECT round, step, outputs FROM loop_steps"))
        scenes_after = conn.execute("SELECT COUNT(*) FROM scenes").fetchone()[0]
    redone = sorted(key for key, value in kept.items() if again[key] != value)
    assert redone == [], f"finished steps recorded again by the resume: {redone}"
    if point != "sft":  # round 1's scenes were generated before the kill: the resume generated none again
        assert scenes_after == scenes_before
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert [row["round"] for row in summary["rounds"]] == [0, 1]
    # Both starts are recorded with the code they ran: this checkout's commit, in the summary too.
    from coda_loop.memory import MemoryStore
    from coda_loop.provenance import code_label, workspace_commit

    with MemoryStore(run_dir / "memory.db") as store:
        starts = store.starts()
    assert [s["first_round"] for s in starts] == [0, 0 if point == "sft" else 1]
    commit, _ = workspace_commit()  # "" when the tree is not a git checkout
    assert all(s["commit"] == commit and s["packages"]["torch"] for s in starts)
    assert summary["code"] == list(dict.fromkeys(code_label(s) for s in starts))
    _assert_same_run(straight_run, run_dir)


@pytest.mark.ros
def test_the_coda_loop_node_stopped_mid_episodes_resumes_to_the_uninterrupted_run(tmp_path: Path, ros_domain: int,
                                                                                  straight_run: Path) -> None:
    """SIGINT to the coda_loop node during round 1's episodes, then a new start with the same run_dir.

    SIGINT is what `ros2 launch` sends on Ctrl-C. The run ends equal to the uninterrupted `coda run`.
    """
    config = tmp_path / "config.json"
    config.write_text(json.dumps(RESUMED))
    run_dir = tmp_path / "run"
    node = [sys.executable, "-m", "coda_loop.ros.loop_node", "--ros-args", "-p", f"run_dir:={run_dir}",
            "-p", f"config_file:={config}", "-p", "write_report:=false"]
    log = tmp_path / "first.log"
    with log.open("w") as out:
        proc = subprocess.Popen(node, stdout=out, stderr=subprocess.STDOUT)
    try:
        before = _wait_and_stop(proc, run_dir, _in_episodes, signal.SIGINT, "round 1's episodes")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert "resumes the run" in log.read_text()
    assert (1, "generate") in before and (1, "episodes") not in before, before
    again = subprocess.run(node, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    _assert_same_run(straight_run, run_dir)


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    result = subprocess.run([*CODA, "run", "--resume", str(tmp_path / "nothing"), "--no-ros"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and "not a run folder" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("budget: -3\n")
    result = subprocess.run([*CODA, "run", "--config", str(bad), "--no-ros"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "budget=-3" in result.stderr
    result = subprocess.run([*CODA, "run", "--no-ros", "--critic-service", "/diagnose_episodes", "--runs-root",
                             str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--critic-service name ROS services (drop --no-ros)" in result.stderr
    assert not (tmp_path / "runs").exists(), "the refused run left a folder"


@pytest.mark.ros
def test_a_second_loop_on_one_domain_is_refused_but_not_after_the_first_was_killed(
        tmp_path: Path, ros_domain: int, rclpy_node, start_process) -> None:
    """A live loop blocks ``coda run`` and ``coda_loop`` on its domain; a killed one blocks nothing.

    The first loop is a process with a spinning ``coda_run`` node. Once SIGKILLed it stays in the graph for a while
    but no longer answers.
    """
    from coda_loop.ros.graph import loops_in_graph, refuse_second_loop

    fake_loop = "import rclpy; rclpy.init(); rclpy.spin(rclpy.create_node('coda_run'))"
    first = start_process([sys.executable, "-c", fake_loop])
    deadline = time.monotonic() + 30
    while loops_in_graph(rclpy_node, 0.5) != ["/coda_run"]:
        assert time.monotonic() < deadline and first.poll() is None, "the first loop's node never showed up"
    with pytest.raises(RuntimeError, match=rf"another loop \(/coda_run\) is running on ROS domain {ros_domain}"):
        refuse_second_loop(rclpy_node)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    # A long watch: a process just started on busy cores can take seconds to see the first one.
    result = subprocess.run([*CODA, "run", "--config", str(config), "--run-dir", str(tmp_path / "second"),
                             "--discovery-wait", "60"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "another loop (/coda_run) is running" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "second").exists(), "the refused run left a folder"
    result = subprocess.run([*CODA, "run", "--config", str(config), "--runs-root", str(tmp_path / "runs"),
                             "--discovery-wait", "60"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and list((tmp_path / "runs").iterdir()) == [], "the refused run left a folder"
    loop = subprocess.run([sys.executable, "-m", "coda_loop.ros.loop_node", "--ros-args",
                           "-p", f"run_dir:={tmp_path / 'launched'}", "-p", "discovery_wait_s:=60.0"],
                          capture_output=True, text=True, timeout=120)
    assert loop.returncode == 2 and "another loop (/coda_run)" in loop.stdout + loop.stderr
    first.kill()
    first.wait()
    assert loops_in_graph(rclpy_node, 0.5) == ["/coda_run"], "the killed loop left the graph at once"
    refuse_second_loop(rclpy_node)  # listed but dead: not refused (coda run --resume right after a SIGKILL)


@pytest.mark.ros
def test_a_training_loop_answers_over_dds_and_refuses_a_second_loop(tmp_path: Path, ros_domain: int,
                                                                   rclpy_node) -> None:
    """While the ``coda_loop`` node trains, its parameters and checkpoint service answer and a second loop is refused.

    The node runs round 0's behaviour cloning (the ``train`` step, long here); the test waits for the node's log line
    that the step started and does everything before the line that it finished. Each answer must come within the
    liveness check's own timeout (``ANSWER_TIMEOUT_S``): a node that answered only between batches (as the loop did
    before) answers none of them. The second loop is the launch file's check (``refuse_before_launch``), which joins
    the domain with no node of the loop's (test_launch_files.py checks that it comes first in the launch file).
    """
    from rcl_interfaces.srv import GetParameters

    from coda_engine.ros.spin import call_spinning, spin_until
    from coda_loop.ros.graph import ANSWER_TIMEOUT_S, refuse_before_launch
    from coda_msgs.srv import GetCheckpoint

    run_dir = tmp_path / "run"
    config = tmp_path / "long_train.json"
    # as launched: no local workers (the runner and its checkpoint service start with the node); killed mid-train
    config.write_text(json.dumps({**TINY, "workers": 0, "base_sft_steps": 200_000, "rl_env_steps": 0}))
    log = tmp_path / "coda_loop.log"
    with log.open("w") as out:
        loop = subprocess.Popen([sys.executable, "-m", "coda_loop.ros.loop_node", "--ros-args",
                                 "-p", f"run_dir:={run_dir}", "-p", f"config_file:={config}",
                                 "-p", "wait_for_workers_s:=0.0"],
                                env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while "round 0 train: started" not in log.read_text():
            assert loop.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        params = rclpy_node.create_client(GetParameters, "/coda_loop/get_parameters")
        checkpoints = rclpy_node.create_client(GetCheckpoint, "/coda_loop/get_checkpoint")
        for client in (params, checkpoints):
            assert spin_until(rclpy_node, client.service_is_ready, 60.0), f"{client.srv_name} did not appear"
        waits = []
        for _ in range(5):
            started = time.monotonic()
            answer = call_spinning(rclpy_node, params, GetParameters.Request(names=["rounds", "run_dir"]),
                                   ANSWER_TIMEOUT_S)
            waits.append(time.monotonic() - started)
            assert answer is not None, f"no parameters within {ANSWER_TIMEOUT_S} s (waits so far {waits})"
            assert answer.values[0].integer_value == 1  # the run's (its config file's), not the node's default
            assert answer.values[1].string_value == str(run_dir)
        answer = call_spinning(rclpy_node, checkpoints, GetCheckpoint.Request(version="r009-bc"), ANSWER_TIMEOUT_S)
        assert answer is not None and not answer.success and "r009-bc" in answer.error
        with pytest.raises(RuntimeError, match=r"another loop \(/coda_loop\) is running"):
            refuse_before_launch(30.0)
        text = log.read_text()
        assert "round 0 train: {" not in text, "the train step ended before the checks"
        assert loop.poll() is None, text[-3000:]
    finally:
        loop.kill()
        loop.wait()
    print(f"parameter answers while training: {', '.join(f'{w * 1000:.0f} ms' for w in waits)}")


@pytest.mark.ros
def test_coda_loop_node_runs_every_episode_on_sim_bridge_processes(tmp_path: Path, ros_domain: int,
                                                                   start_process) -> None:
    """The launch-file layout: coda_loop with no local workers, a sim_bridge process, a memory node process.

    The worker is set up as on another machine: it does not see the run's checkpoint folder, so it fetches each
    policy version from the loop over ROS (GetCheckpoint) into its own cache.
    """
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**TINY, "workers": 0, "rl_env_steps": 0, "families": ["reach"], "budget": 2}))
    cache = tmp_path / "worker-cache"
    start_process([sys.executable, "-m", "coda_engine.ros.sim_bridge_node", "--ros-args", "-r", "__ns:=/sim_0",
                   "-p", f"checkpoint_cache:={cache}", "-p", "camera_rate_hz:=0.0"])
    loop = start_process([sys.executable, "-m", "coda_loop.ros.loop_node", "--ros-args",
                          "-p", f"run_dir:={run_dir}", "-p", f"config_file:={config}"])
    deadline = time.monotonic() + 500
    while loop.poll() is None:
        assert time.monotonic() < deadline, "coda_loop did not finish"
        time.sleep(1.0)
    assert loop.returncode == 0
    # the run folder holds what a `coda run` folder holds: its summary and its report beside the memory
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [row["round"] for row in summary["rounds"]] == [0, 1] and summary["seconds"] > 0
    assert summary["report"] == str(run_dir / "report.html")
    assert "CoDA run report: run" in (run_dir / "report.html").read_text()
    from coda_loop.memory import MemoryStore

    with MemoryStore(run_dir / "memory.db") as store:
        for r in (0, 1):
            episodes = store.finished_step(r, EpisodesResult)
            assert episodes.remote == {"sim_0": len(episodes.episode_ids)}  # all of them, over DDS
            for episode_id in episodes.episode_ids:
                record = store.get("episode", episode_id)
                assert record.payload["robot_id"] == "sim_0" and record.payload["keyframe_hashes"]
        assert store.finished_step(1, EvaluateResult) is not None
        # every policy version the worker ran came over ROS: the same model bytes, in the cache under their hash
        versions = {store.get("episode", e).payload["policy_version"]
                    for r in (0, 1) for e in store.finished_step(r, EpisodesResult).episode_ids} - {"expert"}
    assert versions, "no trained version ran on the worker"
    from coda_engine.checkpoint_share import model_sha256

    for version in versions:
        sha = model_sha256(run_dir / "checkpoints" / version)
        assert model_sha256(cache / sha[:16] / version) == sha, f"{version} is not in the worker's cache"


@pytest.mark.ros
def test_mixed_run_with_two_sim_workers_and_a_stand_in_arm(tmp_path: Path, ros_domain: int, start_process,
                                                          stand_in_robot) -> None:
    """`coda run --arms`: two local sim workers and one fake_ros2_control_arm behind an arm_bridge, two rounds.

    Round 0's policy has no simulation score yet, so the arm's sim-first gate refuses it (the episode runs in
    simulation instead and the refusal is an intervention in memory); round 1's policy passed the gate.
    """
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    # Two sim workers, the stand-in, its bridge and the loop share the machine's cores here: a stand-in starved for
    # a second tripped the 1 s state watchdog once. The watchdogs are tested in test_arm_bridge; this test is about
    # the loop's mixing, so it gives them room.
    robot = stand_in_robot("panda_fake.yaml", state_timeout_s=3.0, policy_timeout_s=3.0)
    start_process([sys.executable, "-m", "coda_engine.ros.fake_arm_node", "--ros-args", "-r", "__ns:=/panda_fake_0"])
    start_process([sys.executable, "-m", "coda_engine.ros.arm_bridge_node", "--ros-args", "-r", "__ns:=/panda_fake_0",
                   "-p", f"robot_config:={robot}", "-p", f"checkpoint_root:={run_dir / 'checkpoints'}"])
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("sim_workers: 2\narms:\n  - robot_id: panda_fake_0\n    episodes_per_round: 2\n")
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**TINY, "rl_env_steps": 0, "seed": 5}))
    time.sleep(3.0)  # discovery of the bridge's action server
    result = subprocess.run([*CODA, "run", "--config", str(config), "--arms", str(fleet), "--run-dir", str(run_dir),
                             "--json"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert [row["round"] for row in summary["rounds"]] == [0, 1]
    arms = {row["round"]: row for row in summary["arms"]}
    assert arms[0]["by_source"]["real"]["episodes"] == 0 and "sim-first gate" in arms[0]["arm_notes"]["panda_fake_0"]
    real = arms[1]["by_robot"]["panda_fake_0"]
    assert real["episodes"] + real["unfinished"] == 2 and real["episodes"] >= 1, arms[1]

    from coda_loop.memory import MemoryStore

    with MemoryStore(run_dir / "memory.db") as store:
        for r in (0, 1):
            episodes = store.finished_step(r, EpisodesResult)
            assert len(episodes.episode_ids) == TINY["budget"] + 2  # every job ended with a finished episode
            for unfinished in episodes.real_arms.unfinished_ids:  # kept in memory, and its job ran again
                assert store.get("episode", unfinished).payload["status"] in (1, 2)
                assert any(e.startswith(unfinished + "-retry") for e in episodes.episode_ids)
        payloads = [store.get("episode", e).payload for e in store.finished_step(1, EpisodesResult).episode_ids]
        ran_real = [p for p in payloads if p["source"] == 1]
        assert len(ran_real) == real["episodes"] and all(p["robot_id"] == "panda_fake_0" for p in ran_real)
        assert all(p["source"] == 0 for p in payloads if p not in ran_real)
        diagnose = store.finished_step(1, DiagnoseResult)
        assert len(diagnose.real_diagnosis_ids) == len(ran_real)  # the learned critic diagnosed them
        gate = [i.payload for i in store.records("intervention", limit=100) if i.payload["kind"] == "gate"]
        assert gate and gate[0]["robot_id"] == "panda_fake_0"
    page = (run_dir / "report.html").read_text()
    assert 'class="sim-vs-real"' in page and "panda_fake_0" in page and 'class="interventions"' in page



ROUND_OPTIONS = {**TINY, "families": ["push"], "rl_env_steps": 256, "bc_gate_episodes": 3, "bc_gate_tolerance": 0.0,
                 "corrective_relabel": 1000, "corrective_beside_start": True, "relabel_successes": True,
                 "demonstrator": "state_expert", "corrective_skip_families": [], "bc_potential_weight": 1.0,
                 "planner": {"edit_replays": True}}
"""A coda round with the BC gate, on-policy labels, the state expert demonstrating, cloning weighted by the round's
potentials and failed scenes replayed edited (what the tests below read); push scenes only, so corrective push
demonstrations are switched back on (the default skips push)."""


@pytest.fixture(scope="module")
def optioned_loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One finished tiny coda run with ``ROUND_OPTIONS``, left open for the tests to read."""
    from coda_loop.rounds import CoevolutionLoop

    loop = CoevolutionLoop(tmp_path_factory.mktemp("optioned") / "run", LoopConfig(**ROUND_OPTIONS))
    try:
        loop.run()
        yield loop
    finally:
        loop.close()


def test_failed_scenes_are_replayed_edited_along_their_diagnosed_failure(optioned_loop: Any) -> None:
    """GenerationConfig.edit_replays: the replayed scene is a stored edit of a failed one, and the round uses it."""
    from coda_critic.generation import EDITS_FOR_MODE, BudgetAllocation, replayed_scene, scene_edits
    from coda_engine.sim.scene import Scene

    loop = optioned_loop
    gen = loop.output(1, GenerateResult)
    program = loop.store.get("generation_program", gen.program_id).payload
    (allocation,) = [a for a in map(BudgetAllocation.from_dict, program["allocations"]) if replayed_scene(a)]
    (original,) = loop._scenes([replayed_scene(allocation)])
    (failed,) = [d for d in loop._diagnoses(0) if d.scene_id == original.scene_id]
    assert failed.is_failure and scene_edits(allocation) == EDITS_FOR_MODE[failed.failure_mode]
    assert gen.replayed_scenes == 1 and sum(gen.edited_scenes.values()) == 1 and gen.unedited_replays == 0
    (operator,) = gen.edited_scenes
    assert operator in scene_edits(allocation)
    (edited_id,) = [i for i in gen.scene_ids if i.startswith("r001-edit-")]
    record = loop.store.get("scene", edited_id)
    edited = Scene.from_dict(record.payload)
    assert (record.payload["origin"], record.payload["program_id"]) == ("edited", gen.program_id)
    assert edited.meta["edit"] == {"from": original.scene_id, "operator": operator}
    assert (edited.instruction, edited.family, edited.round) == (original.instruction, original.family, 1)
    assert original.scene_id not in gen.scene_ids  # the edit replaced the exact replay
    from coda_engine.sim.arm import SimArm
    from coda_engine.sim.expert import run_expert

    assert run_expert(SimArm(), edited, "state_expert").success  # only an edit the expert solves is kept
    ran = [loop.store.get("episode", e).payload for e in loop.output(1, EpisodesResult).episode_ids]
    assert sum(p["scene_id"] == edited_id for p in ran) == 1  # the policy ran on it
    from coda_loop.analysis import analyze_run, format_analysis

    assert analyze_run(loop.run_dir)["rounds"][1]["edited"] == {operator: 1}
    assert f"round 1 replays edited: {operator} 1" in format_analysis(analyze_run(loop.run_dir))


def test_bc_gate_scores_each_update_and_a_refused_one_leaves_the_policy_as_it_was(optioned_loop: Any,
                                                                                  tmp_path: Path) -> None:
    """LoopConfig.bc_gate_episodes: the round's BC update against its parent on the same new scenes."""
    from coda_loop.memory import MemoryStore
    from coda_loop.rounds import CoevolutionLoop

    loop = optioned_loop
    train = loop.output(1, TrainResult)
    gate = train.bc_gate
    assert gate.episodes_per_family == 3 and set(gate.per_family_after) == {"push"}
    assert gate.kept == (gate.after >= gate.before)
    if gate.kept:
        assert loop.store.get("policy_version", "r001-bc").payload["metrics"]["bc_gate"] == gate.to_dict()
    # the same gate against the scripted expert as parent: scored on real episodes, and the weak update refused
    expert = loop._bc_gate(1, "expert", "r001-bc")
    assert expert.before >= 2 / 3 > expert.after and not expert.kept, expert

    class RefusingLoop(CoevolutionLoop):
        """Scores the BC update as usual, then refuses it whatever the scores (the refused path, deterministic)."""

        def _bc_gate(self, r: int, parent: str, version: str) -> BCGate:
            return dataclasses.replace(super()._bc_gate(r, parent, version), kept=False)

    fields = {**TINY, "families": ["push"], "rl_env_steps": 256, "bc_gate_episodes": 3, "bc_gate_tolerance": 0.0}
    refused = RefusingLoop(tmp_path / "refused", LoopConfig(**fields))
    try:
        refused.run()
        train = refused.output(1, TrainResult)
        assert not train.bc_gate.kept and train.bc_version == "r001-bc"
        assert train.version in ("r000-sft", "r001-rl")  # the parent, or PPO started from it and kept
        assert train.rl.kept == (train.version == "r001-rl")
        assert refused.output(1, EvaluateResult).version == train.version
    finally:
        refused.close()
    with MemoryStore(tmp_path / "refused" / "memory.db") as store:
        assert store.get("policy_version", "r001-bc") is None  # a refused update is not a policy version
        if train.version == "r001-rl":
            assert store.get("policy_version", "r001-rl").payload["parent"] == "r000-sft"


def test_on_policy_labels_keep_corrective_demonstrations_beside_the_experts_and_relabel_successes(
        optioned_loop: Any) -> None:
    """LoopConfig.corrective_beside_start and relabel_successes: what a round's demonstration file holds."""
    from coda_loop.training import NEVER, RELABELLED_SUCCESS
    from coda_policy.data import DemoSet

    loop = optioned_loop
    train = loop.output(1, TrainResult)
    stats = train.corrective
    scenes = loop.output(1, GenerateResult).scene_ids
    generated = set(scenes)
    diagnoses = [d for d in loop._diagnoses(1) if d.scene_id in generated]
    assert stats.beside_start and stats.expert_from_start == len(scenes) == ROUND_OPTIONS["budget"]
    assert stats.failed_scenes == sum(d.is_failure and d.failed_stage >= 0 for d in diagnoses)
    assert stats.relabelled_successes == sum(not d.is_failure for d in diagnoses)
    # every scene's expert demonstration, plus each recovered corrective one and each relabelled success
    assert train.new_demos == len(scenes) + stats.recovered + stats.relabelled_successes
    assert DemoSet.load(loop.run_dir / "demos" / "r001.npz").num_episodes == train.new_demos
    takeovers = loop._takeovers(1)
    assert {sid for sid, (_, mode) in takeovers.items() if mode == RELABELLED_SUCCESS} == {
        d.scene_id for d in diagnoses if not d.is_failure}
    # the relabelling run itself, on the loop's worker, with a policy that succeeds (the scripted expert):
    # it acts to its success and every one of its steps is kept
    # LoopConfig.corrective_skip_families: a skipped family's scenes get no corrective demonstration
    kept = loop.config
    try:
        loop.config = dataclasses.replace(kept, corrective_skip_families=("push",))
        assert takeovers and loop._takeovers(1) == {}
    finally:
        loop.config = kept
    scene = loop._scenes(scenes[:1])[0]
    (episode,) = loop._corrective_episodes([(scene, (NEVER, RELABELLED_SUCCESS))], "expert")
    assert episode.success and episode.policy_steps == episode.steps == len(episode.actions) > 0
    # LoopConfig.demonstrator: the scene's demonstration from its start (the file's first episode) is the state
    # expert's, label for label
    from coda_engine.sim.arm import SimArm
    from coda_engine.sim.expert import run_expert
    from coda_policy.config import PolicyConfig
    from coda_policy.model import action_targets

    demos = DemoSet.load(loop.run_dir / "demos" / "r001.npz")
    first = demos.actions[demos.episode == demos.episode[0]]
    replay = run_expert(SimArm(), scene, "state_expert")
    assert replay.success
    np.testing.assert_allclose(first, action_targets(replay.actions, PolicyConfig().max_delta), atol=1e-6)


def test_the_residual_learner_runs_in_the_loop_on_the_rounds_budget_and_gate(tmp_path: Path) -> None:
    """``rl_learner: residual``: the round's RL trains a residual head on the round's BC policy; the record says so."""
    from coda_loop.rounds import CoevolutionLoop
    from coda_policy.checkpoint import load_policy, read_config

    loop = CoevolutionLoop(tmp_path / "run", LoopConfig(**{**TINY, "families": ["reach"], "rl_learner": "residual"}))
    try:
        loop.run()
        train = loop.output(1, TrainResult)
    finally:
        loop.close()
    assert train.rl is not None and train.rl.learner == "residual" and train.rl.env_steps == TINY["rl_env_steps"]
    assert train.rl.shaped  # coda: the critics were warmed up on the round's potential
    assert train.rl.eval_episodes == TINY["rl_eval_episodes"] and train.rl.kept == (train.version == train.rl.version)
    folder = tmp_path / "run" / "checkpoints" / train.rl.version
    net, _ = load_policy(folder)
    assert net.residual is not None
    meta = read_config(folder)["meta"]
    assert meta["trainer"] == "residual_rl" and meta["parent"].endswith(train.bc_version) and meta["updates"] > 0


def test_ppo_successes_become_demonstrations_of_the_later_rounds(tmp_path: Path) -> None:
    """LoopConfig.rl_success_demos: round 1's successful PPO episodes in round 2's behaviour cloning, not round 1's."""
    from coda_loop.rounds import CoevolutionLoop
    from coda_policy.checkpoint import read_config
    from coda_policy.data import DemoSet

    class LateStageLoop(CoevolutionLoop):
        """Plans PPO on push from stage 2, past its two stages, so a tiny policy's PPO episodes succeed.

        The expert drives each episode to the push's end; everything else runs as diagnosed.
        """

        def output(self, r: int, kind: Any) -> Any:
            out = super().output(r, kind)
            return dataclasses.replace(out, rl_family="push", rl_stage=2) if kind is ProgramsResult else out

    fields = {**TINY, "rounds": 2, "rl_success_demos": 5, "rl_stage_share": 1.0, "rl_env_steps": 256}
    loop = LateStageLoop(tmp_path / "run", LoopConfig(**fields))
    try:
        loop.run()
        rounds = {r: loop.output(r, TrainResult) for r in (1, 2)}
    finally:
        loop.close()
    demos = tmp_path / "run" / "demos"
    for r, train in rounds.items():
        ppo = demos / f"r{r:03d}.ppo.npz"
        assert ppo.is_file() == (train.rl.success_demos > 0)
        if train.rl.success_demos:
            kept = DemoSet.load(ppo)
            assert kept.num_episodes == train.rl.success_demos <= 5 and kept.families == ("reach", "push")
            assert set(kept.family.tolist()) == {kept.families.index(train.rl.family)}
    assert rounds[1].rl.success_demos == 5  # kept the last 5 of more
    used = {r: [Path(p).name for p in read_config(tmp_path / "run" / "checkpoints" / f"r{r:03d}-bc")["meta"]
                ["finetune"]["demos"]] for r in (1, 2)}
    assert "r001.ppo.npz" not in used[1] and used[2][0] == "r001.ppo.npz" and used[2][-1] == "r002.npz"
    assert rounds[2].demo_episodes == sum(DemoSet.load(demos / n).num_episodes for n in used[2])


def test_a_rounds_behaviour_cloning_replays_from_its_checkpoint(optioned_loop: Any, tmp_path: Path) -> None:
    """``coda train replay <run>/checkpoints/r001-bc``: the recorded step gives the same weights, a changed one not.

    The loop records its behaviour-cloning step in the checkpoint (``meta.finetune``); replaying it needs nothing
    else (a run folder moved elsewhere: ``test_finetune.py``).
    """
    import hashlib

    from coda_policy.checkpoint import read_config

    def digest(folder: Path) -> str:
        return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()

    run_dir = optioned_loop.run_dir
    folder = run_dir / "checkpoints" / "r001-bc"
    meta = read_config(folder)["meta"]
    assert meta["trainer"] == "loop-bc" and meta["parent"] == "r000-sft" and meta["round"] == 1
    recorded = meta["finetune"]
    assert recorded["demos"] == [str((run_dir / "demos" / f"r00{r}.npz").resolve()) for r in (0, 1)]
    assert recorded["steps"] == ROUND_OPTIONS["finetune_steps"] and recorded["batches"] == "potential-gain"
    # the round's Text2potential program of its family, as the store holds it, weighted the rows
    planned = optioned_loop.output(1, ProgramsResult).potentials
    program = optioned_loop.store.get("potential_program", planned["push"]).payload["source"]
    assert recorded["programs"] == {"push": program} and recorded["potential_weight"] == 1.0
    # the checkpoint names the program that weighted the rows: the round's where it compiles on stored observations
    from coda_core_cpp import PotentialError
    from coda_engine.sim.layout import LAYOUT
    from coda_engine.sim.stages import compile_program

    try:
        compile_program(program, LAYOUT)
        used = "round"
    except PotentialError:
        used = "default"
    assert meta["finetune_programs_used"] == {"push": used}

    def replay(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CODA, "train", "replay", *argv, "--no-progress"], capture_output=True, text=True,
                              timeout=300)

    done = replay(str(folder), "--output-dir", str(tmp_path / "same"))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["version_id"] == "r001-bc" and out["replayed"] == str(folder)
    assert digest(tmp_path / "same" / "r001-bc") == digest(folder)  # the same bytes: same weights, same version

    done = replay(str(folder), "--output-dir", str(tmp_path / "balanced"), "--batches", "stage-balanced",
                  "--steps", "25")
    assert done.returncode == 0, done.stderr[-3000:]
    changed = read_config(tmp_path / "balanced" / "r001-bc")["meta"]
    assert changed["finetune"] == {**recorded, "batches": "stage-balanced", "steps": 25}
    assert changed["parent"] == "r000-sft" and digest(tmp_path / "balanced" / "r001-bc") != digest(folder)
    assert "finetune_programs_used" not in changed  # the recorded step's, not carried into a replay without it
    # another program and strength from the command line (what an older step, with none recorded, needs)
    programs = tmp_path / "programs.json"
    programs.write_text(json.dumps({"push": get_family("push").program}))
    done = replay(str(folder), "--output-dir", str(tmp_path / "default"), "--programs", str(programs),
                  "--potential-weight", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    changed = read_config(tmp_path / "default" / "r001-bc")["meta"]
    assert changed["finetune"] == {**recorded, "programs": {"push": get_family("push").program},
                                   "potential_weight": 3.0}
    assert changed["finetune_programs_used"] == {"push": "round"}  # the given program (the default's source) compiles
    assert digest(tmp_path / "default" / "r001-bc") != digest(folder)
    programs.write_text('["push"]')

    for argv, words in [
        (["--output-dir", str(run_dir / "checkpoints")], "would overwrite"),
        (["--output-dir", str(tmp_path), "--batches", "sorted"], "batches='sorted'"),
        (["--output-dir", str(tmp_path), "--reward", "sparse"], "PPO settings"),
        (["--output-dir", str(tmp_path), "--lr", "2"], "lr=2.0"),
        (["--output-dir", str(tmp_path), "--programs", str(programs)], "mapping family to program source"),
        (["--output-dir", str(tmp_path), "--potential-weight", "-1"], "potential_weight=-1.0"),
    ]:
        done = replay(str(folder), *argv)
        assert done.returncode == 2 and words in done.stderr and done.stdout == "", (argv, done.stderr)


def test_screen_pairs_a_changed_behaviour_cloning_step_with_the_recorded_one(optioned_loop: Any,
                                                                              tmp_path: Path) -> None:
    """``coda screen RUN --steps 25``: the round's step trained again changed, both scored, paired; resumes; errors."""
    from coda_loop.commands.screen import recorded_steps, round_programs
    from coda_policy.checkpoint import read_config

    run_dir = optioned_loop.run_dir
    assert recorded_steps(run_dir) == {1: run_dir / "checkpoints" / "r001-bc"}
    # the memory holds the programs the step recorded (what a step from before the recording is screened with)
    recorded = read_config(run_dir / "checkpoints" / "r001-bc")["meta"]["finetune"]
    assert round_programs(run_dir, 1) == recorded["programs"]

    def screen(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CODA, "screen", str(run_dir), "--output-dir", str(tmp_path / "scr"), *argv],
                              capture_output=True, text=True, timeout=300)

    options = ["--steps", "25", "--per-family", "1", "--split", "position", "--workers", "1", "--json"]
    done = screen(*options)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["rounds"] == [1] and out["changes"] == {"steps": 25}
    arm = tmp_path / "scr" / "arm" / "r001-bc"
    assert read_config(arm)["meta"]["finetune"]["steps"] == 25 and read_config(arm)["meta"]["parent"] == "r000-sft"
    for side, policy in (("control", run_dir / "checkpoints" / "r001-bc"), ("arm", arm)):
        record = json.loads((tmp_path / "scr" / "eval" / f"{side}-1.json").read_text())
        assert record["kind"] == "validation" and record["policy"] == str(policy)
        assert len(record["outcomes"]["position"]) == 4  # one entry of each family's validation suite
    assert out["comparison"] == json.loads((tmp_path / "scr" / "screen.json").read_text())["comparison"]
    # run again: nothing is trained or scored again, the same comparison
    stamp = (arm / "model.safetensors").stat().st_mtime_ns
    again = screen(*options)
    assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1]) == out
    assert (arm / "model.safetensors").stat().st_mtime_ns == stamp
    # another change or other splits into the same folder would mix two screens: refused
    other = screen("--steps", "30", "--per-family", "1", "--split", "position", "--workers", "1")
    assert other.returncode == 2 and "trained with another change" in other.stderr
    other = screen("--steps", "25", "--per-family", "2", "--split", "position", "--workers", "1")
    assert other.returncode == 2 and "scored other splits or entries" in other.stderr
    for argv, words in [([], "nothing to screen"), (["--steps", "5", "--rounds", "4"], "round(s) [4]"),
                        (["--batches", "sorted"], "batches='sorted'"), (["--lr", "1e-3", "--split", "mars"], "'mars'")]:
        done = screen(*argv)
        assert done.returncode == 2 and words in done.stderr and done.stdout == "", (argv, done.stderr)
