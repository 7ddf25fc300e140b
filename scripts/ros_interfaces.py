#!/usr/bin/env python3
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Every node's topics, services, actions and parameters, read from the running nodes, as Markdown.

    python scripts/ros_interfaces.py                    # print the tables
    python scripts/ros_interfaces.py --check docs/ros2.md   # exit 1 when the page's tables differ from them

Each node of the workspace is built in this process with its default parameters (``arm_bridge`` and the stand-in
arm with the stand-in's robot file, ``memory`` with a new memory file, ``policy`` with its default C++ control
path), and a separate observer node reads from the ROS graph what each of them offers, helper nodes included (the
policy node's ``policy_control`` is the C++ loop's rcl node; ``arm_bridge_live`` is the bridge's live path; the
loop's ``<name>_checkpoint_server`` serves its policy versions). Parameters come from the nodes themselves, with
the defaults and descriptions their code declares. rclpy's own interfaces (``parameter_events``, ``rosout``, the
parameter services, ``get_type_description``) and the hidden topics and services of actions are left out.
``docs/ros2.md`` holds the output between ``<!-- ros-interfaces:begin -->`` and ``<!-- ros-interfaces:end -->``;
``test/test_docs.py`` runs ``--check``. Discovery stays on this host; set ``ROS_DOMAIN_ID`` to keep it apart.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STAND_IN_ROBOT = REPO / "src" / "coda_engine" / "config" / "robots" / "panda_fake.yaml"
BEGIN, END = "<!-- ros-interfaces:begin -->", "<!-- ros-interfaces:end -->"
RCLPY_OWN = {"/parameter_events", "/rosout"}
"""Topics every rclpy node has."""
RCLPY_OWN_SERVICES = {"describe_parameters", "get_parameter_types", "get_parameters", "list_parameters",
                      "set_parameters", "set_parameters_atomically", "get_type_description"}
"""Services every rclpy node offers (``~/<name>``)."""
RCLPY_OWN_PARAMETERS = {"use_sim_time", "start_type_description_service"}
"""Parameters every rclpy node declares."""
GIVEN = {("memory", "db_path"), ("arm_bridge", "robot_config")}
"""Required parameters this script sets (their declared default is the empty string)."""


@dataclass(frozen=True)
class Executable:
    """One executable of the workspace and the nodes it puts on the graph."""

    package: str
    name: str
    nodes: tuple[str, ...]
    """Node names: the main node first, then its helper nodes."""
    build: Callable[[Path], list[Any]]
    """Build the executable's nodes in this process (argument: a scratch folder); returns the objects to keep."""


def _scene_generator(_: Path) -> list[Any]:
    from coda_engine.ros.scene_generator_node import SceneGeneratorNode

    return [SceneGeneratorNode()]


def _sim_bridge(_: Path) -> list[Any]:
    from coda_engine.ros.sim_bridge_node import SimBridgeNode

    return [SimBridgeNode()]


def _fake_arm(_: Path) -> list[Any]:
    from coda_engine.ros.fake_arm_node import FakeArmNode

    return [FakeArmNode()]


def _arm_bridge(_: Path) -> list[Any]:
    from coda_engine.ros.arm_bridge_node import ArmBridgeNode

    return [ArmBridgeNode()]


def _critic(_: Path) -> list[Any]:
    from coda_critic.ros.critic_node import CriticNode

    return [CriticNode()]


def _policy(_: Path) -> list[Any]:
    from coda_policy.ros.policy_node import PolicyNode

    return [PolicyNode()]


def _memory(scratch: Path) -> list[Any]:
    from coda_loop.ros.memory_node import MemoryNode

    return [MemoryNode(db_path=str(scratch / "memory.db"))]


def _loop(scratch: Path) -> list[Any]:
    from coda_engine.ros.checkpoints import BackgroundCheckpointServer
    from coda_loop.ros.loop_node import LoopNode

    node = LoopNode()
    return [node, BackgroundCheckpointServer(node, scratch / "checkpoints")]


EXECUTABLES: tuple[Executable, ...] = (
    Executable("coda_engine", "scene_generator", ("scene_generator",), _scene_generator),
    Executable("coda_engine", "sim_bridge", ("sim_bridge",), _sim_bridge),
    Executable("coda_engine", "arm_bridge", ("arm_bridge", "arm_bridge_live"), _arm_bridge),
    Executable("coda_engine", "fake_ros2_control_arm", ("fake_ros2_control_arm",), _fake_arm),
    Executable("coda_critic", "critic", ("critic",), _critic),
    Executable("coda_policy", "policy", ("policy", "policy_control"), _policy),
    Executable("coda_loop", "memory", ("memory",), _memory),
    Executable("coda_loop", "coda_loop", ("coda_loop", "coda_loop_checkpoint_server"), _loop),
)
"""Every node executable of the workspace (``dds_check``, the doctor's two-process check, is left out)."""


def _relative(name: str, node: str) -> str:
    """Return a graph name as the code writes it: relative to the namespace, ``~/`` for the node's own."""
    if name.startswith(f"/{node}/"):
        return "~/" + name[len(node) + 2:]
    return name.lstrip("/")


