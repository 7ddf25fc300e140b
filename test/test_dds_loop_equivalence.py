# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""One loop, two deployments: the rounds run over DDS give what the in-process rounds give.

The same small config and seed run twice for rounds 0 to 2: once in this process (``coda run --no-ros``'s path: scenes,
diagnoses and episodes in-process), once as the processes ``launch/coda_sim.launch.py`` starts (its
executables, parameter files and parameters): the ``coda_loop`` node asking the ``scene_generator`` for every
scene and the ``critic`` for every diagnosis, two ``sim_bridge`` workers running every episode, and the ``memory``
node. Both run folders must hold the same scenes, diagnoses, generation programs and success rates.
"""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path
from typing import Any

import pytest

from coda_loop.step_results import DiagnoseResult, EpisodesResult, EvaluateResult, GenerateResult, ProgramsResult

pytestmark = pytest.mark.ros

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "install"
RUN = {
    "method": "coda", "rounds": 2, "budget": 4, "families": ["reach", "push"], "base_demos_per_family": 4,
    "base_sft_steps": 60, "probe_per_family": 1, "finetune_steps": 40, "rl_env_steps": 0, "eval_per_family": 1,
    "final_eval_per_family": 1, "eval_splits": ["id", "position"], "critic": "grounded", "progress": False,
    "seed": 3,
}
"""LoopConfig fields of both runs (besides ``workers``): an untrained policy, so episodes fail and the critic's
diagnoses steer the next round's program; rounds 1 and 2 each train on corrective demonstrations, so a difference
in any number the two deployments compute (an instruction's embedding differs in its last bits between torch
thread counts, and contacts amplify such a difference over an episode) shows in the later rounds. This process
has run other tests before (at other thread counts): the in-process run must not depend on that either."""


def executable(package: str, name: str) -> str:
    """Return the installed executable ``ros2 run`` / ``ros2 launch`` starts."""
    path = INSTALL / package / "lib" / package / name
    assert path.is_file(), f"{path} is not installed (make setup)"
    return str(path)


def params_file(package: str, name: str) -> str:
    """Return an installed parameter file of ``package``."""
    path = INSTALL / package / "share" / package / "config" / name
    assert path.is_file(), f"{path} is not installed (make setup)"
    return str(path)


def launched_nodes() -> set[tuple[str, str]]:
    """(package, executable) of every Node the launch file starts."""
    tree = ast.parse((REPO / "launch" / "coda_sim.launch.py").read_text())
    nodes = set()
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "Node":
            kwargs = {kw.arg: kw.value.value for kw in call.keywords if isinstance(kw.value, ast.Constant)}
            nodes.add((kwargs["package"], kwargs["executable"]))
    return nodes


def record(run_dir: Path) -> dict[str, Any]:
    """Return what must agree between the deployments, read back from the run's memory."""
    from coda_loop.memory import MemoryStore

    out: dict[str, Any] = {}
    with MemoryStore(run_dir / "memory.db") as store:
        for r in range(RUN["rounds"] + 1):
            generate = store.finished_step(r, GenerateResult)
            episodes = store.finished_step(r, EpisodesResult)
            diagnose = store.finished_step(r, DiagnoseResult)
            programs = store.finished_step(r, ProgramsResult)
            evaluate = store.finished_step(r, EvaluateResult)
            assert None not in (generate, episodes, diagnose, programs, evaluate), f"round {r} did not finish"
            scenes = [store.get("scene", sid).payload for sid in generate.scene_ids + generate.probe_ids]
            diagnoses = [store.get("diagnosis", d).payload for d in diagnose.diagnosis_ids]
            program = store.get("generation_program", programs.generation_program_id).payload
            out[r] = {
                "scenes": [(s["scene_id"], s["seed"], s["mjcf_sha256"], s["instruction"]) for s in scenes],
                "diagnoses": [(d["episode_ids"], d["failure_mode"], d["failed_stage"], d["text"]) for d in diagnoses],
                "program": [(a["kind"], a["family"], a["count"], json.dumps(a["conditions"], sort_keys=True))
                            for a in program["allocations"]],
                "episodes": (episodes.success, episodes.by_family),
                "evaluate": (evaluate.per_split, evaluate.ood),
                "where": (generate.generator, diagnose.critic_version, sorted(episodes.remote)),
            }
    return out


def test_two_rounds_over_dds_match_the_in_process_rounds(tmp_path: Path, ros_domain: int,
                                                         start_process: Any) -> None:
    from coda_critic.diagnosis import MODE_SUCCESS
    from coda_loop.config import LoopConfig
    from coda_loop.rounds import CoevolutionLoop

    local_dir = tmp_path / "in_process"
    loop = CoevolutionLoop(local_dir, LoopConfig(**RUN, workers=2))
    try:
        loop.run()
    finally:
        loop.close()
    expected = record(local_dir)

    ros_dir = tmp_path / "over_dds"
    config = tmp_path / "loop.json"
    config.write_text(json.dumps(RUN))
    started = {("coda_loop", "memory"), ("coda_engine", "scene_generator"), ("coda_critic", "critic"),
               ("coda_engine", "sim_bridge"), ("coda_loop", "coda_loop")}
    assert started == launched_nodes(), "the test must start what coda_sim.launch.py starts"
    start_process([executable("coda_loop", "memory"), "--ros-args", "-r", "__node:=memory",
                   "--params-file", params_file("coda_loop", "memory.yaml"),
                   "-p", f"db_path:={ros_dir / 'memory.db'}"])
    start_process([executable("coda_engine", "scene_generator"), "--ros-args", "-r", "__node:=scene_generator"])
    start_process([executable("coda_critic", "critic"), "--ros-args", "-r", "__node:=critic",
                   "--params-file", params_file("coda_critic", "critic.yaml"), "-p", "publish_programs:=false"])
    (ros_dir / "checkpoints").mkdir(parents=True)
    for i in range(2):
        start_process([executable("coda_engine", "sim_bridge"), "--ros-args", "-r", f"__ns:=/sim_{i}",
                       "--params-file", params_file("coda_engine", "sim_bridge.yaml"),
                       "-p", f"checkpoint_root:={ros_dir / 'checkpoints'}", "-p", "camera_rate_hz:=0.0"])
    loop_proc = start_process([executable("coda_loop", "coda_loop"), "--ros-args", "-r", "__node:=coda_loop",
                               "--params-file", params_file("coda_loop", "loop.yaml"),
                               "-p", f"run_dir:={ros_dir}", "-p", f"config_file:={config}",
                               "-p", "generator_service:=/generate_scenes",
                               "-p", "critic_service:=/diagnose_episodes", "-p", "discovery_wait_s:=1.0"])
    deadline = time.monotonic() + 900
    while loop_proc.poll() is None:
        assert time.monotonic() < deadline, "the loop over DDS did not finish in 900 s"
        time.sleep(1.0)
    assert loop_proc.returncode == 0
    got = record(ros_dir)

    for r in expected:
        where = got[r].pop("where")
        local_where = expected[r].pop("where")
        assert local_where[0] == "in-process" and where[0] == "/generate_scenes", (local_where, where)
        assert local_where[1].startswith("grounded-"), local_where
        assert where[1] == "grounded@/diagnose_episodes", where
        assert local_where[2] == [] and where[2] == ["sim_0", "sim_1"], (local_where, where)
        assert got[r] == expected[r], f"round {r}"
    assert any(mode != MODE_SUCCESS for r in expected for _, mode, _, _ in expected[r]["diagnoses"])
    assert any(kind != "exploration" for kind, *_ in expected[1]["program"]), "the diagnoses steered no scene"
