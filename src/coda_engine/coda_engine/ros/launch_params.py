# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""A launch file's parameters for a node as ROS arguments: parameter files first, then ``-p name:=value`` overrides.

``launch_ros`` writes every ``parameters=[{...}]`` dictionary to a temporary YAML file that it never removes, so a
host that launches often collects them. ``Node(..., ros_arguments=parameter_arguments(files, values))`` gives the
node the same settings on its command line instead. ROS reads its arguments in order and the last setting of a
parameter wins, so the files come first and the values after them (``launch_ros`` puts the files of ``parameters=``
after every ``ros_arguments``, where they would undo the values: pass none there). Each value is written as JSON,
which ROS reads as YAML: a string stays a string even when it looks like a number (``"7"``), an empty string stays
empty, and ``0.0`` stays a double.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence


def parameter_arguments(files: Sequence[str] = (),
                        values: Mapping[str, bool | int | float | str] | None = None) -> list[str]:
    """Return ``["--params-file", file, ..., "-p", "name:=value", ...]``.

    ``TypeError`` names a value that is no ROS parameter value, ``ValueError`` a float that is not finite.
    """
    args = []
    for path in files:
        args += ["--params-file", str(path)]
    for name, value in (values or {}).items():
        if not isinstance(value, bool | int | float | str):
            raise TypeError(f"parameter {name}: {type(value).__name__} is not a ROS parameter value "
                            "(bool, int, float or str)")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"parameter {name}: {value} is not a finite number")
        args += ["-p", f"{name}:={json.dumps(value)}"]
    return args
