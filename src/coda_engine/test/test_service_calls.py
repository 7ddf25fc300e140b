# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``call_resending``: a request whose answer does not come is sent again, and the first answer of any copy counts.

The server is a real ``std_srvs/SetBool`` service on a node of its own context (its own DDS participant), spun on a
thread by a multi-threaded executor, so a copy it holds back does not stop it answering the next one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import rclpy
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.context import Context
from rclpy.executors import MultiThreadedExecutor
from std_srvs.srv import SetBool

from coda_engine.ros.spin import call_resending, call_spinning, shutdown_context, spin_until

pytestmark = pytest.mark.ros


class Server:
    """A SetBool server answering copy ``n`` (counted from 1) after ``delay(n)`` seconds, or never (None)."""

    def __init__(self, domain_id: int, delay: Callable[[int], float | None]) -> None:
        """Start the node on a new context of ``domain_id`` and spin it on a thread."""
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node("slow_server", context=self.context)
        self.delay = delay
        self.received = 0
        self.release = threading.Event()
        self.node.create_service(SetBool, "slow", self.answer, callback_group=ReentrantCallbackGroup())
        self.executor = MultiThreadedExecutor(num_threads=4, context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.spin, daemon=True)
        self.thread.start()

    def spin(self) -> None:
        while self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=0.05)
            except Exception:
                return

    def answer(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        self.received += 1
        copy = self.received
        wait = self.delay(copy)
        self.release.wait(wait)  # None: held back until the test ends, so this copy's answer never comes in time
        response.success, response.message = True, f"copy {copy}"
        return response

    def close(self) -> None:
        self.release.set()
        time.sleep(0.1)
        shutdown_context(self.context)
        self.thread.join(timeout=5.0)
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()


@pytest.fixture
def serve(ros_domain: int) -> Iterator[Callable[[Callable[[int], float | None]], Server]]:
    started: list[Server] = []

    def start(delay: Callable[[int], float | None]) -> Server:
        started.append(Server(ros_domain, delay))
        return started[-1]

    yield start
    for server in started:
        server.close()


def _ready(node: Any) -> Any:
    client = node.create_client(SetBool, "slow")
    assert spin_until(node, client.service_is_ready, 30.0), "the slow service did not appear"
    return client


def test_an_answer_that_never_comes_is_asked_for_again(rclpy_node: Any, serve: Any) -> None:
    server = serve(lambda copy: None if copy == 1 else 0.0)
    client = _ready(rclpy_node)
    resent: list[int] = []
    response = call_resending(client, SetBool.Request(data=True), 20.0,
                              lambda s: spin_until(rclpy_node, lambda: False, s), resend_after=1.0,
                              on_resend=resent.append)
    assert response is not None and response.message == "copy 2"
    assert resent == [1] and server.received == 2


def test_a_slow_first_answer_still_counts(rclpy_node: Any, serve: Any) -> None:
    server = serve(lambda copy: 2.0 if copy == 1 else 10.0)
    client = _ready(rclpy_node)
    resent: list[int] = []
    response = call_resending(client, SetBool.Request(data=True), 20.0,
                              lambda s: spin_until(rclpy_node, lambda: False, s), resend_after=0.5,
                              on_resend=resent.append)
    assert response is not None and response.message == "copy 1"
    assert resent[:2] == [1, 2]  # sent again at 0.5 s and 1.5 s (the gap doubles), answered at 2 s by the first copy
    assert server.received >= 2  # the copies reached the server, which answers them only after 10 s


def test_no_answer_at_all_gives_none_after_the_timeout(rclpy_node: Any, serve: Any) -> None:
    serve(lambda copy: None)
    client = _ready(rclpy_node)
    resent: list[int] = []
    started = time.monotonic()
    assert call_spinning(rclpy_node, client, SetBool.Request(data=True), 2.0) is None
    assert time.monotonic() - started >= 2.0
    response = call_resending(client, SetBool.Request(data=True), 2.0,
                              lambda s: spin_until(rclpy_node, lambda: False, s), resend_after=0.25,
                              on_resend=resent.append)
    assert response is None
    assert resent in ([1], [1, 2], [1, 2, 3]), resent  # copies due at 0, 0.25, 0.75 and 1.75 s
