# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Check a ROS 2 install: two processes exchange a sample of every coda_msgs type over DDS.

    ros2 launch launch/coda_doctor.launch.py

The receiver prints a JSON report; the launch ends with it, exit code 0 when every type arrived intact,
1 when one did not (or the receiver failed).
"""

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, LogInfo, RegisterEventHandler, Shutdown
from launch.event_handlers import OnProcessExit
from launch.events.process import ProcessExited
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def _receiver_done(event: ProcessExited, context: LaunchContext) -> list[Action]:
    if event.returncode != 0 and not context.is_shutdown:  # not on Ctrl-C, where every process is stopped
        # An error raised here makes `ros2 launch` shut everything down and exit with 1.
        raise RuntimeError(f"the DDS check failed: the receiver exited with {event.returncode} (see its report)")
    reason = "the DDS check passed"
    return [LogInfo(msg=f"coda_doctor.launch.py: {reason}"), Shutdown(reason=reason)]  # launch does not print reasons


def generate_launch_description() -> LaunchDescription:
    timeout = LaunchConfiguration("timeout")
    receiver = Node(
        package="coda_engine",
        executable="dds_check",
        name="coda_check_receiver",
        arguments=["receive", "--timeout", timeout],
        output="screen",
    )
    return LaunchDescription(
        [
            DeclareLaunchArgument("timeout", default_value="60.0", description="seconds to wait for the other side"),
            receiver,
            Node(
                package="coda_engine",
                executable="dds_check",
                name="coda_check_publisher",
                arguments=["publish", "--timeout", timeout],
                output="screen",
            ),
            RegisterEventHandler(OnProcessExit(target_action=receiver, on_exit=_receiver_done)),
        ]
    )