def _interfaces(observer: Any, node: str) -> list[tuple[str, str, str]]:
    """Return (kind, name, type) rows of what ``node`` (namespace ``/``) offers on the graph."""
    rows = []
    for name, types in observer.get_publisher_names_and_types_by_node(node, "/"):
        if name not in RCLPY_OWN and "/_action/" not in name:
            rows.append(("publishes", _relative(name, node), ", ".join(types)))
    for name, types in observer.get_subscriber_names_and_types_by_node(node, "/"):
        if "/_action/" not in name:
            rows.append(("subscribes", _relative(name, node), ", ".join(types)))
    for name, types in observer.get_service_names_and_types_by_node(node, "/"):
        if name.endswith("/_action/send_goal"):
            action = name[: -len("/_action/send_goal")]
            kind = types[0].removesuffix("_SendGoal")
            rows.append(("action server", _relative(action, node), kind))
        elif "/_action/" not in name and name.rsplit("/", 1)[-1] not in RCLPY_OWN_SERVICES:
            rows.append(("service", _relative(name, node), ", ".join(types)))
    order = {"publishes": 0, "subscribes": 1, "service": 2, "action server": 3}
    return sorted(rows, key=lambda row: (order[row[0]], row[1]))


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, list) else json.dumps(list(value))


def _parameters(node: Any) -> list[tuple[str, str, str]]:
    """Return (name, default, description) rows of the parameters ``node`` declared."""
    names = sorted(n for n in node._parameters if n not in RCLPY_OWN_PARAMETERS)
    descriptors = node.describe_parameters(names)
    rows = []
    for name, descriptor in zip(names, descriptors, strict=True):
        value = node.get_parameter(name).value
        shown = '"" (required)' if (node.get_name(), name) in GIVEN else _value(value)
        rows.append((name, shown, " ".join(descriptor.description.split())))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(executables: tuple[Executable, ...] = EXECUTABLES, timeout: float = 20.0) -> str:
    """Build every executable's nodes in this process and return the Markdown tables of what they offer."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import rclpy
    from rclpy.node import Node

    args = ["--ros-args", "-p", f"arm_bridge:robot_config:={STAND_IN_ROBOT}",
            "-p", f"fake_ros2_control_arm:robot_config:={STAND_IN_ROBOT}", "--log-level", "warn"]
    rclpy.init(args=args)
    with tempfile.TemporaryDirectory(prefix="coda-interfaces-") as scratch:
        built: dict[str, list[Any]] = {}
        for executable in executables:
            built[executable.name] = executable.build(Path(scratch))
        observer = Node("coda_interfaces_observer")
        wanted = {node for executable in executables for node in executable.nodes}
        deadline = time.monotonic() + timeout
        while True:  # the C++ control loop's node is another participant: wait until discovery shows it
            seen = {name for name, _ in observer.get_node_names_and_namespaces()}
            if wanted <= seen:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not on the graph after {timeout} s: {sorted(wanted - seen)}")
            time.sleep(0.1)
        time.sleep(0.5)  # the last endpoints of a node seen a moment ago
        out = []
        for executable in executables:
            main = built[executable.name][0]
            out.append(f"### `{executable.name}` (`ros2 run {executable.package} {executable.name}`)\n")
            out.append("| node | interface | name | type |")
            out.append("| --- | --- | --- | --- |")
            for node in executable.nodes:
                for kind, name, kind_type in _interfaces(observer, node):
                    out.append(f"| `{node}` | {kind} | `{name}` | `{kind_type}` |")
            out.append("")
            parameters = _parameters(main)
            if parameters:
                out.append("| parameter | default | description |")
                out.append("| --- | --- | --- |")
                for name, default, text in parameters:
                    out.append(f"| `{name}` | `{_cell(default)}` | {_cell(text)} |")
                out.append("")
    return "\n".join(out).rstrip() + "\n"


def documented(page: Path) -> str:
    """Return the part of ``page`` between the begin and end markers."""
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{page}: no {BEGIN} ... {END} block")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the tables, or with ``--check PAGE`` compare them with the page's block."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=Path, metavar="PAGE", help="compare with the block in PAGE instead")
    args = parser.parse_args(argv)
    text = markdown()
    if args.check is None:
        sys.stdout.write(text)
    elif documented(args.check) != text:
        import difflib

        diff = difflib.unified_diff(documented(args.check).splitlines(), text.splitlines(), "documented", "code",
                                    lineterm="")
        print("\n".join(diff), file=sys.stderr)
        print(f"{args.check}: the interface tables differ from the nodes' (python scripts/ros_interfaces.py)",
              file=sys.stderr)
        sys.stdout.flush()
        os._exit(1)
    else:
        print(f"{args.check}: the interface tables match the nodes")
    sys.stdout.flush()
    os._exit(0)  # the nodes' threads (control loop, checkpoint server, live paths) end with the process


if __name__ == "__main__":
    raise SystemExit(main())
