# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The one ``main`` every node of the workspace uses: init, spin until Ctrl-C or shutdown, clean up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, ShutdownException, SingleThreadedExecutor
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


class NodeThread:
    """A node spun by a SingleThreadedExecutor on a thread of its own, until :meth:`close` (which destroys it).

    For work that must not wait for its owner's executor: a service that answers while the owner is not spun, or
    high-rate topics kept off an owner whose MultiThreadedExecutor would rebuild its wait set for each message.
    """

    def __init__(self, node: Node, name: str) -> None:
        """Start spinning ``node`` (its entities exist already) on a thread called ``name``."""
        self.node = node
        self._executor = SingleThreadedExecutor(context=node.context)
        self._executor.add_node(node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name=name, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set() and self.node.context.ok():
            try:
                self._executor.spin_once(timeout_sec=0.1)
            except (ExternalShutdownException, ShutdownException):
                return
            except Exception:  # the context shut down under the thread: stop spinning
                if not self.node.context.ok():
                    return
                raise

    def close(self) -> None:
        """Stop the thread, then destroy the node."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
