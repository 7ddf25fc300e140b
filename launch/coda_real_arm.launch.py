# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""One real arm: its ``arm_bridge``, with ``use_fake:=true`` the MuJoCo stand-in, with ``policy:=true`` a live policy.

    ros2 launch launch/coda_real_arm.launch.py robot_config:=/path/panda_lab1.yaml namespace:=panda_lab1
        checkpoint_root:=/path/runs/<id>/checkpoints   (one command line)
    ros2 launch launch/coda_real_arm.launch.py use_fake:=true          # fake_ros2_control_arm as the arm
    ros2 launch launch/coda_real_arm.launch.py use_fake:=true policy:=true checkpoint_root:=/path/runs/<id>/checkpoints
        policy_version:=r003-bc family:=reach                          # then: ros2 topic pub --once
        /panda_fake_0/instruction std_msgs/String "{data: 'touch the red cube'}"

With ``policy:=true`` a ``policy`` node reads the same robot file (joint names, topics, control rate) and commands the
arm through the bridge's ``arm_command`` (the sim-first gate, IK and the safety layer apply as in episodes).
On a robot's machine without the run's disk, ``checkpoint_service:=/coda_run/get_checkpoint`` lets it fetch
``policy_version`` (and later announced versions) from the running loop, as the bridge does for episodes.

On a robot, start its ros2_control driver (joint trajectory controller, gripper controller, camera and
perception) in the same namespace, or remap the topics in the robot file; the bridge is the same either way.
The run is then `coda run --arms fleet.yaml` with this namespace in the fleet file.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node

from coda_engine.ros.launch_params import parameter_arguments


def _arm(context: LaunchContext, *args: object, **kwargs: object) -> list[Node]:
    share = get_package_share_directory("coda_engine")
    robot_file = context.launch_configurations["robot_config"] or os.path.join(
        share, "config", "robots", "panda_fake.yaml")
    namespace = context.launch_configurations["namespace"]
    conf = context.launch_configurations
    bridge_params = parameter_arguments(values={"robot_config": robot_file, "checkpoint_root": conf["checkpoint_root"]})
    nodes = [
        Node(package="coda_engine", executable="arm_bridge", namespace=namespace, ros_arguments=bridge_params,
             output="screen"),
    ]
    if context.launch_configurations["use_fake"].lower() in ("1", "true", "yes"):
        fake_params = parameter_arguments([os.path.join(share, "config", "fake_arm.yaml")])
        nodes.append(Node(package="coda_engine", executable="fake_ros2_control_arm", namespace=namespace,
                          ros_arguments=fake_params, output="screen"))
    if context.launch_configurations["policy"].lower() in ("1", "true", "yes"):
        policy_params = parameter_arguments(values={
            "robot_config": robot_file, "checkpoint_root": conf["checkpoint_root"],
            "initial_version": conf["policy_version"], "family": conf["family"],
            "checkpoint_service": conf["checkpoint_service"]})
        nodes.append(Node(package="coda_policy", executable="policy", namespace=namespace,
                          ros_arguments=policy_params, output="screen"))
    return nodes


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("robot_config", default_value="",
                                  description="the robot's YAML file (default: the stand-in Panda's)"),
            DeclareLaunchArgument("namespace", default_value="panda_fake_0", description="namespace of the arm"),
            DeclareLaunchArgument("checkpoint_root", default_value="", description="policy checkpoint folder"),
            DeclareLaunchArgument("use_fake", default_value="false",
                                  description="start fake_ros2_control_arm (MuJoCo) as the arm"),
            DeclareLaunchArgument("policy", default_value="false",
                                  description="start a policy node that drives the arm live through the bridge"),
            DeclareLaunchArgument("policy_version", default_value="",
                                  description="version folder under checkpoint_root the policy node loads"),
            DeclareLaunchArgument("checkpoint_service", default_value="",
                                  description="the run's GetCheckpoint service (e.g. /coda_run/get_checkpoint): "
                                              "the policy node fetches versions not under checkpoint_root"),
            DeclareLaunchArgument("family", default_value="reach",
                                  description="task family whose staged program the policy node tracks"),
            OpaqueFunction(function=_arm),
        ]
    )
