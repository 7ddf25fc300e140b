# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Fleet files from elsewhere: seeded mutations of the example load as valid fleets or are refused by name.

The contract of :meth:`Fleet.load` on any bytes: a ``Fleet`` whose numbers are finite and which reads back from its
own ``to_dict``, or a :class:`FleetError` whose message names the file and the field that was changed, in bounded
length and time. Any other exception, an unnamed field or a slow answer fails the test.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from coda_loop.fleet import Fleet, FleetError

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "fleet_example.yaml"
VARIANTS = 150


def _two_arms() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    second = dict(data["arms"][0], robot_id="panda_lab2", namespace="/panda_lab2", hours=["22:00-06:00", "12:00-13:30"])
    data["arms"].append(second)
    return data


def test_mutated_fleet_files_load_valid_or_are_refused_naming_the_field(tmp_path: Path,
                                                                       engine_test_helpers: Any) -> None:
    helpers = engine_test_helpers("yaml_mutations")
    data = _two_arms()
    Fleet.from_dict(data)  # the starting point is valid

    def check(fleet: Fleet) -> list[str]:
        plain = fleet.to_dict()
        for arm in fleet.arms:
            arm.available(dt.datetime(2026, 1, 1, 12, 0))  # its hours parse
        return ([] if helpers.finite_numbers(plain) else [f"loaded with a non-finite number: {plain}"]) + (
            [] if Fleet.from_dict(plain) == fleet else ["does not read back from its to_dict()"])

    problems, outcomes = helpers.loader_contract(data, np.random.default_rng(24), VARIANTS, tmp_path, Fleet.load,
                                                 FleetError, check)
    assert not problems, f"{len(problems)} of {VARIANTS} variants broke the contract:\n" + "\n".join(problems)
    assert outcomes["loaded"] and outcomes["refused"], outcomes  # both sides of the contract were exercised


FOUND = {
    # what the mutations found before the fix, each as its smallest file
    "NaN hours (was accepted)": (b"arms: [{robot_id: a, max_hours: .nan}]", "arms[0].max_hours=nan must be a finite"),
    "infinite timeout (was accepted)": (b"arms: [{robot_id: a, episode_timeout_s: .inf}]", "episode_timeout_s=inf"),
    "an integer beyond float (was OverflowError)": (b"arms: [{robot_id: a, max_hours: 1" + b"0" * 400 + b"}]",
                                                    "arms[0].max_hours=1000"),
    "keys of two types (was TypeError)": (b"1: 2\narms: []\nx: 3\n", "unknown keys ['x', 1]"),
    "an alias bomb as hours (was minutes)": (b"arms: [{robot_id: a, hours: [[&a [x, x, x, x, x, x, x, x, x], "
                                             + b", ".join(b"&b%d [%s]" % (i, b", ".join([b"*b%d" % (i - 1) if i else
                                                                                      b"*a"] * 9)) for i in range(8))
                                             + b"]]}]", "arms[0].hours[0]="),
    "not UTF-8 (was UnicodeDecodeError)": (b"sim_workers: 2 # \xff", "is not UTF-8 text (byte 0xff at offset 17)"),
}


@pytest.mark.parametrize("name", FOUND)
def test_what_the_mutations_found_is_refused_quickly_and_by_name(tmp_path: Path, name: str) -> None:
    text, expected = FOUND[name]
    path = tmp_path / "fleet.yaml"
    path.write_bytes(text)
    start = time.process_time()  # CPU time: what the parse costs, not how busy the machine is
    with pytest.raises(FleetError) as info:
        Fleet.load(path)
    assert time.process_time() - start < 1.0  # an unguarded alias bomb takes minutes of CPU
    assert str(info.value).startswith(str(path)) and expected in str(info.value), str(info.value)[:300]
