# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The memory's SQLite schema: record kinds, their tables, and the ordered list of migrations.

``MIGRATIONS[i]`` brings a database from version ``i`` to ``i + 1``; the ``schema_version`` table holds
one row per applied migration. A new version is one more entry appended to the list (never edit an
applied one). Pure module: no rclpy.
"""

from __future__ import annotations

from dataclasses import dataclass

KIND_SCENE = "scene"
KIND_EPISODE = "episode"
KIND_DIAGNOSIS = "diagnosis"
KIND_GENERATION_PROGRAM = "generation_program"
KIND_TRAINING_PROGRAM = "training_program"
KIND_POTENTIAL_PROGRAM = "potential_program"
KIND_PROGRESS = "progress"
KIND_POLICY_VERSION = "policy_version"
KIND_CRITIC_VERSION = "critic_version"
KIND_INTERVENTION = "intervention"
KINDS: tuple[str, ...] = (
    KIND_SCENE,
    KIND_EPISODE,
    KIND_DIAGNOSIS,
    KIND_GENERATION_PROGRAM,
    KIND_TRAINING_PROGRAM,
    KIND_POTENTIAL_PROGRAM,
    KIND_PROGRESS,
    KIND_POLICY_VERSION,
    KIND_CRITIC_VERSION,
    KIND_INTERVENTION,
)
"""Every record kind (the ``KIND_*`` strings of ``coda_msgs/MemoryEvent``)."""
PROGRAM_KINDS: tuple[str, ...] = (KIND_GENERATION_PROGRAM, KIND_TRAINING_PROGRAM, KIND_POTENTIAL_PROGRAM)
"""Kinds stored in the ``programs`` table."""


@dataclass(frozen=True)
class KindTable:
    """Where the records of one kind live."""

    table: str
    """Table name (also the ``<table>`` part of record URIs)."""
    id_column: str
    """Column holding the record id."""
    kind_column: str = ""
    """Column holding the kind when several kinds share the table (programs)."""


TABLES: dict[str, KindTable] = {
    KIND_SCENE: KindTable("scenes", "scene_id"),
    KIND_EPISODE: KindTable("episodes", "episode_id"),
    KIND_DIAGNOSIS: KindTable("diagnoses", "diagnosis_id"),
    KIND_GENERATION_PROGRAM: KindTable("programs", "program_id", "kind"),
    KIND_TRAINING_PROGRAM: KindTable("programs", "program_id", "kind"),
    KIND_POTENTIAL_PROGRAM: KindTable("programs", "program_id", "kind"),
    KIND_PROGRESS: KindTable("progress", "progress_id"),
    KIND_POLICY_VERSION: KindTable("policy_versions", "version_id"),
    KIND_CRITIC_VERSION: KindTable("critic_versions", "version_id"),
    KIND_INTERVENTION: KindTable("interventions", "intervention_id"),
}
"""Table of every kind. Every record table has ``sequence`` (its row in ``events``), ``round`` and ``payload``."""

_V1 = """
CREATE TABLE IF NOT EXISTS events (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    record_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    payload_json TEXT NOT NULL,
    created REAL NOT NULL,
    UNIQUE (kind, record_id)
);
CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT PRIMARY KEY,
    file TEXT NOT NULL,
    shape TEXT NOT NULL,
    dtype TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS scenes (
    scene_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL REFERENCES events(sequence),
    round INTEGER NOT NULL,
    family TEXT NOT NULL,
    split TEXT NOT NULL,
    origin TEXT NOT NULL,
    program_id TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS scenes_program ON scenes(program_id);
CREATE TABLE IF NOT EXISTS episodes (
    episode_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL REFERENCES events(sequence),
    round INTEGER NOT NULL,
    scene_id TEXT NOT NULL,
    purpose TEXT NOT NULL,
    success INTEGER NOT NULL,
    policy_version TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS episodes_scene ON episodes(scene_id);
CREATE TABLE IF NOT EXISTS episode_keyframes (
    episode_id TEXT NOT NULL REFERENCES episodes(episode_id),
    idx INTEGER NOT NULL,
    sha256 TEXT NOT NULL REFERENCES blobs(sha256),
    step INTEGER NOT NULL,
    PRIMARY KEY (episode_id, idx)
);
CREATE TABLE IF NOT EXISTS diagnoses (
    diagnosis_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL REFERENCES events(sequence),
    round INTEGER NOT NULL,
    family TEXT NOT NULL,
    failure_mode TEXT NOT NULL,
    is_failure INTEGER NOT NULL,
    text TEXT NOT NULL,
    embedding BLOB NOT NULL,
    embedding_dim INTEGER NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS diagnosis_conditions (
    diagnosis_id TEXT NOT NULL REFERENCES diagnoses(diagnosis_id),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (diagnosis_id, key)
);
CREATE INDEX IF NOT EXISTS diagnosis_conditions_kv ON diagnosis_conditions(key, value);
CREATE TABLE IF NOT EXISTS programs (
    kind TEXT NOT NULL,
    program_id TEXT NOT NULL,
    sequence INTEGER NOT NULL REFERENCES events(sequence),
    round INTEGER NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (kind, program_id)
);
CREATE TABLE IF NOT EXISTS program_diagnoses (
    kind TEXT NOT NULL,
    program_id TEXT NOT NULL,
    diagnosis_id TEXT NOT NULL,
    PRIMARY KEY (kind, program_id, diagnosis_id)
);
CREATE INDEX IF NOT EXISTS program_diagnoses_diagnosis ON program_diagnoses(diagnosis_id);
CREATE TABLE IF NOT EXISTS progress (
    progress_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL REFERENCES events(sequence),
    round INTEGER NOT NULL,
    family TEXT NOT NULL,
    split TEXT NOT NULL,
    success REAL NOT NULL,
    episodes INTEGER NOT NULL,
    policy_version TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS policy_versions (
    version_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL REFERENCES events(sequence),
    round INTEGER NOT NULL,
    parent TEXT NOT NULL,
    checkpoint_dir TEXT NOT NULL,
    checkpoint_sha256 TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS critic_versions (
    version_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL REFERENCES events(sequence),
    round INTEGER NOT NULL,
    backend TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS interventions (
    intervention_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL REFERENCES events(sequence),
    round INTEGER NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS loop_steps (
    round INTEGER NOT NULL,
    step TEXT NOT NULL,
    outputs TEXT NOT NULL,
    finished REAL NOT NULL,
    PRIMARY KEY (round, step)
);
"""


@dataclass(frozen=True)
class Migration:
    """One schema step."""

    version: int
    """Version the database has after this step."""
    description: str
    """What the step does (stored in ``schema_version``)."""
    sql: str
    """Statements run in the step's transaction (``executescript`` is not used: it would commit early)."""

    def statements(self) -> list[str]:
        """Return the SQL split into single statements."""
        return [s.strip() for s in self.sql.split(";") if s.strip()]


_V2 = """
CREATE TABLE IF NOT EXISTS run_starts (
    start_id INTEGER PRIMARY KEY AUTOINCREMENT,
    started REAL NOT NULL,
    first_round INTEGER NOT NULL,
    provenance TEXT NOT NULL
);
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "records, events, blobs, loop steps", _V1),
    Migration(2, "run starts with the code they ran (coda_loop.provenance)", _V2),
)
"""Ordered migrations; ``MIGRATIONS[-1].version`` is the version this code writes."""
LATEST_VERSION = MIGRATIONS[-1].version

SCHEMA_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied REAL NOT NULL
)
"""
