# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The ``coda_loop`` node (a process of ``launch/coda_sim.launch.py``) stopped by Ctrl-C in the middle of a round."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ros


@pytest.mark.parametrize("gap_s", [0.05, 0.5])
def test_ctrl_c_and_the_signal_launch_sends_after_it_stop_the_loop_resumable(tmp_path: Path, ros_domain: int,
                                                                             gap_s: float) -> None:
    """Both signals come while round 0 trains: the node exits 0 without a traceback, saying how to resume."""
    run_dir = tmp_path / "run"
    config = tmp_path / "loop.json"
    config.write_text(json.dumps({"rounds": 1, "budget": 2, "families": ["reach"], "base_demos_per_family": 2,
                                  "base_sft_steps": 1_000_000, "progress": False}))
    log = tmp_path / "loop.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "coda_loop.ros.loop_node", "--ros-args",
                                 "-p", f"run_dir:={run_dir}", "-p", f"config_file:={config}",
                                 "-p", "discovery_wait_s:=0.5", "-p", "wait_for_workers_s:=0.5"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        # Into the behaviour cloning steps: the SFT metrics have their step-0 validation line, so the demonstrations
        # are collected and the text embedder is imported and loaded. (A fixed wait after "train: started" let the
        # signal land, on a loaded machine, inside the embedder's import, where a C extension's initialisation
        # fails with ImportError instead of stopping: a case this test does not cover.)
        metrics = run_dir / "checkpoints" / "r000-sft" / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while not (metrics.is_file() and '"val"' in metrics.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        time.sleep(gap_s)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert f"the next start with run_dir {run_dir} resumes the run" in text, text[-3000:]
    with sqlite3.connect(f"file:{run_dir / 'memory.db'}?mode=ro", uri=True) as db:
        assert list(db.execute("SELECT round, step FROM loop_steps")) == [], "round 0's training cannot have finished"


def test_ctrl_c_while_the_text_model_loads_stops_the_loop_cleanly(tmp_path: Path, ros_domain: int) -> None:
    """A signal inside the text model's import (C extensions initialising) is held and acted on after it: exit 0."""
    log = tmp_path / "loop.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "coda_loop.ros.loop_node", "--ros-args",
                                 "-p", f"run_dir:={tmp_path / 'run'}", "-p", "rounds:=1", "-p", "budget:=2",
                                 "-p", "discovery_wait_s:=0.5", "-p", "wait_for_workers_s:=0.5"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "loading the text model" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)  # the second one of ros2 launch, at once
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text and "ImportError" not in text, text[-3000:]
    assert "loading the text model" in text and "text model loaded" not in text, text[-3000:]  # held, then acted on
    assert f"the next start with run_dir {tmp_path / 'run'} resumes the run" in text, text[-3000:]


def test_the_round_budget_and_run_size_have_one_default() -> None:
    """LoopConfig's defaults are the node's, loop.yaml's, the launch file's and (budget) the critic node's."""
    import ast

    import yaml

    from coda_critic.generation import ROUND_BUDGET
    from coda_critic.ros import critic_node
    from coda_loop.config import LoopConfig

    repo = Path(__file__).resolve().parents[3]
    loop_yaml = yaml.safe_load((repo / "src/coda_loop/config/loop.yaml").read_text())["/**"]["ros__parameters"]
    launch = ast.parse((repo / "launch/coda_sim.launch.py").read_text())
    declared = {call.args[0].value: kw.value.value for call in ast.walk(launch)
                if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "DeclareLaunchArgument"
                for kw in call.keywords if kw.arg == "default_value" and isinstance(kw.value, ast.Constant)}
    assert LoopConfig().budget == ROUND_BUDGET == critic_node.PARAMETERS["generation_budget"][0]
    for name in ("budget", "rounds", "method", "seed"):
        default = getattr(LoopConfig(), name)
        assert loop_yaml[name] == default, f"loop.yaml {name}: {loop_yaml[name]!r} != LoopConfig {default!r}"
        assert declared[name] == str(default), f"coda_sim.launch.py {name}: {declared[name]!r} != {default!r}"
