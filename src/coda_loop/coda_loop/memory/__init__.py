# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The shared heterogeneous memory: SQLite records, keyframe blobs, events and retrieval. Pure: no rclpy.

``store.MemoryStore`` is the memory of a run; ``records`` holds the file, its transactions and reads, and
``episodes``, ``diagnoses``, ``programs``, ``progress`` and ``runs`` the kinds of record it stores.
"""

from coda_loop.memory.diagnoses import RetrievalConfig
from coda_loop.memory.episodes import PURPOSES
from coda_loop.memory.records import MAX_LIMIT, QUERY_KINDS, MemoryQueryError, MemoryRecord, parse_uri, record_uri
from coda_loop.memory.schema import KINDS, LATEST_VERSION, PROGRAM_KINDS
from coda_loop.memory.store import MemoryStore

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
