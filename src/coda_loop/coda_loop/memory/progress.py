# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What the loop learned: success rates per round, family and split, and the policy and critic versions.

A policy version is stored with the SHA-256 of its checkpoint folder and of every file in it. Pure: no rclpy.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from coda_engine.digests import folder_sha256
from coda_loop.memory.records import MemoryRecord, RecordFile, RecordItem, check_round
from coda_loop.memory.schema import KIND_CRITIC_VERSION, KIND_POLICY_VERSION, KIND_PROGRESS


class ProgressRecords(RecordFile):
    """Progress rows, policy and critic versions (part of :class:`~coda_loop.memory.store.MemoryStore`)."""

    def put_progress(
        self, round: int, *, family: str, split: str, success: float, episodes: int, policy_version: str
    ) -> MemoryRecord:
        """Store one success rate; record id ``r<round>/<family>/<split>/<policy_version>``."""
        round = check_round(round)
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

        return self._put([RecordItem(KIND_PROGRESS, record_id, round, payload, insert)])[0]

    def progress(self) -> list[dict]:
        """Return every progress row, by round, family, split and policy version."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT round, family, split, success, episodes, policy_version FROM progress "
                "ORDER BY round, family, split, policy_version"
            ).fetchall()
        keys = ("round", "family", "split", "success", "episodes", "policy_version")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def put_policy_version(
        self, round: int, *, version_id: str, checkpoint_dir: str | Path, parent: str, metrics: dict
    ) -> MemoryRecord:
        """Store a policy version with the SHA-256 of its checkpoint folder (and of every file in it).

        Payload: ``version_id``, ``parent``, ``checkpoint_dir`` (absolute), ``checkpoint_sha256`` (the
        folder), ``files`` ({relative path: sha256}), ``model_sha256`` (``model.safetensors``, the hash
        ``coda_msgs/PolicyVersion`` carries; empty if absent) and ``metrics``.
        """
        round = check_round(round)
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

        return self._put([RecordItem(KIND_POLICY_VERSION, version_id, round, payload, insert)])[0]

    def put_critic_version(self, round: int, *, version_id: str, backend: str, info: dict) -> MemoryRecord:
        """Store a critic version (backend and free-form info such as weight hashes and metrics)."""
        round = check_round(round)
        if not version_id or not backend:
            raise ValueError(f"version_id={version_id!r} and backend={backend!r} must be non-empty")
        payload = {"version_id": version_id, "backend": backend, "info": dict(info)}

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute(
                "INSERT INTO critic_versions VALUES (?, ?, ?, ?, ?)", (version_id, sequence, round, backend, text)
            )

        return self._put([RecordItem(KIND_CRITIC_VERSION, version_id, round, payload, insert)])[0]
