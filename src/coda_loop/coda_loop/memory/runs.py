# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The run's own bookkeeping: finished loop steps (what ``--resume`` skips) and every start with its code.

A finished step is stored with its typed result (:mod:`coda_loop.step_results`) and read back as that type.

Pure: no rclpy.
"""

from __future__ import annotations

import json
import time
from typing import TypeVar

from coda_loop.memory.records import RecordFile, check_round, to_json
from coda_loop.step_results import StepResult

S = TypeVar("S", bound=StepResult)


class RunRecords(RecordFile):
    """Finished steps and starts of the run (part of :class:`~coda_loop.memory.store.MemoryStore`)."""

    def finish_step(self, round: int, result: StepResult) -> None:
        """Mark ``(round, result.STEP)`` finished with its result (a later call for the same step replaces it)."""
        round = check_round(round)
        if not isinstance(result, StepResult):
            raise ValueError(f"finish_step takes a step result (coda_loop.step_results), got {type(result).__name__}")
        text = to_json(result.to_dict(), f"result of step {result.STEP!r}")
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO loop_steps VALUES (?, ?, ?, ?)",
                         (round, result.STEP, text, time.time()))

    def finished_step(self, round: int, kind: type[S]) -> S | None:
        """Return the result of step ``kind.STEP`` of ``round`` read as ``kind`` (any stored schema), or None.

        ``StepResultError`` names the round and step when the stored result does not fit ``kind``.
        """
        with self._read() as conn:
            row = conn.execute("SELECT outputs FROM loop_steps WHERE round = ? AND step = ?",
                               (round, kind.STEP)).fetchone()
        return None if row is None else kind.read(json.loads(row[0]), f"round {round} step {kind.STEP!r}")

    def finished_steps(self) -> list[tuple[int, str]]:
        """Return every finished (round, step), in the order they finished."""
        with self._read() as conn:
            rows = conn.execute("SELECT round, step FROM loop_steps ORDER BY finished, rowid").fetchall()
        return [(int(r), str(s)) for r, s in rows]

    def step_times(self) -> list[tuple[int, str, float]]:
        """Return every finished (round, step, Unix time it finished), in the order they finished."""
        with self._read() as conn:
            rows = conn.execute("SELECT round, step, finished FROM loop_steps ORDER BY finished, rowid").fetchall()
        return [(int(r), str(s), float(t)) for r, s, t in rows]

    def record_start(self, first_round: int, provenance: dict) -> int:
        """Record that the run (re)starts at round ``first_round`` with this code (``coda_loop.provenance``).

        Returns the start's number (1 for the first start of the run).
        """
        first_round = check_round(first_round)
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
