# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Commands run for real with small settings, and ``arm_bridge``'s ``SECURITY:`` line at start-up.

``coda doctor``, ``coda bench sim`` and ``coda bench loop --dds``; the ``SECURITY:`` line is README's and
docs/security.md's promise.

Each command is the installed ``coda`` entry point as a process; what it prints is checked, not only that it
exits. The ROS ones run on the test's own domain (``ros_domain``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coda_engine.ros.interface_samples import all_message_types

REPO_ROOT = Path(__file__).resolve().parents[1]
STAND_IN_ROBOT_FILE = REPO_ROOT / "src" / "coda_engine" / "config" / "robots" / "panda_fake.yaml"
WAIT_S = 60.0
"""Deadline of a condition wait: only reached when what is awaited never comes."""


def coda(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run the installed ``coda`` with ``args``; return the finished process (text output)."""
    return subprocess.run([str(Path(sys.prefix) / "bin" / "coda"), *args], capture_output=True, text=True,
                          timeout=timeout)


def last_json(out: str) -> dict[str, Any]:
    """Return the JSON object a command printed (the last line that starts one, or the whole text)."""
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("{")))


# ---------------------------------------------------------------- coda doctor
def test_coda_doctor_exchanges_every_type_on_the_tests_domain(ros_domain: int) -> None:
    done = coda("doctor", "--json", "--timeout", "60")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    facts = last_json(done.stdout)
    assert facts["ok"] is True and facts["ros_domain_id"] == ros_domain
    assert facts["python"] == ".".join(map(str, sys.version_info[:3]))
    assert set(facts["versions"]) == {"rclpy", "coda_msgs", "coda_core_cpp", "mujoco", "torch", "numpy"}
    assert not any(v.startswith("MISSING") for v in facts["versions"].values()), facts["versions"]
    exchange = facts["dds_exchange"]
    assert exchange["types_expected"] == len(all_message_types()) == exchange["types_received_intact"]
    assert exchange["missing"] == [] and exchange["mismatched"] == []
    assert 0.0 < exchange["seconds"] < 60.0


# ---------------------------------------------------------------- coda bench sim
def test_coda_bench_sim_prints_sane_figures() -> None:
    families, splits = ["reach", "push"], ["id", "position"]
    done = coda("bench", "sim", "--json", "--scenes", "2", "--steps", "20", "--frames", "4",
                "--families", *families, "--splits", *splits)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    figures = last_json(done.stdout)
    for key in ("step_overhead_ratio", "env_step_ms", "raw_physics_ms", "scenes_per_s", "render_fps_64",
                "render_fps_128"):
        assert isinstance(figures[key], float) and math.isfinite(figures[key]) and figures[key] > 0, (key, figures)
    # an env step is 50 mj_step calls plus IK, observation and stage: never cheaper than the 50 calls by much
    assert figures["step_overhead_ratio"] > 0.8, figures
    assert figures["stage_backend"].startswith("coda_core_cpp"), figures["stage_backend"]
    assert figures["expert_scenes"] == 2
    success = figures["expert_success"]
    assert {f: set(s) for f, s in success.items()} == {f: set(splits) for f in families}
    assert all(rate in (0.0, 0.5, 1.0) for rates in success.values() for rate in rates.values()), success
    assert success["reach"]["id"] == 1.0, success  # the scripted expert reaches both in-distribution scenes


def test_coda_bench_sim_text_output_lists_every_figure() -> None:
    done = coda("bench", "sim", "--scenes", "1", "--steps", "10", "--frames", "2", "--families", "reach",
                "--splits", "id")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["expert", "reach", "id", "1.000"], lines[0]
    keys = [line.split(":", 1)[0] for line in lines[1:]]
    assert keys == ["step_overhead_ratio", "env_step_ms", "raw_physics_ms", "scenes_per_s", "render_fps_64",
                    "render_fps_128", "stage_backend", "expert_success", "expert_scenes"], lines


def test_coda_bench_sim_refuses_settings_that_would_measure_nothing() -> None:
    for args, says in ((("--scenes", "0"), "--scenes 0: must be at least 1"),
                       (("--frames", "-1"), "--frames -1: must be at least 1"),
                       (("--families", "reech"), "unknown families or splits ['reech']")):
        done = coda("bench", "sim", *args)
        assert done.returncode == 2 and says in done.stderr, done.stderr[-2000:]


# ---------------------------------------------------------------- coda bench loop --dds
def test_coda_bench_loop_over_dds_times_the_nodes_and_leaves_none(ros_domain: int, rclpy_node: Any) -> None:
    from coda_engine.ros.spin import spin_until

    scenes, episodes, repeats = 2, 2, 2
    done = coda("bench", "loop", "--json", "--dds", "--scenes", str(scenes), "--episodes", str(episodes),
                "--repeats", str(repeats), timeout=180.0)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = last_json(done.stdout)
    timed = result["scenes"]
    assert timed["same_scenes"] is True and timed["scenes_timed"] == scenes * repeats
    assert set(timed["ms_per_scene"]) == {"reference", "in_process", "dds"}
    assert all(math.isfinite(ms) and ms > 0 for ms in timed["ms_per_scene"].values()), timed
    for way, ratio in timed["ratio"].items():  # each ratio is the way's time over the direct call's
        expected = timed["ms_per_scene"][way] / timed["ms_per_scene"]["reference"]
        assert ratio == pytest.approx(expected, rel=0.02, abs=0.002), (way, timed)
    assert set(timed["ratio"]) == {"in_process", "dds"}
    critic = result["critic"]
    assert critic["same_diagnoses"] is True and critic["episodes_timed"] == episodes * repeats
    assert set(critic["ms_per_episode"]) == {"reference", "dds"}
    assert all(math.isfinite(ms) and ms > 0 for ms in critic["ms_per_episode"].values()), critic
    assert critic["ratio"]["dds"] == pytest.approx(
        critic["ms_per_episode"]["dds"] / critic["ms_per_episode"]["reference"], rel=0.02, abs=0.002)
    # the nodes it started on this domain are gone with it
    names = lambda: {name for name, _ in rclpy_node.get_node_names_and_namespaces()}  # noqa: E731
    assert spin_until(rclpy_node, lambda: not names() & {"scene_generator", "critic"}, WAIT_S), names()


# ---------------------------------------------------------------- arm_bridge's SECURITY line
def _bridge_log(engine_test_helpers: Any, tmp_path: Path, discovery: str) -> tuple[subprocess.Popen, Path]:
    """Start the real arm_bridge (the stand-in's robot file) with ``discovery`` as its discovery range; log to a file.

    ``start_bridge`` of test_arm_bridge builds the command; this starter gives the process its environment and a
    log file this test reads.
    """
    log = tmp_path / f"bridge-{discovery}.log"
    started: list[subprocess.Popen] = []

    def start(cmd: list[str]) -> subprocess.Popen:
        env = dict(os.environ, PYTHONUNBUFFERED="1", ROS_AUTOMATIC_DISCOVERY_RANGE=discovery)
        with log.open("w") as out:
            started.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
        return started[-1]

    engine_test_helpers("test_arm_bridge").start_bridge(start, STAND_IN_ROBOT_FILE)
    return started[0], log


def _messages(log: Path) -> list[str]:
    """Return the log's messages: each line's text after ``[LEVEL] [time] [logger]: ``."""
    return [line.split("]: ", 1)[1] for line in log.read_text().splitlines() if "]: " in line]


@pytest.mark.parametrize("discovery", ["SUBNET", "LOCALHOST"])
def test_arm_bridge_says_security_at_start_up_when_the_cell_is_exposed(ros_domain: int, tmp_path: Path,
                                                                       engine_test_helpers: Any,
                                                                       discovery: str) -> None:
    """Reachable from other machines and unsecured: a line starting ``SECURITY:`` before the bridge is ready.

    Discovery kept on this host: the bridge gets ready without that line (it is logged before "ready", so its
    absence once "ready" is there is an event, not a wait).
    """
    import yaml

    robot_id = yaml.safe_load(STAND_IN_ROBOT_FILE.read_text())["robot_id"]
    proc, log = _bridge_log(engine_test_helpers, tmp_path, discovery)
    try:
        deadline = time.monotonic() + WAIT_S
        while not any(m.startswith(f"arm_bridge {robot_id} ready") for m in _messages(log)):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
    security = [m for m in _messages(log) if m.startswith("SECURITY:")]
    if discovery == "LOCALHOST":
        assert security == [], security
        return
    assert len(security) == 1, log.read_text()[-3000:]
    assert f"arm_bridge {robot_id} runs WITHOUT ROS 2 security on domain {ros_domain}" in security[0], security[0]
    assert "reset_estop" in security[0] and "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST" in security[0]
