# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The whole loop as separate processes on one ROS domain.

    ros2 launch launch/coda_sim.launch.py run_dir:=runs/lab1 workers:=2 rounds:=3 budget:=32
    ros2 launch launch/coda_sim.launch.py run_dir:=runs/lab2 config_file:=my_loop.yaml   # LoopConfig fields
    ros2 launch launch/coda_sim.launch.py critic:=/gpu_box/diagnose_episodes              # a critic elsewhere

Starts the ``coda_loop`` node (round orchestration and training), the ``scene_generator`` node whose
``generate_scenes`` service makes every scene the loop generates, the ``critic`` node whose ``diagnose_episodes``
service makes the diagnoses that steer it, ``workers`` ``sim_bridge`` workers that run every episode (they load
policy versions from ``<run_dir>/checkpoints``), and the ``memory`` node that announces each write of
``<run_dir>/memory.db`` on ``memory_events`` and answers ``query_memory``. ``generator`` and ``critic``: ``node``
(the default) starts that node here; a service name uses a node already on the domain (another machine) and
starts none here; ``in_process`` makes the loop do that work itself. More workers on other machines:
launch/coda_workers.launch.py with the same checkpoint folder (shared file system).
``config_file`` (YAML or JSON of LoopConfig fields) wins over ``rounds``, ``budget``, ``method`` and ``seed``.
Relative paths are taken from the folder ``ros2 launch`` runs in.

The launch ends with the loop: when the ``coda_loop`` process exits, every other node is stopped, and
``ros2 launch`` exits 0 when the loop finished its rounds, 1 when it failed (e.g. another loop runs on the domain).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import Action, LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, RegisterEventHandler, Shutdown
from launch.event_handlers import OnProcessExit
from launch.events.process import ProcessExited
from launch_ros.actions import Node

from coda_engine.ros.launch_params import parameter_arguments
from coda_loop.ros.graph import DISCOVERY_WAIT_S, refuse_before_launch


def _loop_done(event: ProcessExited, context: LaunchContext) -> list[Action]:
    if event.returncode != 0 and not context.is_shutdown:  # not on Ctrl-C, where every process is stopped
        # An error raised here makes `ros2 launch` stop every process and exit with 1.
        raise RuntimeError(f"coda_loop exited with {event.returncode}: the run did not finish (see its log above)")
    if context.is_shutdown:  # Ctrl-C: the loop said it stopped and how to resume
        return []
    run_dir = os.path.abspath(context.launch_configurations["run_dir"])
    if os.path.isfile(os.path.join(run_dir, "summary.json")):  # written by the loop when its last round ends
        reason = f"coda_loop finished its rounds: {run_dir} holds summary.json and report.html"
    else:  # stopped by a signal of its own
        reason = f"coda_loop stopped before its last round: the next start with run_dir {run_dir} resumes the run"
    return [LogInfo(msg=f"coda_sim.launch.py: {reason}"), Shutdown(reason=reason)]  # launch does not print reasons


def _nodes(context: LaunchContext, *args: object, **kwargs: object) -> list[Action]:
    conf = context.launch_configurations
    run_dir = os.path.abspath(conf["run_dir"])
    config_file = os.path.abspath(conf["config_file"]) if conf["config_file"] else ""
    if config_file and not os.path.isfile(config_file):
        raise RuntimeError(f"coda_sim.launch.py: config_file:={conf['config_file']} is not a file")
    share = get_package_share_directory("coda_engine")
    loop_share = get_package_share_directory("coda_loop")
    services = {}
    for piece, default_service in (("generator", "/generate_scenes"), ("critic", "/diagnose_episodes")):
        choice = conf[piece]
        services[piece] = {"node": default_service, "in_process": ""}.get(choice, choice)
        if services[piece] and not services[piece].startswith("/"):
            raise RuntimeError(f"coda_sim.launch.py: {piece}:={choice} must be node, in_process or an absolute "
                               "service name (/ns/service)")
    # Before any node of this launch joins the domain and before anything is written: another loop on the domain
    # refuses this launch (the coda_loop node checks again, for a start without this file).
    refuse_before_launch(float(conf["discovery_wait_s"]))
    os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)  # after every check: a refused launch leaves none
    loop = Node(
        package="coda_loop",
        executable="coda_loop",
        name="coda_loop",
        ros_arguments=parameter_arguments(
            [os.path.join(loop_share, "config", "loop.yaml")],
            {"run_dir": run_dir, "rounds": int(conf["rounds"]), "budget": int(conf["budget"]),
             "method": conf["method"], "seed": int(conf["seed"]), "config_file": config_file,
             "generator_service": services["generator"], "critic_service": services["critic"],
             "discovery_wait_s": float(conf["discovery_wait_s"])}),
        output="screen",
    )
    memory = Node(
        package="coda_loop",
        executable="memory",
        name="memory",
        ros_arguments=parameter_arguments([os.path.join(loop_share, "config", "memory.yaml")],
                                          {"db_path": os.path.join(run_dir, "memory.db")}),
        output="screen",
    )
    workers = [
        Node(
            package="coda_engine",
            executable="sim_bridge",
            namespace=f"sim_{i}",
            ros_arguments=parameter_arguments([os.path.join(share, "config", "sim_bridge.yaml")],
                                              {"checkpoint_root": os.path.join(run_dir, "checkpoints"),
                                               "camera_rate_hz": 0.0}),
            output="screen",
        )
        for i in range(int(conf["workers"]))
    ]
    helpers = []
    if conf["generator"] == "node":
        helpers.append(Node(package="coda_engine", executable="scene_generator", name="scene_generator",
                            output="screen"))
    if conf["critic"] == "node":
        critic_share = get_package_share_directory("coda_critic")
        helpers.append(Node(package="coda_critic", executable="critic", name="critic",
                            # the loop plans and records the programs
                            ros_arguments=parameter_arguments([os.path.join(critic_share, "config", "critic.yaml")],
                                                              {"publish_programs": False}),
                            output="screen"))
    return [loop, memory, *helpers, *workers,
            RegisterEventHandler(OnProcessExit(target_action=loop, on_exit=_loop_done))]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("run_dir", default_value="runs/ros", description="run folder (resumed if it exists)"),
            DeclareLaunchArgument("workers", default_value="2", description="sim_bridge workers on this machine"),
            DeclareLaunchArgument("rounds", default_value="3", description="co-evolution rounds after round 0"),
            DeclareLaunchArgument("budget", default_value="32", description="scenes generated per round"),
            DeclareLaunchArgument("method", default_value="coda", description="loop variant (coda experiment)"),
            DeclareLaunchArgument("seed", default_value="0", description="seed of the run"),
            DeclareLaunchArgument("generator", default_value="node",
                                  description="node (start a scene_generator here) | in_process | the GenerateScenes "
                                              "service of a generator elsewhere, e.g. /sim_host/generate_scenes"),
            DeclareLaunchArgument("critic", default_value="node",
                                  description="node (start a critic here) | in_process | the DiagnoseEpisodes service "
                                              "of a critic elsewhere, e.g. /gpu_box/diagnose_episodes"),
            DeclareLaunchArgument("discovery_wait_s", default_value=str(DISCOVERY_WAIT_S),
                                  description="watch the domain this long for another loop before anything starts "
                                              "(refused if one runs), s"),
            DeclareLaunchArgument("config_file", default_value="",
                                  description="YAML/JSON of LoopConfig fields; they win over rounds, budget, method, "
                                              "seed (empty: none)"),
            OpaqueFunction(function=_nodes),
        ]
    )
