# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Fleet files of ``coda run --arms`` (coda_loop.fleet)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from coda_loop.fleet import ArmSpec, Fleet, FleetError

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "fleet_example.yaml"


def test_the_shipped_example_loads() -> None:
    fleet = Fleet.load(EXAMPLE)
    assert fleet.sim_workers == 2
    (arm,) = fleet.arms
    assert arm.robot_id == "panda_lab1" and arm.ns == "panda_lab1" and arm.episodes_per_round == 4
    assert arm.hours == ("08:00-18:00",) and arm.max_hours == 2.0
    assert Fleet.from_dict(fleet.to_dict()) == fleet


def test_hours_windows_including_midnight() -> None:
    day, night = ArmSpec("a", hours=("08:00-18:00",)), ArmSpec("b", hours=("22:00-06:00",))
    at = lambda h, m=0: dt.datetime(2026, 11, 30, h, m)  # noqa: E731
    assert day.available(at(8)) and day.available(at(17, 59)) and not day.available(at(18))
    assert not day.available(at(7, 59))
    assert night.available(at(23)) and night.available(at(5, 59)) and not night.available(at(12))
    assert ArmSpec("c").available(at(3))


def test_budgets_limit_the_episodes_of_a_round() -> None:
    arm = ArmSpec("a", episodes_per_round=4, max_episodes=10, max_hours=0.5)
    assert arm.remaining(0, 0.0) == 4
    assert arm.remaining(8, 0.0) == 2
    assert arm.remaining(12, 0.0) == 0
    assert arm.remaining(0, 1800.0) == 0


@pytest.mark.parametrize("data,field", [
    ({"arms": [{"robot_id": "x", "episodes_per_round": -1}]}, "arms[0].episodes_per_round"),
    ({"arms": [{"robot_id": "x", "hours": ["8-18"]}]}, "arms[0].hours[0]"),
    ({"arms": [{"robot_id": "x", "hours": ["08:00-25:00"]}]}, "arms[0].hours[0]"),
    ({"arms": [{"robot_id": "1x"}]}, "arms[0].robot_id"),
    ({"arms": [{"robot_id": "x", "namespace": "/bad ns"}]}, "arms[0].namespace"),
    ({"arms": [{"robot_id": "x", "speed": 2}]}, "unknown keys ['speed']"),
    ({"arms": [{"robot_id": "x", "episode_timeout_s": 0}]}, "arms[0].episode_timeout_s"),
    ({"arms": [{"robot_id": "x"}, {"robot_id": "x", "namespace": "/y"}]}, "share robot_id ['x']"),
    ({"sim_workers": -2}, "sim_workers=-2"),
    ({"robots": []}, "unknown keys ['robots']"),
    ({"arms": {"robot_id": "x"}}, "arms must be a list"),
])
def test_bad_fleet_files_name_the_field(tmp_path: Path, data: dict, field: str) -> None:
    with pytest.raises(FleetError, match=None) as info:
        Fleet.from_dict(data, "fleet.yaml")
    assert field in str(info.value) and str(info.value).startswith("fleet.yaml")


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match="cannot read"):
        Fleet.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("arms: [\n")
    with pytest.raises(FleetError, match="not valid YAML"):
        Fleet.load(bad)
