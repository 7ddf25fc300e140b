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

from coda_engine.ros.launch_params import parameter_arguments


def _workers(context: LaunchContext, *args: object, **kwargs: object) -> list[Node]:
    count = int(context.launch_configurations["workers"])
    first = int(context.launch_configurations["first"])
    params = os.path.join(get_package_share_directory("coda_engine"), "config", "sim_bridge.yaml")
    root = context.launch_configurations["checkpoint_root"]  # absolute: the node runs where ros2 launch runs
    args = parameter_arguments([params], {"checkpoint_root": os.path.abspath(root) if root else ""})
    return [
        Node(
            package="coda_engine",
            executable="sim_bridge",
            namespace=f"sim_{first + i}",
            ros_arguments=args,
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
