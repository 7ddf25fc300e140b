# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""TransitionRing: drop-oldest overflow and a two-thread producer/consumer run."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import coda_core_cpp as core


def test_drop_oldest_is_counted() -> None:
    ring = core.TransitionRing(capacity=3, record_size=2)
    results = [ring.push(np.array([i, 10 * i], np.float32)) for i in range(5)]
    assert results == [True, True, True, False, False]
    assert ring.dropped == 2 and ring.pushed == 5 and ring.size == 3
    out = ring.drain()
    np.testing.assert_array_equal(out, [[2, 20], [3, 30], [4, 40]])
    assert ring.popped == 3 and ring.size == 0
    assert ring.drain().shape == (0, 2)


def test_drain_respects_max_records_and_errors() -> None:
    ring = core.TransitionRing(8, 1)
    for i in range(5):
        ring.push([float(i)])
    np.testing.assert_array_equal(ring.drain(2)[:, 0], [0, 1])
    np.testing.assert_array_equal(ring.drain()[:, 0], [2, 3, 4])
    with pytest.raises(ValueError, match=r"record: expected shape \(1,\), got \(2,\)"):
        ring.push([1.0, 2.0])
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        core.TransitionRing(0, 1)


@pytest.mark.parametrize("capacity", [1, 4, 64])
def test_two_threads_lose_and_duplicate_nothing(capacity: int) -> None:
    ring = core.TransitionRing(capacity, 3)
    n = 20000
    seen: list[np.ndarray] = []
    finished = threading.Event()

    def consume() -> None:
        while True:
            done = finished.is_set()
            batch = ring.drain(16)
            if len(batch):
                seen.append(batch)
            elif done:
                return

    consumer = threading.Thread(target=consume)
    consumer.start()
    drops = 0
    for i in range(n):
        drops += not ring.push(np.array([i, -i, 2 * i], np.float32))
    finished.set()
    consumer.join(timeout=60)
    assert not consumer.is_alive()
    got = np.concatenate(seen) if seen else np.zeros((0, 3), np.float32)
    ids = got[:, 0]
    np.testing.assert_array_equal(got[:, 1], -ids)  # never torn
    np.testing.assert_array_equal(got[:, 2], 2 * ids)
    assert np.all(np.diff(ids) > 0)  # in order: no duplicates
    assert len(ids) + ring.dropped == n  # nothing lost
    assert ring.dropped == drops and ring.popped == len(ids) and ring.pushed == n
    assert ids[-1] == n - 1
