# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The critic node with the parameters of coda_critic's config/critic.yaml.

    ros2 launch launch/coda_critic.launch.py
    ros2 launch launch/coda_critic.launch.py namespace:=lab backend:=vlm vlm_model:=/models/llava-1.5-7b-hf

It serves ``<namespace>/diagnose_episodes``, reads ``<namespace>/episode_results`` and
``<namespace>/scene_specs``, and publishes diagnoses and programs (src/coda_critic/README.md).
``backend``, ``learned_model`` and ``vlm_model`` override critic.yaml when given; left empty, the
file's value stands. Relative paths (``learned_root`` of critic.yaml among them) are taken from the
folder ``ros2 launch`` runs in. The launch refuses to start (exit code 1, the reason in its log) when
``backend`` is ``vlm`` and no ``vlm_model`` is set, or when ``vlm_model`` or ``learned_model`` names no folder.
"""

import os

import yaml
from ament_index_python.packages import get_package_share_directory
from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch_ros.actions import Node

from coda_engine.ros.launch_params import parameter_arguments

BACKENDS = ("grounded", "learned", "auto", "vlm")
"""The critic node's backends (coda_critic.ros.critic_node checks the same)."""
OVERRIDES = {
    "backend": "grounded | learned | auto | vlm (empty: critic.yaml's)",
    "learned_model": "learned critic folder saved by `coda critic train` (empty: critic.yaml's)",
    "vlm_model": "local LLaVA-style checkpoint folder for backend vlm (empty: critic.yaml's)",
}


def _file_values(path: str) -> dict[str, object]:
    """Return the critic's parameters in the parameter file ``path`` (its wildcard section)."""
    with open(path) as stream:
        data = yaml.safe_load(stream) or {}
    return dict(data.get("/**", {}).get("ros__parameters", {}))


def _critic(context: LaunchContext, *args: object, **kwargs: object) -> list[Node]:
    given = {name: context.launch_configurations[name] for name in OVERRIDES}
    overrides = {name: value for name, value in given.items() if value}
    config = os.path.join(get_package_share_directory("coda_critic"), "config")
    values = {**_file_values(os.path.join(config, "critic.yaml")), **overrides}
    for name in ("vlm_model", "learned_model"):
        if values.get(name):
            if not os.path.isdir(str(values[name])):
                raise RuntimeError(f"coda_critic.launch.py: {name}:={values[name]} is not a folder")
            if name in overrides:
                overrides[name] = os.path.abspath(overrides[name])
    if values.get("backend") not in BACKENDS:
        raise RuntimeError(f"coda_critic.launch.py: backend:={values.get('backend')} is not one of "
                           f"{', '.join(BACKENDS)}")
    if values.get("backend") == "vlm" and not values.get("vlm_model"):
        raise RuntimeError("coda_critic.launch.py: backend vlm needs vlm_model:=<local LLaVA-style checkpoint "
                           "folder> (critic.yaml sets none)")
    namespace = context.launch_configurations["namespace"]
    return [
        Node(
            package="coda_critic",
            executable="critic",
            name="critic",
            namespace=namespace or None,
            ros_arguments=parameter_arguments([os.path.join(config, "critic.yaml")], overrides),
            output="screen",
        )
    ]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("namespace", default_value="", description="namespace of the critic node"),
            *(DeclareLaunchArgument(name, default_value="", description=text) for name, text in OVERRIDES.items()),
            OpaqueFunction(function=_critic),
        ]
    )
