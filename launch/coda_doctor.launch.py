# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Check a ROS 2 install: two processes exchange a sample of every coda_msgs type over DDS.

    ros2 launch launch/coda_doctor.launch.py

The receiver prints a JSON report and exits 0 when every type arrived intact.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def generate_launch_description() -> LaunchDescription:
    timeout = LaunchConfiguration("timeout")
    return LaunchDescription(
        [
            DeclareLaunchArgument("timeout", default_value="60.0", description="seconds to wait for the other side"),
            Node(
                package="coda_engine",
                executable="dds_check",
                name="coda_check_receiver",
                arguments=["receive", "--timeout", timeout],
                output="screen",
            ),
            Node(
                package="coda_engine",
                executable="dds_check",
                name="coda_check_publisher",
                arguments=["publish", "--timeout", timeout],
                output="screen",
            ),
        ]
    )
