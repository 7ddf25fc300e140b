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
        deadline = time.monotonic() + 120
        while "round 0 train: started" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(1.0)  # into the behaviour cloning steps
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
