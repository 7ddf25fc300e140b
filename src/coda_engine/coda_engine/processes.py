# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Worker processes: what every process spawned to run episodes (the loop's workers, suite evaluation) calls first.

Pure module: no rclpy.
"""

from __future__ import annotations

import os


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
