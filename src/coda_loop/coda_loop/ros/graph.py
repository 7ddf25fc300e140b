# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""One loop per ROS domain: find another running ``coda run`` / ``coda_loop`` before this one starts.

Two loops on one domain would share ``/memory_events``, ``/query_memory`` and the checkpoint service name, and
each would send episodes to the other's ``sim_bridge`` workers, so a loop refuses to start next to a live one.
A loop that was killed stays in the ROS graph until its discovery lease runs out (~20 s with Fast DDS); it no
longer answers its parameter services, which is how it is told apart, so ``coda run --resume`` right after a
SIGKILL is not refused.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # ROS is imported where it is used: `coda run --help` and --no-ros runs read the constants only
    from rclpy.node import Node

LOOP_NODE_NAMES = ("coda_run", "coda_loop")
"""Node names of a running loop: ``coda run`` and the ``coda_loop`` node of the launch files."""
DISCOVERY_WAIT_S = 5.0
"""How long the graph is watched for another loop: a node in another process on one machine shows up after
0.1-0.7 s when the cores are free, and after more than 2 s when they are busy."""
ANSWER_TIMEOUT_S = 1.5
"""How long a loop found in the graph has to answer before it is taken for one that was killed."""


def loops_in_graph(node: Node, wait_s: float = DISCOVERY_WAIT_S) -> list[str]:
    """Fully qualified names of the loop nodes in ``node``'s ROS graph other than ``node`` (empty: none).

    Watches the graph for up to ``wait_s`` seconds and returns as soon as one is seen. Killed loops are
    listed too until their lease runs out.
    """
    own = (node.get_name(), node.get_namespace())
    end = time.monotonic() + wait_s
    while True:
        entries = [(name, ns) for name, ns in node.get_node_names_and_namespaces() if name in LOOP_NODE_NAMES]
        if own in entries:
            entries.remove(own)  # this process's own loop node, listed once
        if entries or time.monotonic() >= end:
            return sorted(f"{ns.rstrip('/')}/{name}" for name, ns in entries)
        time.sleep(0.05)


def answers(node: Node, fqn: str, timeout: float = ANSWER_TIMEOUT_S) -> bool:
    """Return True when the node ``fqn`` answers its ``list_parameters`` service within ``timeout`` (it is alive).

    ``node`` must not be in an executor (it is spun here, on its own context, until the answer or the timeout).
    """
    from rcl_interfaces.srv import ListParameters

    from coda_engine.ros.spin import call_spinning

    client = node.create_client(ListParameters, f"{fqn}/list_parameters")
    try:
        if not client.wait_for_service(timeout_sec=timeout):
            return False
        return call_spinning(node, client, ListParameters.Request(depth=1), timeout) is not None
    finally:
        node.destroy_client(client)


def refuse_second_loop(node: Node, wait_s: float = DISCOVERY_WAIT_S) -> None:
    """Raise ``RuntimeError`` naming the live loop and the domain when another one is running.

    Call it with ``node`` not yet added to an executor.
    """
    live = [fqn for fqn in loops_in_graph(node, wait_s) if answers(node, fqn)]
    if live:
        domain = node.context.get_domain_id()
        raise RuntimeError(f"another loop ({', '.join(live)}) is running on ROS domain {domain}: two loops on one "
                           "domain would share their memory topics, checkpoint service and sim workers; start this "
                           "one with its own ROS_DOMAIN_ID, or stop the other")


def refuse_before_launch(wait_s: float = DISCOVERY_WAIT_S, node_name: str = "coda_launch_check") -> None:
    """Raise ``RuntimeError`` (as :func:`refuse_second_loop`) when a loop runs on this process's ROS domain.

    For a launch file, before it starts any node or writes anything: the check runs on a ROS context and a node of
    its own (``node_name``, without the process's global ROS arguments and parameter services), both gone on return,
    so the launch process's own ROS context, if it has one, is left alone.
    """
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(args=[], context=context)
    try:
        node = rclpy.create_node(node_name, context=context, use_global_arguments=False,
                                 start_parameter_services=False)
        try:
            refuse_second_loop(node, wait_s)
        finally:
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)
