# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""`coda run` (make run) end to end: real node processes over DDS on an isolated domain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ros


def test_coda_run_drives_generator_and_workers(ros_domain: int) -> None:
    coda = Path(sys.prefix) / "bin" / "coda"
    result = subprocess.run(
        [str(coda), "run", "--budget", "1", "--workers", "1", "--json"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"ROS_DOMAIN_ID={ros_domain}" in result.stdout
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 4
    assert set(summary["expert_success"]) == {"reach", "pick_place", "push", "stack"}
    assert sum(summary["expert_success"].values()) >= 3
    assert summary["keyframes_received"] >= 8
