# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The ``memory`` node of one run: every write to its memory file on ``memory_events``, and ``query_memory``.

    ros2 launch launch/coda_memory.launch.py db_path:=runs/<id>/memory.db
    ros2 launch launch/coda_memory.launch.py db_path:=runs/<id>/memory.db namespace:=lab history_depth:=200

Parameters come from coda_loop's ``config/memory.yaml``; ``db_path`` (required) and the optional
overrides below replace its values. A relative ``db_path`` is taken from the folder ``ros2 launch`` runs in.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node

from coda_engine.ros.launch_params import parameter_arguments

OVERRIDES = {
    "poll_hz": (float, "how often the events table is read for new writes, Hz (empty: memory.yaml's)"),
    "history_depth": (int, "events kept for late joiners and announced at start (empty: memory.yaml's)"),
}


def _memory(context: LaunchContext, *args: object, **kwargs: object) -> list[Node]:
    db_path = context.launch_configurations["db_path"]
    if not db_path:
        raise RuntimeError("coda_memory.launch.py: db_path is required, e.g. db_path:=runs/<id>/memory.db")
    overrides: dict[str, str | int | float] = {"db_path": os.path.abspath(db_path)}
    for name, (kind, _) in OVERRIDES.items():
        text = context.launch_configurations[name]
        if text:
            try:
                value = kind(text)
            except ValueError:
                expected = "an integer" if kind is int else "a number"
                raise RuntimeError(f"coda_memory.launch.py: {name}:={text} is not {expected}") from None
            overrides[name] = value
    namespace = context.launch_configurations["namespace"]
    return [
        Node(
            package="coda_loop",
            executable="memory",
            name="memory",
            namespace=namespace or None,
            ros_arguments=parameter_arguments(
                [os.path.join(get_package_share_directory("coda_loop"), "config", "memory.yaml")], overrides),
            output="screen",
        )
    ]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("db_path", default_value="", description="memory file of the run (required)"),
            DeclareLaunchArgument("namespace", default_value="", description="namespace of the memory node"),
            *(DeclareLaunchArgument(name, default_value="", description=text) for name, (_, text) in OVERRIDES.items()),
            OpaqueFunction(function=_memory),
        ]
    )
