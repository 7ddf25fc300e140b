# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The whole loop as separate processes on one ROS domain.

    ros2 launch launch/coda_sim.launch.py run_dir:=runs/lab1 workers:=2 rounds:=3 budget:=32

Starts the ``coda_loop`` node (round orchestration; scene generation, diagnosis and training run in
its process), ``workers`` ``sim_bridge`` workers that run every episode (they load policy versions
from ``<run_dir>/checkpoints``), and the ``memory`` node that announces each write of
``<run_dir>/memory.db`` on ``memory_events`` and answers ``query_memory``. More workers on other
machines: launch/coda_workers.launch.py with the same checkpoint folder (shared file system).
Relative paths are taken from the folder ``ros2 launch`` runs in.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node


def _nodes(context: LaunchContext, *args: object, **kwargs: object) -> list[Node]:
    conf = context.launch_configurations
    run_dir = os.path.abspath(conf["run_dir"])
    os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
    share = get_package_share_directory("coda_engine")
    loop_share = get_package_share_directory("coda_loop")
    loop = Node(
        package="coda_loop",
        executable="coda_loop",
        name="coda_loop",
        parameters=[
            os.path.join(loop_share, "config", "loop.yaml"),
            {"run_dir": run_dir, "rounds": int(conf["rounds"]), "budget": int(conf["budget"]),
             "method": conf["method"], "seed": int(conf["seed"])},
        ],
        output="screen",
    )
    memory = Node(
        package="coda_loop",
        executable="memory",
        name="memory",
        parameters=[os.path.join(loop_share, "config", "memory.yaml"), {"db_path": os.path.join(run_dir, "memory.db")}],
        output="screen",
    )
    workers = [
        Node(
            package="coda_engine",
            executable="sim_bridge",
            namespace=f"sim_{i}",
            parameters=[
                os.path.join(share, "config", "sim_bridge.yaml"),
                {"checkpoint_root": os.path.join(run_dir, "checkpoints"), "camera_rate_hz": 0.0},
            ],
            output="screen",
        )
        for i in range(int(conf["workers"]))
    ]
    return [loop, memory, *workers]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("run_dir", default_value="runs/ros", description="run folder (resumed if it exists)"),
            DeclareLaunchArgument("workers", default_value="2", description="sim_bridge workers on this machine"),
            DeclareLaunchArgument("rounds", default_value="3", description="co-evolution rounds after round 0"),
            DeclareLaunchArgument("budget", default_value="32", description="scenes generated per round"),
            DeclareLaunchArgument("method", default_value="coda", description="loop variant (coda experiment)"),
            DeclareLaunchArgument("seed", default_value="0", description="seed of the run"),
            OpaqueFunction(function=_nodes),
        ]
    )
