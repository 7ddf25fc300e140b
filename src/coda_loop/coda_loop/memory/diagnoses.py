# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Diagnoses and retrieval over them: text embeddings for similar failures, conditions that were fixed.

A diagnosis's text is embedded (MiniLM, float32 BLOB) when it is stored; :meth:`DiagnosisRecords.similar_diagnoses`
ranks stored ones by cosine similarity. :meth:`DiagnosisRecords.fixed_conditions` reads the diagnosed failure rate
of each (family, condition) per round. Pure: no rclpy.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from coda_loop.memory.records import MemoryQueryError, MemoryRecord, RecordFile, RecordItem, check_round, require_text
from coda_loop.memory.schema import KIND_DIAGNOSIS


class TextEmbedderLike(Protocol):
    """What the store needs of an embedder (``coda_engine.text_embedding.TextEmbedder`` is one)."""

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return one row per text."""


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


class DiagnosisRecords(RecordFile):
    """Diagnoses, their embeddings and retrieval (part of :class:`~coda_loop.memory.store.MemoryStore`)."""

    def __init__(self, path: str | Path, *, embedder: object | None = None, wal: bool = True) -> None:
        """Open the memory (:class:`RecordFile`); ``embedder`` embeds diagnosis texts (None: MiniLM on first need)."""
        super().__init__(path, wal=wal)
        self.retrieval = RetrievalConfig()
        self._embedder = embedder
        self._emb_seq = 0
        self._emb: dict[str, Any] = {"seq": [], "id": [], "round": [], "failure": [], "vectors": []}

    def put_diagnosis(self, round: int, diagnosis: dict) -> MemoryRecord:
        """Store a diagnosis (``Diagnosis.to_dict()``); its text is embedded for :meth:`similar_diagnoses`.

        A diagnosis without text is embedded by its family, failure mode and failed stage name.
        """
        round = check_round(round)
        diagnosis_id = require_text(diagnosis, "diagnosis_id", "diagnosis")
        mode = require_text(diagnosis, "failure_mode", "diagnosis")
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

        return self._put([RecordItem(KIND_DIAGNOSIS, diagnosis_id, round, dict(diagnosis), insert)])[0]

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
