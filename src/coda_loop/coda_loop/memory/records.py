# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The record layer of the memory: one SQLite file, one write order, and what every kind of record shares.

:class:`RecordFile` opens the file (WAL journal, busy timeout, the migrations of :mod:`coda_loop.memory.schema`),
runs write transactions that take the lock up front (``BEGIN IMMEDIATE``) and read transactions on one snapshot,
and writes each record with one ``events`` row (``sequence`` autoincrement: the global write order), so a reader
tailing ``events`` never skips one; re-putting an existing id returns the stored record unchanged. It reads
records back by kind and id, by round range and after a sequence. The modules beside it add the kinds:
``episodes`` (scenes, episodes, keyframes, interventions), ``diagnoses`` (and retrieval), ``programs``,
``progress`` (success rates, policy and critic versions) and ``runs`` (finished steps, starts). Pure: no rclpy.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coda_loop.memory.schema import KINDS, LATEST_VERSION, MIGRATIONS, SCHEMA_VERSION_TABLE, TABLES

QUERY_RECORDS = "records"
QUERY_SIMILAR = "similar_diagnoses"
QUERY_FIXED = "fixed_conditions"
QUERY_EFFECT = "generation_effect"
QUERY_PROGRESS = "progress"
QUERY_KINDS: tuple[str, ...] = (QUERY_RECORDS, QUERY_SIMILAR, QUERY_FIXED, QUERY_EFFECT, QUERY_PROGRESS)
"""Query kinds of ``coda_msgs/srv/QueryMemory``."""
MAX_LIMIT = 1000
"""Largest ``limit`` of a query."""
DEFAULT_LIMIT = 100
"""``limit`` of a query that gives 0."""
BUSY_TIMEOUT_S = 30.0
"""How long a connection waits for another process's lock before failing, s."""
SUMMARY_STRING = 160
"""Longest string kept in an event's JSON summary (characters)."""
SUMMARY_SKIP = frozenset({"mjcf", "source", "params_json", "trajectory", "header", "layout"})
"""Top-level payload keys never put into event summaries (bulky)."""


class MemoryQueryError(ValueError):
    """A bad query; the message names the field that was wrong and the allowed values."""


@dataclass(frozen=True)
class MemoryRecord:
    """One record of the memory, as any reader sees it."""

    sequence: int
    """Global write order in this memory (``events.sequence``), starts at 1."""
    kind: str
    """One of ``schema.KINDS`` (the ``KIND_*`` strings of ``coda_msgs/MemoryEvent``)."""
    record_id: str
    """Id of the record in its table."""
    round: int
    """Round the record belongs to."""
    payload: dict[str, Any] = field(hash=False, compare=True)
    """The full record: what was passed to ``put_*`` plus derived fields."""
    created: float = 0.0
    """Unix time of the write."""
    uri: str = ""
    """``sqlite:///ABS/PATH/memory.db#<table>/<record_id>``."""


def record_uri(db_path: Path, kind: str, record_id: str) -> str:
    """URI of a record: ``sqlite://`` + the absolute database path + ``#<table>/<record_id>``."""
    return f"sqlite://{db_path}#{TABLES[kind].table}/{record_id}"


def parse_uri(uri: str) -> tuple[Path, str, str]:
    """Inverse of :func:`record_uri`: (database path, table, record id); ValueError if it is not one."""
    if not uri.startswith("sqlite://") or "#" not in uri:
        raise ValueError(f"not a memory record URI (sqlite://PATH#TABLE/ID): {uri!r}")
    path, _, fragment = uri.removeprefix("sqlite://").partition("#")
    table, _, record_id = fragment.partition("/")
    if not path or not table or not record_id:
        raise ValueError(f"not a memory record URI (sqlite://PATH#TABLE/ID): {uri!r}")
    return Path(path), table, record_id


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def to_json(value: Any, what: str = "payload") -> str:
    """Compact JSON text; ValueError naming ``what`` when the value has parts JSON cannot hold."""
    try:
        return json.dumps(value, separators=(",", ":"), default=_json_default, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} cannot be stored as JSON: {exc}") from exc


