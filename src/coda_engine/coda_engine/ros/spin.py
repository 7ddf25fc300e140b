# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The one ``main`` every node of the workspace uses: init, spin until Ctrl-C or shutdown, clean up.

Stopping: the first SIGINT or SIGTERM stops a node; later ones are ignored, so its clean-up (episodes ending,
the simulator released, the node destroyed) runs to its end and the process exits 0 without a traceback. A
Ctrl-C in the terminal of ``ros2 launch`` reaches every process of the launch, and ``ros2 launch`` then sends
each of them SIGINT again: that second signal must not interrupt the first one's clean-up. The signals are
handled here in Python, not by rclpy's handlers (those shut the ROS context down from a thread of their own at
any moment, also while the executor builds its wait set, and leave the next signal to the default action).
The context is ended by :func:`shutdown_context`, which leaves the signals' dispositions as they are.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import Executor, ExternalShutdownException, ShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from rclpy.task import Future

SPIN_SLICE_S = 0.1
"""The executor spins in slices this long, s: the longest a node takes to notice a stop signal."""
DRAIN_TIMEOUT_S = 6.0
"""How long a stopping node waits for its in-flight work (an episode) to end, s. ``ros2 launch`` sends SIGKILL
10 s after its SIGINT."""
RESEND_AFTER_S = 5.0
"""A service request left unanswered this long is sent again, s (:func:`call_resending`)."""
RESULT_SETTLE_S = 0.5
"""After its in-flight work has ended, a stopping node spins this long more, s, before it is destroyed: an action
server sends a finished goal's result from an executor task it schedules only after the execute callback has
returned, so destroying the node at once could drop the last episode's result ("Failed to send result
response")."""


class StopSignal(KeyboardInterrupt):
    """What a node's ``on_first`` raises in work that does not spin: a ``KeyboardInterrupt`` of its own type.

    Code that stops on ``KeyboardInterrupt`` stops on it too. Its own type matters at exit: CPython remembers a
    plain ``KeyboardInterrupt`` raised while it evaluates code for a C extension (``PyRun_*``), even one caught
    later, and then ends a process that finished cleanly by killing itself with SIGINT (exit status -2); it
    compares the exception's type exactly, so a subclass leaves the exit status to the node.
    """


class InFlight:
    """Work of a node that runs across callbacks of a multi-threaded executor (episodes) and must end first.

    The work runs inside ``with in_flight.running():`` and checks ``in_flight.stopping`` where it can stop.
    When the node stops, :func:`run_node` sets ``stopping`` and keeps spinning (so the work can still reply over
    ROS) until no work runs or ``DRAIN_TIMEOUT_S`` has passed; only then is the node destroyed.
    """

    def __init__(self) -> None:
        """No work running, not stopping."""
        self.stopping = threading.Event()
        self._count = 0
        self._lock = threading.Lock()

    @contextmanager
    def running(self) -> Iterator[None]:
        """Count the work inside the block as in flight."""
        with self._lock:
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1

    @property
    def busy(self) -> bool:
        """True while some work runs."""
        with self._lock:
            return self._count > 0


def run_node(
    make_node: Callable[[], Node],
    args: list[str] | None = None,
    make_executor: Callable[[], Executor] = SingleThreadedExecutor,
    on_exit: Callable[[Node], None] | None = None,
    in_flight: Callable[[Node], InFlight] | None = None,
) -> None:
    """Create the node after ``rclpy.init(args)`` and spin it on a new ``make_executor()`` until it must stop.

    It stops on the first SIGINT or SIGTERM (:func:`stop_on_first_signal`) or when the ROS context is shut
    down. Then the node's in-flight work (``in_flight(node)``, see :class:`InFlight`) is asked to stop and
    awaited while the executor keeps spinning (and ``RESULT_SETTLE_S`` more, so the results of the goals it ended
    are sent), ``on_exit(node)`` runs (also after an error), the node is destroyed and the context shut down.
    """
    stop = stop_on_first_signal()
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node = make_node()
    executor = make_executor()
    executor.add_node(node)
    try:
        while not stop.is_set() and node.context.ok():
            executor.spin_once(timeout_sec=SPIN_SLICE_S)
        if in_flight is not None:
            work = in_flight(node)
            work.stopping.set()
            end = time.monotonic() + DRAIN_TIMEOUT_S
            while work.busy and node.context.ok() and time.monotonic() < end:
                executor.spin_once(timeout_sec=0.05)
            settled = time.monotonic() + RESULT_SETTLE_S
            while node.context.ok() and time.monotonic() < settled:
                executor.spin_once(timeout_sec=0.05)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if on_exit is not None:
            on_exit(node)
        node.destroy_node()
        shutdown_context()


