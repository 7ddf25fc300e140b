# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda bench loop``: the in-process scene source against the direct generator call, on the same seeds."""

from __future__ import annotations

import json

import pytest

from coda_loop import bench_loop


def test_in_process_source_and_direct_call_give_the_same_scenes(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_loop.main(["--scenes", "3", "--repeats", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    scenes = result["scenes"]
    assert scenes["same_scenes"] is True
    assert scenes["scenes_timed"] == 6
    assert set(scenes["ms_per_scene"]) == {"reference", "in_process"} and set(scenes["ratio"]) == {"in_process"}
    assert all(ms > 0 for ms in scenes["ms_per_scene"].values())
    assert "critic" not in result, "the critic is timed over DDS only (--dds)"


def test_bad_sizes_are_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench_loop.main(["--repeats", "0"])
    assert exit_info.value.code == 2
    assert "--repeats must be >= 1" in capsys.readouterr().err
