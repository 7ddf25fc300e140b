# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``signals_held``: a stop signal that comes inside the block reaches the previous handler after it, once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from coda_engine.processes import signals_held


@pytest.fixture(autouse=True)
def python_sigint_handler() -> Iterator[None]:
    """Python's own SIGINT handler while a test runs, whatever the test process inherited.

    A process started in the background of a non-interactive shell inherits SIGINT ignored, and Python then leaves
    it ignored (no ``KeyboardInterrupt``); the tests here are about the handler a terminal's Ctrl-C reaches.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_held_signal_reaches_the_previous_handler_after_the_block() -> None:
    seen: list[str] = []
    previous = signal.signal(signal.SIGUSR1, lambda number, frame: seen.append("handler"))
    try:
        with signals_held(signal.SIGUSR1, signal.SIGUSR2):
            os.kill(os.getpid(), signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGUSR1)  # a second one while held is not delivered again
            seen.append("block ended")
        seen.append("after")
        assert seen == ["block ended", "handler", "after"]
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL  # every handler is back as it was
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_ctrl_c_inside_the_block_ends_it_first_then_interrupts() -> None:
    finished = []
    with pytest.raises(KeyboardInterrupt), signals_held(signal.SIGINT):
        os.kill(os.getpid(), signal.SIGINT)
        finished.append(True)
    assert finished == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_a_signal_nothing_is_delivered_and_off_the_main_thread_nothing_is_installed() -> None:
    with signals_held(signal.SIGINT):
        pass
    handlers = []

    def elsewhere() -> None:
        with signals_held(signal.SIGINT):
            handlers.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert handlers == [signal.default_int_handler]
