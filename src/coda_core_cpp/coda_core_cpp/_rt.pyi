# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Type stubs of coda_core_cpp._rt: the policy node's control tick in C++, its loop over rcl, the bench probe."""

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

def steady_now_ns() -> int:
    """Return the probe's monotonic clock (CLOCK_MONOTONIC, as time.monotonic_ns), ns."""

def python_float_repr(value: float) -> str:
    """Python's repr() of a float, computed in C++ (hold reasons quote settings with it)."""

class ControlTick:
    """The control step of coda_policy.control.PolicyController.tick in C++ (no ROS; the loop's tick)."""

    def __init__(self, spec: Mapping[str, object]) -> None:
        """Build from ``coda_policy.control.native_tick_spec``; ValueError naming the key or setting that is wrong."""

    def set_model(self, model: Mapping[str, object]) -> None:
        """Hand over ``PolicyController.native_model()``: used from the next tick on."""

    def set_joints(self, stamp: float, names: Sequence[str], positions: Sequence[float]) -> str:
        """Latest joint state; returns why it was ignored (empty when taken)."""

    def set_objects(self, stamp: float, objects: Sequence[tuple[object, object, int, object, int]]) -> None:
        """Latest objects as (position, rgb, shape, size, role) tuples."""

    def tick(self, now: float) -> dict[str, object]:
        """Return this tick's command: delta, gripper, hold, reason, stage, version, sha256."""

    @property
    def observation(self) -> npt.NDArray[np.float32]:
        """The observation of the last tick that built one."""

class ControlLoop:
    """The control tick on a C++ thread of its own: rcl subscriptions, a wait set, rcl publish; never takes the GIL."""

    def __init__(self, tick_spec: Mapping[str, object], options: Mapping[str, object]) -> None:
        """Create the loop's rcl context, node, subscriptions and publisher (RuntimeError naming the rcl call)."""

    def start(self) -> None: ...
    def stop(self) -> None:
        """Wake the thread and join it (idempotent)."""

    def set_model(self, model: Mapping[str, object]) -> None:
        """Hand over a (version, instruction): swapped in between two ticks."""

    def stats(self) -> dict[str, object]:
        """Counters (ticks, holds, published, ...), the latest hold reason, why joint states were ignored, errors."""

    def command_subscribers(self) -> int: ...
    def joint_state_publishers(self) -> int: ...

class Probe:
    """The arm side of ``coda bench control`` over rcl: observations out, answers timed on a monotonic clock."""

    def __init__(self, node_name: str, joint_names: Sequence[str], positions: Sequence[float]) -> None: ...
    def add_policy(self, joints_topic: str, objects_topic: str, command_topic: str, objects_cdr: bytes,
                   objects_period_ns: int) -> int: ...
    def add_relay(self, in_topic: str, out_topic: str) -> int: ...
    def matched(self, route: int) -> bool: ...
    def round_trip(self, route: int, at_ns: int, timeout_ns: int) -> tuple[int, bool, int]:
        """(latency ns or -1, the answer was a hold, send time ns) of one observation published at ``at_ns``."""

    def periodic(self, route: int, rate_hz: float, count: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Latencies (-1: missed its period) and hold flags of ``count`` observations at ``rate_hz``."""

    def idle(self, until_ns: int) -> None:
        """Keep object states going out until the monotonic clock reaches ``until_ns``."""