def summarize(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Short summary of a payload for events: scalars (long strings cut), list lengths as ``n_<key>``."""
    out: dict[str, Any] = {}
    for key, value in payload.items():
        if key in SUMMARY_SKIP:
            continue
        if isinstance(value, str):
            out[key] = value if len(value) <= SUMMARY_STRING else value[: SUMMARY_STRING - 3] + "..."
        elif isinstance(value, bool | int | float) or value is None:
            out[key] = value
        elif isinstance(value, list | tuple):
            out[f"n_{key}"] = len(value)
    return out


def check_round(round: int) -> int:
    """Return ``round`` as an int; ValueError unless it is an integer >= 0."""
    if isinstance(round, bool) or not isinstance(round, int | np.integer) or round < 0:
        raise ValueError(f"round={round!r} must be an integer >= 0")
    return int(round)


def require_text(data: Mapping[str, Any], key: str, what: str) -> str:
    """Return ``data[key]``; ValueError naming ``what`` and ``key`` unless it is a non-empty string."""
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what}[{key!r}] must be a non-empty string, got {value!r}")
    return value


def check_kind(kind: str, *, allow_empty: bool) -> None:
    """Raise MemoryQueryError unless ``kind`` is a record kind (or empty, when allowed)."""
    if (kind or not allow_empty) and kind not in KINDS:
        raise MemoryQueryError(
            f"kind={kind!r} is not a record kind; allowed: {', '.join(KINDS)}"
            + (" (or empty for all)" if allow_empty else "")
        )


@dataclass(frozen=True)
class RecordItem:
    """One record to insert: its event fields, its payload and the statement that fills its table."""

    kind: str
    record_id: str
    round: int
    payload: Mapping[str, Any]
    insert: Callable[[sqlite3.Connection, int, str], None]


class RecordFile:
    """One memory file: connection, migrations, transactions, the generic write and the reads."""

    def __init__(self, path: str | Path, *, wal: bool = True) -> None:
        """Create or open ``path``, apply migrations, and use the WAL journal unless ``wal`` is False.

        ``wal=False`` keeps SQLite's rollback journal for a new file (a file already in WAL mode stays so).
        """
        self.path = Path(path).expanduser().resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.blob_dir = self.path.parent / "blobs"
        self.blob_dir.mkdir(exist_ok=True)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if wal:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(f"{self.path}: SQLite refused the WAL journal (journal_mode is {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        self.schema_version = self._migrate()

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> RecordFile:
        """Use as a context manager; closed on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close."""
        self.close()

    @property
    def conn(self) -> sqlite3.Connection:
        """Return the open connection; RuntimeError after :meth:`close`."""
        if self._conn is None:
            raise RuntimeError(f"MemoryStore {self.path} is closed")
        return self._conn

    def _migrate(self) -> int:
        """Apply missing migrations in one locked transaction; return the schema version."""
        conn = self.conn
        has_table = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if has_table:
            current = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
            if current == LATEST_VERSION:
                return current
        with self._write() as conn:
            conn.execute(SCHEMA_VERSION_TABLE)
            current = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
            if current > LATEST_VERSION:
                raise RuntimeError(
                    f"{self.path} has memory schema v{current}, newer than this code's "
                    f"v{LATEST_VERSION}; open it with a newer coda_engine"
                )
            for migration in MIGRATIONS:
                if migration.version > current:
                    for statement in migration.statements():
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_version (version, description, applied) VALUES (?, ?, ?)",
                        (migration.version, migration.description, time.time()),
                    )
                    current = migration.version
        return current

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding the database lock from its start."""
        with self._lock:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement in it sees the same snapshot."""
        with self._lock:
            conn = self.conn
            if conn.in_transaction:  # already inside a transaction of this store: same snapshot
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    # ---------------------------------------------------------------- writes
    def _record(self, conn: sqlite3.Connection, kind: str, record_id: str) -> MemoryRecord | None:
        row = conn.execute(
            "SELECT sequence, round, created FROM events WHERE kind = ? AND record_id = ?", (kind, record_id)
        ).fetchone()
        if row is None:
            return None
        table = TABLES[kind]
        sql = f"SELECT payload FROM {table.table} WHERE {table.id_column} = ?"
        args: tuple[str, ...] = (record_id,)
        if table.kind_column:
            sql += f" AND {table.kind_column} = ?"
            args += (kind,)
        payload_row = conn.execute(sql, args).fetchone()
        if payload_row is None:
            raise RuntimeError(f"{self.path}: event {row[0]} names {kind} {record_id!r}, which is not in {table.table}")
        return MemoryRecord(
            sequence=int(row[0]),
            kind=kind,
            record_id=record_id,
            round=int(row[1]),
            payload=json.loads(payload_row[0]),
            created=float(row[2]),
            uri=record_uri(self.path, kind, record_id),
        )

    def _put(
        self,
        items: Sequence[RecordItem],
        before: Callable[[sqlite3.Connection], None] | None = None,
    ) -> list[MemoryRecord]:
        """Insert records and their events in one transaction; ids already stored are returned as they are."""
        texts = [to_json(item.payload, f"{item.kind} {item.record_id!r}") for item in items]
        summaries = [to_json(summarize(json.loads(text))) for text in texts]
        out: list[MemoryRecord] = []
        with self._write() as conn:
            if before is not None:
                before(conn)
            for item, text, summary in zip(items, texts, summaries, strict=True):
                existing = self._record(conn, item.kind, item.record_id)
                if existing is not None:
                    out.append(existing)
                    continue
                created = time.time()
                cursor = conn.execute(
                    "INSERT INTO events (kind, record_id, round, payload_json, created) VALUES (?, ?, ?, ?, ?)",
                    (item.kind, item.record_id, item.round, summary, created),
                )
                sequence = int(cursor.lastrowid or 0)
                item.insert(conn, sequence, text)
                out.append(
                    MemoryRecord(
                        sequence=sequence,
                        kind=item.kind,
                        record_id=item.record_id,
                        round=item.round,
                        payload=json.loads(text),
                        created=created,
                        uri=record_uri(self.path, item.kind, item.record_id),
                    )
                )
        return out

    # ---------------------------------------------------------------- reading
    def get(self, kind: str, record_id: str) -> MemoryRecord | None:
        """Return the record of ``kind`` with ``record_id``, or None."""
        check_kind(kind, allow_empty=False)
        with self._read() as conn:
            return self._record(conn, kind, record_id)

    def last_sequence(self) -> int:
        """Return the sequence of the newest write (0 for an empty memory)."""
        with self._read() as conn:
            return int(conn.execute("SELECT COALESCE(MAX(sequence), 0) FROM events").fetchone()[0])

    def counts(self) -> dict[str, int]:
        """Return the number of records per kind (kinds without records left out)."""
        with self._read() as conn:
            return {str(k): int(n) for k, n in conn.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind")}

    def records(
        self, kind: str = "", *, round_min: int = -1, round_max: int = -1, limit: int = 100, after_sequence: int = 0
    ) -> list[MemoryRecord]:
        """Return records of ``kind`` (all kinds if empty) within the round range (-1: open), newest first.

        With ``after_sequence > 0``: only records written after that sequence, oldest first (tailing).
        """
        check_kind(kind, allow_empty=True)
        if limit < 1:
            raise MemoryQueryError(f"limit={limit} must be >= 1")
        where, args = ["sequence > ?"], [max(0, int(after_sequence))]
        if kind:
            where.append("kind = ?")
            args.append(kind)
        if round_min >= 0:
            where.append("round >= ?")
            args.append(int(round_min))
        if round_max >= 0:
            where.append("round <= ?")
            args.append(int(round_max))
        order = "ASC" if after_sequence > 0 else "DESC"
        sql = f"SELECT kind, record_id FROM events WHERE {' AND '.join(where)} ORDER BY sequence {order} LIMIT ?"
        with self._read() as conn:
            rows = conn.execute(sql, (*args, int(limit))).fetchall()
            found = [self._record(conn, k, r) for k, r in rows]
        return [r for r in found if r is not None]

    def event_summaries(self, after_sequence: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """Return ``events`` rows after a sequence, oldest first (sequence, kind, record_id, round, payload_json)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT sequence, kind, record_id, round, payload_json, created FROM events WHERE sequence > ? "
                "ORDER BY sequence LIMIT ?",
                (int(after_sequence), int(limit)),
            ).fetchall()
        keys = ("sequence", "kind", "record_id", "round", "payload_json", "created")
        return [dict(zip(keys, row, strict=True)) for row in rows]
