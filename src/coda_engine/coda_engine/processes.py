# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Processes: what every process spawned to run episodes calls first, and stop signals held over imports.

Pure module: no rclpy.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux), so a killed run leaves no workers behind."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the request was made
            os._exit(1)


@contextmanager
def signals_held(*signums: int) -> Iterator[None]:
    """Hold the signals ``signums`` while the block runs; the first that came is delivered when it has ended.

    For loading libraries whose import initialises C extensions (the text model): a ``KeyboardInterrupt`` raised
    inside such an import makes the initialisation fail ("ImportError: initialization failed") instead of stopping
    the program. The handlers in place before the block get the held signal (``signal.raise_signal``) once it has
    ended without an error. Only the main thread handles signals; elsewhere the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = {signum: signal.signal(signum, lambda number, frame: came.append(number)) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if came:
        signal.raise_signal(came[0])
