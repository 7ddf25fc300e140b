# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The shared heterogeneous memory of a run: one SQLite file, keyframes as content-addressed blob files.

    store = MemoryStore("runs/x/memory.db")            # creates or opens, migrates, WAL journal
    scene = store.put_scene(0, scene.to_dict(), origin="generated", program_id="gp-1")
    store.put_episode(0, episode.to_result_dict(), episode.keyframes, purpose="probe")
    store.put_diagnosis(0, diagnosis.to_dict())        # its text is embedded (MiniLM) for retrieval
    store.similar_diagnoses("missed the grasp of the red cube")   # [(record, cosine), ...]
    store.records(after_sequence=last)                 # every write after `last`, oldest first

Every write is one transaction that inserts the record into its table and one row into ``events``
(``sequence`` autoincrement: the global write order); writes take the database lock up front
(``BEGIN IMMEDIATE``), so sequences are committed in order and a reader tailing ``events`` never skips
one. Re-putting an existing id returns the stored record unchanged (no new event). One writer process
and any number of reader processes may use the file at once (WAL journal, busy timeout).

Keyframes are ``.npz`` files under ``<db folder>/blobs/`` named by the SHA-256 of their dtype, shape and
bytes; a file is written to a temporary name, synced and renamed, before the transaction that references
it commits, so a record never points to a missing or partial blob. Pure module: no rclpy.

The class is put together from one module per what it stores: ``records`` (the file, transactions,
reads), ``episodes``, ``diagnoses`` (and retrieval), ``programs``, ``progress`` and ``runs``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from coda_loop.memory.episodes import EpisodeRecords
from coda_loop.memory.programs import ProgramRecords
from coda_loop.memory.progress import ProgressRecords
from coda_loop.memory.records import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    QUERY_EFFECT,
    QUERY_FIXED,
    QUERY_KINDS,
    QUERY_RECORDS,
    QUERY_SIMILAR,
    MemoryQueryError,
    MemoryRecord,
    check_kind,
)
from coda_loop.memory.runs import RunRecords
from coda_loop.memory.schema import KIND_DIAGNOSIS, KIND_PROGRESS


class MemoryStore(EpisodeRecords, ProgramRecords, ProgressRecords, RunRecords):
    """The memory of one run (see the module docstring)."""

    def __init__(self, path: str | Path, *, embedder: object | None = None, wal: bool = True) -> None:
        """Create or open ``path``, apply migrations, and use the WAL journal unless ``wal`` is False.

        ``wal=False`` keeps SQLite's rollback journal for a new file (a file already in WAL mode stays so).
        ``embedder`` embeds diagnosis texts (``embed(list[str]) -> (n, d)``); None creates a
        ``TextEmbedder`` on first need.
        """
        super().__init__(path, embedder=embedder, wal=wal)

    def query(
        self,
        query: str,
        *,
        kind: str = "",
        text: str = "",
        record_id: str = "",
        round_min: int = -1,
        round_max: int = -1,
        limit: int = 0,
    ) -> tuple[list[MemoryRecord], dict]:
        """Answer a ``QueryMemory`` request: (records, result dict); MemoryQueryError naming a bad field.

        ``records``: records of ``kind`` (all kinds if empty), newest first; result ``{"count"}``.
        ``similar_diagnoses``: failed diagnoses most similar to ``text``; result ``{"scores": [{record_id,
        score}]}``. ``fixed_conditions``: result ``{"fixed_conditions": [...]}`` (no records).
        ``generation_effect``: the diagnosis ``record_id`` and its programs; result = :meth:`generation_effect`.
        ``progress``: progress records; result ``{"progress": rows}``. Round bounds apply to records,
        similar_diagnoses and progress.
        """
        if query not in QUERY_KINDS:
            raise MemoryQueryError(f"query={query!r} is not a query kind; allowed: {', '.join(QUERY_KINDS)}")
        check_kind(kind, allow_empty=True)
        if isinstance(limit, bool) or not isinstance(limit, int | np.integer) or not 0 <= limit <= MAX_LIMIT:
            raise MemoryQueryError(f"limit={limit!r} must be in 1..{MAX_LIMIT} (0 means {DEFAULT_LIMIT})")
        limit = int(limit) or DEFAULT_LIMIT
        for name, value in (("round_min", round_min), ("round_max", round_max)):
            if value < -1:
                raise MemoryQueryError(f"{name}={value} must be >= 0, or -1 for no bound")
        if round_min >= 0 and round_max >= 0 and round_min > round_max:
            raise MemoryQueryError(f"round_min={round_min} > round_max={round_max}: the round range is empty")
        if query == QUERY_RECORDS:
            records = self.records(kind, round_min=round_min, round_max=round_max, limit=limit)
            return records, {"count": len(records)}
        if query == QUERY_SIMILAR:
            if not text.strip():
                raise MemoryQueryError("text is required for query 'similar_diagnoses' (the text to compare)")
            pairs = self._similar(text, limit, True, round_min, round_max)
            return [r for r, _ in pairs], {"scores": [{"record_id": r.record_id, "score": s} for r, s in pairs]}
        if query == QUERY_FIXED:
            return [], {"fixed_conditions": self.fixed_conditions()[:limit]}
        if query == QUERY_EFFECT:
            if not record_id:
                raise MemoryQueryError("record_id is required for query 'generation_effect' (a diagnosis id)")
            effect = self.generation_effect(record_id)
            programs = [self.get(p["kind"], p["program_id"]) for p in effect["programs"]]
            records = [self.get(KIND_DIAGNOSIS, record_id), *programs]
            return [r for r in records if r is not None], effect
        records = self.records(KIND_PROGRESS, round_min=round_min, round_max=round_max, limit=limit)
        rows = [
            row
            for row in self.progress()
            if (round_min < 0 or row["round"] >= round_min) and (round_max < 0 or row["round"] <= round_max)
        ]
        return records, {"progress": rows}
