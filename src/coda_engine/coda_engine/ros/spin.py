# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The one ``main`` every node of the workspace uses: init, spin until Ctrl-C or shutdown, clean up."""

from __future__ import annotations

import time
from collections.abc import Callable

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node


def run_node(
    make_node: Callable[[], Node],
    args: list[str] | None = None,
    make_executor: Callable[[], Executor] = SingleThreadedExecutor,
    on_exit: Callable[[Node], None] | None = None,
) -> None:
    """Create the node after ``rclpy.init(args)`` and spin it on a new ``make_executor()`` until shutdown.

    ``on_exit(node)`` runs before the node is destroyed, also after an error.
    """
    rclpy.init(args=args)
    node = make_node()
    executor = make_executor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if on_exit is not None:
            on_exit(node)
        node.destroy_node()
        rclpy.try_shutdown()


def spin_until(node: Node, done: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Spin ``node`` on a temporary executor until ``done()`` or ``timeout`` seconds; return ``done()``.

    For clients and tests that wait for a reply or a message without a long-running executor.
    """
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    end = time.monotonic() + timeout
    try:
        while not done() and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
    finally:
        executor.remove_node(node)
    return done()
