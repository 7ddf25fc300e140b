# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The launch files' parameter arguments, read back by a real rclpy node: types kept, the file before the values."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda_engine.ros.launch_params import parameter_arguments


def _read_back(args: list[str]) -> dict[str, object]:
    """Start a node with ``--ros-args *args`` in a context of its own; return every parameter it was given."""
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(args=["--ros-args", *args], context=context)
    try:
        node = rclpy.create_node("launch_params_probe", context=context,
                                 automatically_declare_parameters_from_overrides=True)
        try:
            return {name: param.value for name, param in node.get_parameters_by_prefix("").items()}
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_values_keep_their_types_and_override_the_file(tmp_path: Path) -> None:
    params = tmp_path / "node.yaml"
    params.write_text("/**:\n  ros__parameters:\n    version: r001-bc\n    rate: 10.0\n    kept: from_file\n")
    values = {"version": "2024", "exponent": "1e3", "empty": "", "rate": 0.0, "on": False, "count": 3,
              "quote": "it's \"here\"", "path": "/runs/lab 1/checkpoints"}
    args = parameter_arguments([str(params)], values)
    assert args[:2] == ["--params-file", str(params)]
    read = _read_back(args)
    assert read["kept"] == "from_file"  # the file's, where no value is given
    for name, value in values.items():
        assert read[name] == value and type(read[name]) is type(value), (name, read[name])


def test_bad_values_are_refused_by_name() -> None:
    with pytest.raises(TypeError, match="parameter items: list is not a ROS parameter value"):
        parameter_arguments(values={"items": [1, 2]})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="parameter rate: nan is not a finite number"):
        parameter_arguments(values={"rate": float("nan")})