def stop_on_first_signal(on_first: Callable[[int], None] | None = None) -> threading.Event:
    """Return an event set by the first SIGINT or SIGTERM of the process; later ones are ignored.

    Call it before ``rclpy.init(..., signal_handler_options=SignalHandlerOptions.NO)``. The first signal sets
    the event and calls ``on_first(signum)`` (e.g. to raise ``KeyboardInterrupt`` in work that does not spin).
    From then on both signals are ignored by the process itself (``SIG_IGN``), so the clean-up they would
    interrupt runs to its end, and so does the interpreter's exit: Python gives its own handlers back their
    default action while it finalizes, and a second Ctrl-C would kill the process there. Only the main
    thread can install handlers; elsewhere (a node run from a test's thread) the event is never set by a signal.
    """
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        return stop

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            return
        stop.set()
        for ignored in (signal.SIGINT, signal.SIGTERM):
            signal.signal(ignored, signal.SIG_IGN)
        if on_first is not None:
            on_first(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handle)
    return stop


def shutdown_context(context: Context | None = None) -> None:
    """Shut a ROS context down that was initialised with ``SignalHandlerOptions.NO``; leave the signals alone.

    A plain ``rclpy.try_shutdown()`` also "uninstalls" rclpy's signal handlers, never installed here, and does so
    by setting SIGINT and SIGTERM to their default action and straight back: a signal landing in between (the
    second Ctrl-C of ``ros2 launch`` does, now and then) kills the process in the middle of its clean-up.
    """
    rclpy.try_shutdown(context=context, uninstall_handlers=False)


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


def call_resending(
    client: Any,
    request: Any,
    timeout: float,
    spin_once: Callable[[float], None] | None = None,
    resend_after: float = RESEND_AFTER_S,
    on_resend: Callable[[int], None] | None = None,
) -> Any | None:
    """Call the service of ``client`` and return the first response, sending the request again while none comes.

    A server that has not yet discovered a new client's response reader drops its answer: with Fast DDS it waits
    100 ms for the client, then only warns "client will not receive response" (on a loaded machine, the first call
    after ``wait_for_service`` can fall into that window). So the request is sent again after ``resend_after`` s
    without an answer, then after twice that, and so on (``on_resend(attempt)`` is told each time), and the first
    answer to any of the copies is returned; None after ``timeout`` s. A slow server is not held up: the earlier
    copies stay pending, and their answers count. ``spin_once(seconds)`` spins the client's node for at most that
    long; without it another thread spins the node and this one waits. Only for requests that may be served
    twice: reads, and generation from explicit seeds.
    """
    futures: list[Future] = []
    start = time.monotonic()
    end, send_at, gap = start + timeout, start, resend_after
    try:
        while True:
            now = time.monotonic()
            if now >= send_at and now < end:
                futures.append(client.call_async(request))
                if len(futures) > 1 and on_resend is not None:
                    on_resend(len(futures) - 1)
                send_at, gap = now + gap, gap * 2
            answered = next((f for f in futures if f.done()), None)
            if answered is not None:
                return answered.result()
            if now >= end:
                return None
            if spin_once is not None:
                spin_once(min(0.05, max(0.0, end - now)))
            else:
                time.sleep(0.01)
    finally:
        for future in futures:
            if not future.done():
                client.remove_pending_request(future)


def call_spinning(node: Node, client: Any, request: Any, timeout: float = 30.0) -> Any | None:
    """:func:`call_resending` for a caller without an executor: spin ``node`` while waiting; None after ``timeout``."""
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    try:
        return call_resending(client, request, timeout, lambda seconds: executor.spin_once(timeout_sec=seconds))
    finally:
        executor.remove_node(node)
        executor.shutdown()


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
