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
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from coda_engine.digests import folder_sha256
from coda_loop.memory.schema import (
    KIND_CRITIC_VERSION,
    KIND_DIAGNOSIS,
    KIND_EPISODE,
    KIND_GENERATION_PROGRAM,
    KIND_INTERVENTION,
    KIND_POLICY_VERSION,
    KIND_PROGRESS,
    KIND_SCENE,
    KINDS,
    LATEST_VERSION,
    MIGRATIONS,
    PROGRAM_KINDS,
    SCHEMA_VERSION_TABLE,
    TABLES,
)

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
PURPOSES: tuple[str, ...] = ("probe", "train", "eval", "demo")
"""Why an episode was run."""
BUSY_TIMEOUT_S = 30.0
"""How long a connection waits for another process's lock before failing, s."""
SUMMARY_STRING = 160
"""Longest string kept in an event's JSON summary (characters)."""
SUMMARY_SKIP = frozenset({"mjcf", "source", "params_json", "trajectory", "header", "layout"})
"""Top-level payload keys never put into event summaries (bulky)."""


class MemoryQueryError(ValueError):
    """A bad query; the message names the field that was wrong and the allowed values."""


class TextEmbedderLike(Protocol):
    """What the store needs of an embedder (``coda_engine.text_embedding.TextEmbedder`` is one)."""

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return one row per text."""


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


@dataclass(frozen=True)
class RetrievalConfig:
    """Thresholds of :meth:`MemoryStore.fixed_conditions` (those of ``coda_critic.generation.GenerationConfig``)."""

    failing_rate: float = 0.5
    """A condition with at least this diagnosed failure rate in a round was failing then."""
    fixed_rate: float = 0.2
    """A failing condition is fixed when its failure rate in the latest round it was seen is at most this."""
    min_support: int = 2
    """Diagnoses a (condition, round) cell needs to count."""

    def __post_init__(self) -> None:
        """Check ranges."""
        if not 0.0 <= self.fixed_rate < self.failing_rate <= 1.0:
            raise ValueError(
                f"RetrievalConfig: need 0 <= fixed_rate ({self.fixed_rate}) < failing_rate ({self.failing_rate}) <= 1"
            )
        if self.min_support < 1:
            raise ValueError(f"RetrievalConfig.min_support={self.min_support} must be >= 1")


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


def array_sha256(array: np.ndarray) -> str:
    """Content hash of an array: its dtype, shape and C-order bytes."""
    digest = hashlib.sha256(f"{array.dtype.str}|{','.join(map(str, array.shape))}|".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _check_round(round: int) -> int:
    if isinstance(round, bool) or not isinstance(round, int | np.integer) or round < 0:
        raise ValueError(f"round={round!r} must be an integer >= 0")
    return int(round)


def _require(data: Mapping[str, Any], key: str, what: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what}[{key!r}] must be a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class _Item:
    """One record to insert: its event fields, its payload and the statement that fills its table."""

    kind: str
    record_id: str
    round: int
    payload: Mapping[str, Any]
    insert: Callable[[sqlite3.Connection, int, str], None]


class MemoryStore:
    """The memory of one run (see the module docstring)."""

    def __init__(self, path: str | Path, *, embedder: object | None = None, wal: bool = True) -> None:
        """Create or open ``path``, apply migrations, and use the WAL journal unless ``wal`` is False.

        ``wal=False`` keeps SQLite's rollback journal for a new file (a file already in WAL mode stays so).
        ``embedder`` embeds diagnosis texts (``embed(list[str]) -> (n, d)``); None creates a
        ``TextEmbedder`` on first need.
        """
        self.path = Path(path).expanduser().resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.blob_dir = self.path.parent / "blobs"
        self.blob_dir.mkdir(exist_ok=True)
        self.retrieval = RetrievalConfig()
        self._embedder = embedder
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
        self._emb_seq = 0
        self._emb: dict[str, Any] = {"seq": [], "id": [], "round": [], "failure": [], "vectors": []}

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> MemoryStore:
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
        items: Sequence[_Item],
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

    def _scene_item(self, round: int, scene: Mapping[str, Any], origin: str, program_id: str) -> _Item:
        scene_id = _require(scene, "scene_id", "scene")
        if not isinstance(origin, str) or not origin:
            raise ValueError(f"origin={origin!r} must be a non-empty string (e.g. generated, probe, eval, open_loop)")
        program = program_id or str(scene.get("generation_program_id", ""))
        family, split = str(scene.get("family", "")), str(scene.get("split", ""))

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute(
                "INSERT INTO scenes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (scene_id, sequence, round, family, split, origin, program, text),
            )

        return _Item(KIND_SCENE, scene_id, round, {**scene, "origin": origin, "program_id": program}, insert)

    def put_scene(self, round: int, scene: dict, *, origin: str, program_id: str = "") -> MemoryRecord:
        """Store a scene (``Scene.to_dict()``) with its origin and the program that asked for it.

        ``program_id`` defaults to the scene's ``generation_program_id``; payload = the scene dict plus
        ``origin`` and ``program_id``.
        """
        return self._put([self._scene_item(_check_round(round), scene, origin, program_id)])[0]

    def put_episode(
        self,
        round: int,
        result: dict,
        keyframes: Sequence[np.ndarray] = (),
        *,
        purpose: str,
        scene: dict | None = None,
    ) -> MemoryRecord:
        """Store an episode (``RecordedEpisode.to_result_dict()``) and its keyframes as blob files.

        Payload = the result plus ``purpose`` and ``keyframe_hashes`` (the blobs, in order). ``scene``,
        when given, is stored in the same transaction (origin = ``purpose``) unless it is already there.
        """
        round = _check_round(round)
        episode_id = _require(result, "episode_id", "result")
        if purpose not in PURPOSES:
            raise ValueError(f"purpose={purpose!r} must be one of {', '.join(PURPOSES)}")
        if "keyframes" in result:
            raise ValueError("result['keyframes'] cannot go into the payload: pass the frames as `keyframes`")
        scene_id = str(result.get("scene_id", ""))
        items: list[_Item] = []
        if scene is not None:
            given = _require(scene, "scene_id", "scene")
            if scene_id and given != scene_id:
                raise ValueError(f"scene['scene_id']={given!r} is not result['scene_id']={scene_id!r}")
            scene_id = given
            items.append(self._scene_item(round, scene, purpose, ""))
        existing = self.get(KIND_EPISODE, episode_id)
        if existing is not None:
            return existing
        blobs = [self._write_blob(frame, f"keyframes[{i}]") for i, frame in enumerate(keyframes)]
        steps = [int(s) for s in result.get("keyframe_steps", [])]
        steps = steps if len(steps) == len(blobs) else [-1] * len(blobs)
        payload = {**result, "scene_id": scene_id, "purpose": purpose, "keyframe_hashes": [b[0] for b in blobs]}
        success, policy = int(bool(result.get("success", False))), str(result.get("policy_version", ""))

        def before(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?, ?, ?)", [(*b, time.time()) for b in blobs]
            )

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute(
                "INSERT INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (episode_id, sequence, round, scene_id, purpose, success, policy, text),
            )
            conn.executemany(
                "INSERT INTO episode_keyframes VALUES (?, ?, ?, ?)",
                [(episode_id, i, b[0], s) for i, (b, s) in enumerate(zip(blobs, steps, strict=True))],
            )

        items.append(_Item(KIND_EPISODE, episode_id, round, payload, insert))
        return self._put(items, before)[-1]

    def _write_blob(self, frame: np.ndarray, what: str) -> tuple[str, str, str, str, int]:
        """Write one keyframe blob atomically (temp file, fsync, rename); return its ``blobs`` row."""
        array = np.asarray(frame)
        if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3 or 0 in array.shape:
            raise ValueError(f"{what} must be a non-empty uint8 (H, W, 3) array, got {array.dtype} {array.shape}")
        sha = array_sha256(array)
        name = f"{sha}.npz"
        target = self.blob_dir / name
        if not target.exists():
            fd, tmp = tempfile.mkstemp(dir=self.blob_dir, prefix=f".{sha[:16]}-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as handle:
                    np.savez_compressed(handle, frame=array)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return sha, name, ",".join(map(str, array.shape)), array.dtype.str, int(array.nbytes)

    def load_keyframes(self, record: MemoryRecord) -> list[np.ndarray]:
        """Return the keyframes of an episode record, each checked against its hash (RuntimeError if one is bad)."""
        if record.kind != KIND_EPISODE:
            raise ValueError(f"load_keyframes needs an episode record, got kind {record.kind!r}")
        frames = []
        for sha in record.payload.get("keyframe_hashes", []):
            file = self.blob_dir / f"{sha}.npz"
            if not file.exists():
                raise RuntimeError(f"episode {record.record_id!r}: keyframe blob {file} is missing")
            try:
                with np.load(file, allow_pickle=False) as data:
                    frame = data["frame"]
            except (OSError, ValueError, KeyError) as exc:
                raise RuntimeError(f"episode {record.record_id!r}: keyframe blob {file} cannot be read: {exc}") from exc
            if array_sha256(frame) != sha:
                raise RuntimeError(f"episode {record.record_id!r}: keyframe blob {file} does not match its hash")
            frames.append(frame)
        return frames

    def put_diagnosis(self, round: int, diagnosis: dict) -> MemoryRecord:
        """Store a diagnosis (``Diagnosis.to_dict()``); its text is embedded for :meth:`similar_diagnoses`.

        A diagnosis without text is embedded by its family, failure mode and failed stage name.
        """
        round = _check_round(round)
        diagnosis_id = _require(diagnosis, "diagnosis_id", "diagnosis")
        mode = _require(diagnosis, "failure_mode", "diagnosis")
        conditions = diagnosis.get("conditions", [])
        if not isinstance(conditions, list) or not all(
            isinstance(c, Mapping) and isinstance(c.get("key"), str) and "value" in c for c in conditions
        ):
            raise ValueError(
                f"diagnosis[{'conditions'!r}] must be a list of {{'key', 'value'}} dicts, got {conditions!r}"
            )
        existing = self.get(KIND_DIAGNOSIS, diagnosis_id)
        if existing is not None:
            return existing
        family = str(diagnosis.get("family", ""))
        text = str(diagnosis.get("text", "")) or f"{family} {mode} {diagnosis.get('failed_stage_name', '')}".strip()
        vector = self._embed([text])[0]

        def insert(conn: sqlite3.Connection, sequence: int, payload: str) -> None:
            conn.execute(
                "INSERT INTO diagnoses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    diagnosis_id,
                    sequence,
                    round,
                    family,
                    mode,
                    int(mode != "success"),
                    text,
                    vector.tobytes(),
                    int(vector.size),
                    payload,
                ),
            )
            conn.executemany(
                "INSERT OR REPLACE INTO diagnosis_conditions VALUES (?, ?, ?)",
                [(diagnosis_id, str(c["key"]), str(c["value"])) for c in conditions],
            )

        return self._put([_Item(KIND_DIAGNOSIS, diagnosis_id, round, dict(diagnosis), insert)])[0]

    def put_program(
        self,
        round: int,
        kind: str,
        program: dict,
        *,
        record_id: str,
        diagnosis_ids: Sequence[str] = (),
    ) -> MemoryRecord:
        """Store a generation, training or potential program and link it to the diagnoses it answers.

        The links are ``diagnosis_ids`` plus the ids the program names itself (allocations'
        ``cause_diagnosis_ids``, ``cause_diagnosis_ids``, ``source_diagnosis_id``); payload = the program
        plus ``diagnosis_ids`` (all links, sorted).
        """
        round = _check_round(round)
        if kind not in PROGRAM_KINDS:
            raise ValueError(f"kind={kind!r} must be one of {', '.join(PROGRAM_KINDS)}")
        if not isinstance(record_id, str) or not record_id:
            raise ValueError(f"record_id={record_id!r} must be a non-empty string")
        links = sorted({str(d) for d in diagnosis_ids} | program_diagnosis_ids(program))

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute("INSERT INTO programs VALUES (?, ?, ?, ?, ?)", (kind, record_id, sequence, round, text))
            conn.executemany(
                "INSERT OR IGNORE INTO program_diagnoses VALUES (?, ?, ?)", [(kind, record_id, d) for d in links]
            )

        return self._put([_Item(kind, record_id, round, {**program, "diagnosis_ids": links}, insert)])[0]

    def put_progress(
        self, round: int, *, family: str, split: str, success: float, episodes: int, policy_version: str
    ) -> MemoryRecord:
        """Store one success rate; record id ``r<round>/<family>/<split>/<policy_version>``."""
        round = _check_round(round)
        if not family or not split:
            raise ValueError(f"family={family!r} and split={split!r} must be non-empty (use 'all' for a total)")
        if not 0.0 <= float(success) <= 1.0:
            raise ValueError(f"success={success} must be in [0, 1]")
        if int(episodes) < 0:
            raise ValueError(f"episodes={episodes} must be >= 0")
        record_id = f"r{round:03d}/{family}/{split}/{policy_version}"
        payload = {
            "round": round,
            "family": family,
            "split": split,
            "success": float(success),
            "episodes": int(episodes),
            "policy_version": policy_version,
        }

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute(
                "INSERT INTO progress VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record_id, sequence, round, family, split, float(success), int(episodes), policy_version, text),
            )

        return self._put([_Item(KIND_PROGRESS, record_id, round, payload, insert)])[0]

    def put_policy_version(
        self, round: int, *, version_id: str, checkpoint_dir: str | Path, parent: str, metrics: dict
    ) -> MemoryRecord:
        """Store a policy version with the SHA-256 of its checkpoint folder (and of every file in it).

        Payload: ``version_id``, ``parent``, ``checkpoint_dir`` (absolute), ``checkpoint_sha256`` (the
        folder), ``files`` ({relative path: sha256}), ``model_sha256`` (``model.safetensors``, the hash
        ``coda_msgs/PolicyVersion`` carries; empty if absent) and ``metrics``.
        """
        round = _check_round(round)
        if not version_id:
            raise ValueError("version_id must be a non-empty string")
        folder = Path(checkpoint_dir).expanduser().resolve()
        existing = self.get(KIND_POLICY_VERSION, version_id)
        if existing is not None:
            return existing
        digest, files = folder_sha256(folder)
        payload = {
            "version_id": version_id,
            "parent": parent,
            "checkpoint_dir": str(folder),
            "checkpoint_sha256": digest,
            "files": files,
            "model_sha256": files.get("model.safetensors", ""),
            "metrics": dict(metrics),
        }

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute(
                "INSERT INTO policy_versions VALUES (?, ?, ?, ?, ?, ?, ?)",
                (version_id, sequence, round, parent, str(folder), digest, text),
            )

        return self._put([_Item(KIND_POLICY_VERSION, version_id, round, payload, insert)])[0]

    def put_critic_version(self, round: int, *, version_id: str, backend: str, info: dict) -> MemoryRecord:
        """Store a critic version (backend and free-form info such as weight hashes and metrics)."""
        round = _check_round(round)
        if not version_id or not backend:
            raise ValueError(f"version_id={version_id!r} and backend={backend!r} must be non-empty")
        payload = {"version_id": version_id, "backend": backend, "info": dict(info)}

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute(
                "INSERT INTO critic_versions VALUES (?, ?, ?, ?, ?)", (version_id, sequence, round, backend, text)
            )

        return self._put([_Item(KIND_CRITIC_VERSION, version_id, round, payload, insert)])[0]

    def put_intervention(self, round: int, *, intervention_id: str, info: dict) -> MemoryRecord:
        """Store an intervention (e.g. a safety stop or an operator's correction on a real arm)."""
        round = _check_round(round)
        if not intervention_id:
            raise ValueError("intervention_id must be a non-empty string")
        payload = {"intervention_id": intervention_id, **dict(info)}

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute("INSERT INTO interventions VALUES (?, ?, ?, ?)", (intervention_id, sequence, round, text))

        return self._put([_Item(KIND_INTERVENTION, intervention_id, round, payload, insert)])[0]

    # ---------------------------------------------------------------- loop bookkeeping
    def finish_step(self, round: int, step: str, outputs: dict) -> None:
        """Mark ``(round, step)`` finished with its outputs (a later call for the same step replaces them)."""
        round = _check_round(round)
        if not step:
            raise ValueError("step must be a non-empty string")
        text = to_json(outputs, f"outputs of step {step!r}")
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO loop_steps VALUES (?, ?, ?, ?)", (round, step, text, time.time()))

    def finished_step(self, round: int, step: str) -> dict | None:
        """Return the outputs of a finished step, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT outputs FROM loop_steps WHERE round = ? AND step = ?", (round, step)).fetchone()
        return None if row is None else json.loads(row[0])

    def finished_steps(self) -> list[tuple[int, str]]:
        """Return every finished (round, step), in the order they finished."""
        with self._read() as conn:
            rows = conn.execute("SELECT round, step FROM loop_steps ORDER BY finished, rowid").fetchall()
        return [(int(r), str(s)) for r, s in rows]

    def record_start(self, first_round: int, provenance: dict) -> int:
        """Record that the run (re)starts at round ``first_round`` with this code (``coda_loop.provenance``).

        Returns the start's number (1 for the first start of the run).
        """
        first_round = _check_round(first_round)
        text = to_json(provenance, "provenance")
        with self._write() as conn:
            cursor = conn.execute("INSERT INTO run_starts (started, first_round, provenance) VALUES (?, ?, ?)",
                                  (time.time(), first_round, text))
            return int(cursor.lastrowid or 0)

    def starts(self) -> list[dict]:
        """Every start of the run, oldest first: ``start_id``, ``started`` (Unix s), ``first_round`` + provenance."""
        with self._read() as conn:
            rows = conn.execute("SELECT start_id, started, first_round, provenance FROM run_starts "
                                "ORDER BY start_id").fetchall()
        return [{"start_id": int(i), "started": float(t), "first_round": int(r), **json.loads(p)}
                for i, t, r, p in rows]

    # ---------------------------------------------------------------- reading
    def get(self, kind: str, record_id: str) -> MemoryRecord | None:
        """Return the record of ``kind`` with ``record_id``, or None."""
        _check_kind(kind, allow_empty=False)
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
        _check_kind(kind, allow_empty=True)
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

    # ---------------------------------------------------------------- retrieval
    def _embed(self, texts: list[str]) -> np.ndarray:
        if self._embedder is None:
            from coda_engine.text_embedding import TextEmbedder

            self._embedder = TextEmbedder(batch_size=1)  # vectors independent of what this store embedded before
        vectors = np.asarray(self._embedder.embed(texts), dtype=np.float32)  # type: ignore[attr-defined]
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"embedder returned shape {vectors.shape} for {len(texts)} texts; expected (n, d)")
        return vectors

    def _embeddings(self) -> dict[str, Any]:
        """Return all diagnosis embeddings, loading the rows written since the last call."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT sequence, diagnosis_id, round, is_failure, embedding, embedding_dim FROM diagnoses "
                "WHERE sequence > ? ORDER BY sequence",
                (self._emb_seq,),
            ).fetchall()
        for seq, diagnosis_id, round_index, failure, blob, dim in rows:
            vector = np.frombuffer(blob, dtype=np.float32)
            if vector.size != dim:
                raise RuntimeError(
                    f"{self.path}: diagnosis {diagnosis_id!r} embedding has {vector.size} values, not {dim}"
                )
            for key, value in (
                ("seq", seq),
                ("id", diagnosis_id),
                ("round", round_index),
                ("failure", failure),
                ("vectors", vector),
            ):
                self._emb[key].append(value)
            self._emb_seq = max(self._emb_seq, int(seq))
        return self._emb

    def similar_diagnoses(
        self,
        text: str,
        limit: int = 5,
        *,
        failures_only: bool = True,
    ) -> list[tuple[MemoryRecord, float]]:
        """Return the stored diagnoses most similar to ``text`` (cosine similarity of embeddings), best first."""
        return self._similar(text, limit, failures_only, -1, -1)

    def _similar(
        self,
        text: str,
        limit: int,
        failures_only: bool,
        round_min: int,
        round_max: int,
    ) -> list[tuple[MemoryRecord, float]]:
        if not isinstance(text, str) or not text.strip():
            raise MemoryQueryError("text must be a non-empty string (the diagnosis text to compare against)")
        if limit < 1:
            raise MemoryQueryError(f"limit={limit} must be >= 1")
        with self._lock:
            emb = self._embeddings()
            if not emb["id"]:
                return []
            query = self._embed([text])[0]
            dims = {v.size for v in emb["vectors"]}
            if dims != {query.size}:
                raise ValueError(
                    f"stored diagnosis embeddings have dimension {sorted(dims)}, the embedder gives "
                    f"{query.size}: the memory was written with another embedder"
                )
            matrix = np.stack(emb["vectors"])
            rounds, failures = np.asarray(emb["round"]), np.asarray(emb["failure"], dtype=bool)
            norms = np.linalg.norm(matrix, axis=1) * max(float(np.linalg.norm(query)), 1e-12)
            scores = matrix @ query / np.maximum(norms, 1e-12)
            keep = np.ones(len(scores), dtype=bool)
            if failures_only:
                keep &= failures
            if round_min >= 0:
                keep &= rounds >= round_min
            if round_max >= 0:
                keep &= rounds <= round_max
            candidates = np.flatnonzero(keep)
            best = candidates[np.argsort(-scores[candidates], kind="stable")][:limit]
            out = []
            for i in best:
                record = self.get(KIND_DIAGNOSIS, emb["id"][i])
                if record is not None:
                    out.append((record, float(scores[i])))
        return out

    def _condition_rates(self) -> dict[tuple[str, str, str], dict[int, tuple[int, int]]]:
        """{(family, key, value): {round: (failures, diagnoses)}} over every stored diagnosis."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT d.family, c.key, c.value, d.round, SUM(d.is_failure), COUNT(*) FROM diagnoses d "
                "JOIN diagnosis_conditions c ON c.diagnosis_id = d.diagnosis_id GROUP BY 1, 2, 3, 4"
            ).fetchall()
        rates: dict[tuple[str, str, str], dict[int, tuple[int, int]]] = defaultdict(dict)
        for family, key, value, round_index, failures, total in rows:
            rates[(str(family), str(key), str(value))][int(round_index)] = (int(failures), int(total))
        return rates

    def fixed_conditions(self) -> list[dict]:
        """Conditions that failed often in an earlier round and rarely in the latest round they were seen.

        Per (family, condition key, value) and round, the failure rate of the diagnoses with that
        condition (rounds with fewer than ``retrieval.min_support`` diagnoses are ignored). Listed when the
        latest round's rate is at most ``retrieval.fixed_rate`` and an earlier round's at least
        ``retrieval.failing_rate`` (the most recent such round is reported). Sorted by family, key, value.
        """
        cfg = self.retrieval
        out = []
        for (family, key, value), by_round in sorted(self._condition_rates().items()):
            seen = sorted((r, f / n) for r, (f, n) in by_round.items() if n >= cfg.min_support)
            if len(seen) < 2 or seen[-1][1] > cfg.fixed_rate:
                continue
            fixed_round, rate_now = seen[-1]
            failing = [(r, rate) for r, rate in seen[:-1] if rate >= cfg.failing_rate]
            if failing:
                failed_round, rate_then = failing[-1]
                out.append(
                    {
                        "family": family,
                        "key": key,
                        "value": value,
                        "failed_round": failed_round,
                        "failure_rate_then": rate_then,
                        "fixed_round": fixed_round,
                        "failure_rate_now": rate_now,
                    }
                )
        return out

    def generation_effect(self, diagnosis_id: str) -> dict:
        """Tell what was generated for a diagnosis and whether success on its conditions rose afterwards.

        Returns ``diagnosis_id``, ``round``, ``family``, ``failure_mode``; ``programs`` (kind, program_id,
        round of every program linked to it); ``scenes`` (count, first ids, count per round of the scenes
        generated by those generation programs) and their ``episodes`` (count, successes, success_rate);
        ``conditions``: per targeted condition (the conditions of the generation allocations that name the
        diagnosis as a cause, else the diagnosis's own conditions except ``family``) the diagnosed success
        rate ``before`` (latest round <= the diagnosis's round) and ``after`` (latest later round), each
        ``{round, success, diagnoses}`` or None; ``helped``: mean success after > before over the conditions
        seen in both (None when there is no later round). MemoryQueryError if the diagnosis is unknown.
        """
        diagnosis = self.get(KIND_DIAGNOSIS, diagnosis_id) if diagnosis_id else None
        if diagnosis is None:
            raise MemoryQueryError(
                f"record_id={diagnosis_id!r} is not a stored diagnosis (generation_effect needs a diagnosis id)"
            )
        with self._read() as conn:
            programs = conn.execute(
                "SELECT p.kind, p.program_id, p.round, p.payload FROM program_diagnoses l JOIN programs p "
                "ON p.kind = l.kind AND p.program_id = l.program_id WHERE l.diagnosis_id = ? ORDER BY p.sequence",
                (diagnosis_id,),
            ).fetchall()
            generation_ids = [pid for kind, pid, _, _ in programs if kind == KIND_GENERATION_PROGRAM]
            marks = ",".join("?" * len(generation_ids))
            scenes = (
                conn.execute(
                    f"SELECT scene_id, round FROM scenes WHERE program_id IN ({marks}) ORDER BY sequence",
                    generation_ids,
                ).fetchall()
                if generation_ids
                else []
            )
            episodes = (
                conn.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(e.success), 0) FROM episodes e JOIN scenes s "
                    f"ON s.scene_id = e.scene_id WHERE s.program_id IN ({marks})",
                    generation_ids,
                ).fetchone()
                if generation_ids
                else (0, 0)
            )
        family = str(diagnosis.payload.get("family", ""))
        targeted: list[tuple[str, str, str]] = []
        for kind, _, _, payload in programs:
            if kind != KIND_GENERATION_PROGRAM:
                continue
            for allocation in json.loads(payload).get("allocations", []):
                if diagnosis_id in allocation.get("cause_diagnosis_ids", []):
                    targeted += [
                        (str(allocation.get("family", family)), str(c["key"]), str(c["value"]))
                        for c in allocation.get("conditions", [])
                        if c.get("key") != "family"
                    ]
        if not targeted:
            targeted = [
                (family, str(c["key"]), str(c["value"]))
                for c in diagnosis.payload.get("conditions", [])
                if c.get("key") != "family"
            ]
        rates = self._condition_rates()
        conditions, gains = [], []
        for group in dict.fromkeys(targeted):
            by_round = rates.get(group, {})

            def cell(rounds: list[int], by_round: dict[int, tuple[int, int]] = by_round) -> dict | None:
                if not rounds:
                    return None
                f, n = by_round[max(rounds)]
                return {"round": max(rounds), "success": 1.0 - f / n, "diagnoses": n}

            before = cell([r for r in by_round if r <= diagnosis.round])
            after = cell([r for r in by_round if r > diagnosis.round])
            if before is not None and after is not None:
                gains.append(after["success"] - before["success"])
            conditions.append(
                {"family": group[0], "key": group[1], "value": group[2], "before": before, "after": after}
            )
        by_round_counts: dict[str, int] = defaultdict(int)
        for _, round_index in scenes:
            by_round_counts[str(round_index)] += 1
        n_episodes, n_success = int(episodes[0]), int(episodes[1])
        return {
            "diagnosis_id": diagnosis_id,
            "round": diagnosis.round,
            "family": family,
            "failure_mode": diagnosis.payload.get("failure_mode", ""),
            "programs": [{"kind": k, "program_id": p, "round": int(r)} for k, p, r, _ in programs],
            "scenes": {
                "count": len(scenes),
                "scene_ids": [s for s, _ in scenes[:50]],
                "by_round": dict(by_round_counts),
            },
            "episodes": {
                "count": n_episodes,
                "successes": n_success,
                "success_rate": n_success / n_episodes if n_episodes else None,
            },
            "conditions": conditions,
            "helped": (float(np.mean(gains)) > 0.0) if gains else None,
        }

    def progress(self) -> list[dict]:
        """Return every progress row, by round, family, split and policy version."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT round, family, split, success, episodes, policy_version FROM progress "
                "ORDER BY round, family, split, policy_version"
            ).fetchall()
        keys = ("round", "family", "split", "success", "episodes", "policy_version")
        return [dict(zip(keys, row, strict=True)) for row in rows]

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
        _check_kind(kind, allow_empty=True)
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


def _check_kind(kind: str, *, allow_empty: bool) -> None:
    if (kind or not allow_empty) and kind not in KINDS:
        raise MemoryQueryError(
            f"kind={kind!r} is not a record kind; allowed: {', '.join(KINDS)}"
            + (" (or empty for all)" if allow_empty else "")
        )


def program_diagnosis_ids(program: Mapping[str, Any]) -> set[str]:
    """Return the diagnosis ids a program names itself.

    They are its own and its allocations' ``cause_diagnosis_ids`` and its potentials' ``source_diagnosis_id``.
    """
    ids = {str(d) for d in program.get("cause_diagnosis_ids", [])}
    for allocation in program.get("allocations", []):
        ids.update(str(d) for d in allocation.get("cause_diagnosis_ids", []))
    for potential in [program, *program.get("potentials", [])]:
        if potential.get("source_diagnosis_id"):
            ids.add(str(potential["source_diagnosis_id"]))
    return ids
