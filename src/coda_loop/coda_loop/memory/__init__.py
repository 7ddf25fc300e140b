# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The shared heterogeneous memory: SQLite records, keyframe blobs, events and retrieval. Pure: no rclpy."""

from coda_loop.memory.schema import KINDS, LATEST_VERSION, PROGRAM_KINDS
from coda_loop.memory.store import (
    MAX_LIMIT,
    PURPOSES,
    QUERY_KINDS,
    MemoryQueryError,
    MemoryRecord,
    MemoryStore,
    RetrievalConfig,
    parse_uri,
    record_uri,
)

__all__ = [
    "KINDS",
    "LATEST_VERSION",
    "MAX_LIMIT",
    "PROGRAM_KINDS",
    "PURPOSES",
    "QUERY_KINDS",
    "MemoryQueryError",
    "MemoryRecord",
    "MemoryStore",
    "RetrievalConfig",
    "parse_uri",
    "record_uri",
]
