# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Simulated arm workers for one machine: ``workers`` sim_bridge nodes in namespaces sim_<first>..

    ros2 launch launch/coda_workers.launch.py workers:=4 first:=0

Each worker serves ``/<ns>/run_episode`` and the ros2_control-like topics of its arm; the loop's
orchestrator on the same ROS domain picks them up. A machine without the run's disk needs no
``checkpoint_root``: workers fetch each policy version from the loop over ROS once and cache it.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import Parameter


# Parameter entries, not a dict: launch_ros writes each dict in parameters=[...] to a temporary YAML file that it
# never deletes; a Parameter becomes `-p name:=<its YAML>` on the command line, after the files before it (it
# overrides them). That YAML leaves strings such as 1e3 unquoted (read as numbers by the node): the string values
# here are absolute paths or checked keywords.
def _workers(context: LaunchContext, *args: object, **kwargs: object) -> list[Node]:
    count = int(context.launch_configurations["workers"])
    first = int(context.launch_configurations["first"])
    params = os.path.join(get_package_share_directory("coda_engine"), "config", "sim_bridge.yaml")
    # absolute (the node runs in the folder ros2 launch runs in): no path is read as a number, e.g. 1e3
    root = context.launch_configurations["checkpoint_root"]
    checkpoint_root = Parameter("checkpoint_root", os.path.abspath(root) if root else "", value_type=str)
    return [
        Node(
            package="coda_engine",
            executable="sim_bridge",
            namespace=f"sim_{first + i}",
            parameters=[params, checkpoint_root],
            output="screen",
        )
        for i in range(count)
    ]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("workers", default_value="2", description="number of sim_bridge workers"),
            DeclareLaunchArgument("first", default_value="0", description="index of the first worker's namespace"),
            DeclareLaunchArgument("checkpoint_root", default_value="",
                                  description="the run's checkpoint folder if this machine sees it (empty: fetch)"),
            OpaqueFunction(function=_workers),
        ]
    )
