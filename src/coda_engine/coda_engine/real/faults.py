# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Faults of a real arm's wire, injected by the stand-in arm (pure: no rclpy).

:class:`FaultConfig` says how bad the link and the controller are: latency and jitter of state messages and of
commands, Gaussian noise on measured joint positions, dropped messages, trajectories the controller rejects.
:class:`FaultInjector` draws those faults from one explicit ``np.random.Generator`` (seeded from the config, so a
run is reproducible) and counts every fault it injects. :class:`DelayLine` delivers delayed messages on one
background thread, in order per stream, without blocking the caller (the physics).
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np


class FaultConfigError(ValueError):
    """A fault setting out of range; the message names the field."""


@dataclass(frozen=True)
class FaultConfig:
    """How unreliable the stand-in arm's link and controller are (all zero: a perfect arm)."""

    latency_s: float = 0.0
    """Delay added before a received command is applied and before a measured joint state is published, s."""
    jitter_s: float = 0.0
    """Extra delay drawn uniformly from ``[0, jitter_s]`` for each message, s (messages of a stream stay in order)."""
    joint_noise: float = 0.0
    """Standard deviation of the Gaussian noise added to every published joint position, rad (m for fingers)."""
    drop_rate: float = 0.0
    """Probability that a published joint_states message, or a received command, is lost."""
    reject_rate: float = 0.0
    """Probability that the controller rejects a valid trajectory (logged, not executed)."""
    seed: int = 0
    """Seed of the generator all faults are drawn from."""

    def __post_init__(self) -> None:
        """Check ranges; the error names the field."""
        for name in ("latency_s", "jitter_s", "joint_noise"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 10.0):
                raise FaultConfigError(f"FaultConfig.{name}={value!r} must be a number in [0, 10]")
        for name in ("drop_rate", "reject_rate"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0):
                raise FaultConfigError(f"FaultConfig.{name}={value!r} must be a probability in [0, 1]")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise FaultConfigError(f"FaultConfig.seed={self.seed!r} must be a non-negative integer")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultConfig:
        """Build from a mapping of field values; unknown keys are named in the error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise FaultConfigError(f"unknown FaultConfig fields {unknown}; known: {sorted(known)}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """Field values by name."""
        return asdict(self)


COUNTERS = (
    "published_states",
    "dropped_states",
    "delayed_states",
    "noisy_states",
    "received_commands",
    "dropped_commands",
    "delayed_commands",
    "invalid_commands",
    "rejected",
    "applied_commands",
)
"""Counters every :class:`FaultInjector` starts with (at zero)."""


class FaultInjector:
    """Draws faults per :class:`FaultConfig` from one generator and counts them (thread-safe)."""

    def __init__(self, config: FaultConfig | None = None) -> None:
        """Start with ``config`` (default: no faults) and a generator seeded from it."""
        self._lock = threading.Lock()
        self.config = config or FaultConfig()
        self.rng = np.random.default_rng(self.config.seed)
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        """Number of each event so far (see :data:`COUNTERS`; :meth:`count` may add more)."""

    def configure(self, config: FaultConfig) -> None:
        """Switch to ``config``; the generator is re-seeded only when the seed changes. Counters are kept."""
        with self._lock:
            if config.seed != self.config.seed:
                self.rng = np.random.default_rng(config.seed)
            self.config = config

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` (created at zero when new)."""
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def snapshot(self) -> dict[str, int]:
        """Copy of the counters."""
        with self._lock:
            return dict(self.counters)

    def delay(self, stream: str = "states") -> float:
        """Delay of one message of ``stream`` ("states" or "commands"), s: latency plus uniform jitter."""
        with self._lock:
            cfg = self.config
            extra = float(self.rng.uniform(0.0, cfg.jitter_s)) if cfg.jitter_s > 0 else 0.0
            value = cfg.latency_s + extra
            if value > 0:
                key = f"delayed_{stream}"
                self.counters[key] = self.counters.get(key, 0) + 1
            return value

    def drop(self, stream: str = "states") -> bool:
        """Whether one message of ``stream`` is lost (counted as ``dropped_<stream>``)."""
        with self._lock:
            rate = self.config.drop_rate
            lost = rate > 0 and bool(self.rng.random() < rate)
            if lost:
                key = f"dropped_{stream}"
                self.counters[key] = self.counters.get(key, 0) + 1
            return lost

    def reject(self) -> bool:
        """Whether the controller rejects one valid trajectory (counted as ``rejected``)."""
        with self._lock:
            rate = self.config.reject_rate
            rejected = rate > 0 and bool(self.rng.random() < rate)
            if rejected:
                self.counters["rejected"] += 1
            return rejected

    def noisy(self, q: np.ndarray) -> np.ndarray:
        """Return ``q`` plus Gaussian noise of std ``joint_noise`` (a copy; ``q`` itself unchanged)."""
        q = np.array(q, dtype=np.float64)
        with self._lock:
            sigma = self.config.joint_noise
            if sigma <= 0:
                return q
            self.counters["noisy_states"] += 1
            return q + self.rng.normal(0.0, sigma, size=q.shape)


class DelayLine:
    """Runs callbacks after a delay on one background thread; each stream's callbacks run in submission order.

    A zero delay on a stream with nothing pending runs the callback at once in the caller's thread. A callback
    that raises is reported to ``on_error`` and the line keeps running.
    """

    def __init__(self, on_error: Callable[[BaseException], None] | None = None) -> None:
        """Create the line (its thread starts with the first delayed callback)."""
        self._on_error = on_error
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._last_due: dict[str, float] = {}
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, delay: float, fn: Callable[[], None], stream: str = "") -> None:
        """Run ``fn()`` ``delay`` seconds from now (never before an earlier callback of ``stream``)."""
        now = time.monotonic()
        with self._cond:
            if self._closed:
                return
            due = max(now + delay, self._last_due.get(stream, -math.inf))
            if due <= now:
                immediate = True
            else:
                immediate = False
                self._last_due[stream] = due
                heapq.heappush(self._heap, (due, next(self._seq), fn))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="delay-line", daemon=True)
                    self._thread.start()
                self._cond.notify()
        if immediate:
            self._call(fn)

    def pending(self) -> int:
        """Callbacks waiting."""
        with self._cond:
            return len(self._heap)

    def close(self) -> None:
        """Stop the thread; pending callbacks are discarded."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _call(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # reported; the line keeps delivering
            if self._on_error is not None:
                self._on_error(exc)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, fn = heapq.heappop(self._heap)
            self._call(fn)
