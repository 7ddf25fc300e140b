# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The language-conditioned ``policy`` node of one arm.

    ros2 launch launch/coda_policy.launch.py namespace:=arm0 checkpoint_root:=/data/policies initial_version:=v1
    ros2 launch launch/coda_policy.launch.py namespace:=arm0 initial_version:=r003-bc \
        checkpoint_service:=/coda_run/get_checkpoint      # a machine without the run's disk

Parameters come from coda_policy's ``config/policy.yaml``; the launch arguments (also ``family``, the task
family whose staged program tracks the stage) override the ones that differ per deployment. The node's
topics (``joint_states``, ``object_states``, ``instruction`` and ``policy_version`` in, ``arm_command`` out)
are relative to ``namespace``.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node

from coda_engine.ros.launch_params import parameter_arguments

# name, default, description (all string parameters of the node)
ARGUMENTS = (
    ("checkpoint_root", "", "folder of policy version folders (relative checkpoint URIs resolve under it)"),
    ("initial_version", "", "version folder under checkpoint_root loaded at start-up (empty: wait for one)"),
    ("family", "reach", "task family whose staged program tracks the stage index"),
    ("checkpoint_service", "", "the run's GetCheckpoint service: versions not on this machine are fetched from it"),
)


def _policy(context: LaunchContext, *args: object, **kwargs: object) -> list[Node]:
    params = os.path.join(get_package_share_directory("coda_policy"), "config", "policy.yaml")
    # Strings all: a version id such as 2024 or 1e3 must reach the node as a string (launch_params).
    rules = parameter_arguments([params], {name: context.launch_configurations[name] for name, _, _ in ARGUMENTS})
    namespace = context.launch_configurations["namespace"]
    return [
        Node(
            package="coda_policy",
            executable="policy",
            name="policy",
            namespace=namespace or None,
            ros_arguments=rules,
            output="screen",
        )
    ]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("namespace", default_value="", description="namespace of the arm's topics"),
            *(
                DeclareLaunchArgument(name, default_value=default, description=description)
                for name, default, description in ARGUMENTS
            ),
            OpaqueFunction(function=_policy),
        ]
    )
