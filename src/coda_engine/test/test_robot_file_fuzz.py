# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Robot files from elsewhere: seeded mutations of the shipped files load as valid configs or are refused by name.

The contract of :meth:`RobotConfig.load` on any bytes: a ``RobotConfig`` whose numbers are finite and which reads
back from its own ``to_dict``, or a :class:`RobotConfigError` whose message names the file and the field that was
changed, in bounded length and time. Any other exception, an unnamed field or a slow answer fails the test.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from coda_engine.real.robot import RobotConfig, RobotConfigError

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"
VARIANTS = 100


@pytest.mark.parametrize("shipped", ["panda_fake.yaml", "panda_example.yaml"])
def test_mutated_robot_files_load_valid_or_are_refused_naming_the_field(tmp_path: Path, shipped: str,
                                                                       engine_test_helpers: Any) -> None:
    helpers = engine_test_helpers("yaml_mutations")
    data = yaml.safe_load((ROBOTS / shipped).read_text())

    def check(config: RobotConfig) -> list[str]:
        plain = config.to_dict()
        return ([] if helpers.finite_numbers(plain) else [f"loaded with a non-finite number: {plain}"]) + (
            [] if RobotConfig.from_dict(plain) == config else ["does not read back from its to_dict()"])

    problems, outcomes = helpers.loader_contract(data, np.random.default_rng(24), VARIANTS, tmp_path, RobotConfig.load,
                                                 RobotConfigError, check)
    assert not problems, f"{len(problems)} of {VARIANTS} variants broke the contract:\n" + "\n".join(problems)
    assert outcomes["loaded"] and outcomes["refused"], outcomes  # both sides of the contract were exercised


def _bomb(levels: int) -> bytes:
    """YAML text of a flow list whose last item stands for 9**levels strings through nested aliases."""
    parts = ["&a [x, x, x, x, x, x, x, x, x]"]
    parts += [f"&b{i} [{', '.join([f'*b{i - 1}' if i else '*a'] * 9)}]" for i in range(levels - 1)]
    return f"[{', '.join(parts)}]".encode()


VALID_TOP = b"robot_id: arm1\njoint_names: [a, b, c, d, e, f, g]\nfinger_joints: [h, i]\n"
FOUND = {
    # what the mutations found before the fix, each as its smallest file
    "not UTF-8 (was UnicodeDecodeError)": (VALID_TOP + b"base_frame: caf\xe9\n",
                                           "is not UTF-8 text (byte 0xe9 at offset"),
    "nested 5000 deep (was RecursionError after 10 s)": (VALID_TOP + b"base_frame: " + b"[" * 5000 + b"]" * 5000,
                                                         "not valid YAML"),
    "an integer beyond float (was OverflowError)": (VALID_TOP + b"control_rate_hz: 1" + b"0" * 400,
                                                    "control_rate_hz=1000000"),
    "an alias bomb (was minutes and gigabytes)": (VALID_TOP + b"safety: {joint_lower: " + _bomb(9) + b"}",
                                                  "safety.joint_lower[0]=['x', 'x'"),
    "100 kB of text (was a 100 kB message)": (VALID_TOP + b"camera_frame: " + b"-" * 100_000, "camera_frame='---"),
}


@pytest.mark.parametrize("name", FOUND)
def test_what_the_mutations_found_is_refused_quickly_and_by_name(tmp_path: Path, name: str) -> None:
    text, expected = FOUND[name]
    path = tmp_path / "robot.yaml"
    path.write_bytes(text)
    start = time.process_time()  # CPU time: what the parse costs, not how busy the machine is
    with pytest.raises(RobotConfigError) as info:
        RobotConfig.load(path)
    assert time.process_time() - start < 1.0  # an unguarded alias bomb takes minutes of CPU
    assert str(info.value).startswith(str(path)) and expected in str(info.value), str(info.value)[:300]
    assert len(str(info.value)) < 1000
