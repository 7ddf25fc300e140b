# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Metrics log: one JSON object per line (``metrics.jsonl``), easy to load into a plot."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class MetricsLog:
    """Append-only JSONL writer; every record gets ``kind`` and the wall time ``time`` (s since the epoch)."""

    def __init__(self, path: Path | str, append: bool = False) -> None:
        """Open ``path`` (truncated unless ``append``)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a" if append else "w")

    def write(self, kind: str, **values: Any) -> None:
        """Write one record and flush it."""
        record = {"kind": kind, "time": round(time.time(), 3), **values}
        self._file.write(json.dumps(record, default=float) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def read_metrics(path: Path | str, kind: str | None = None) -> list[dict[str, Any]]:
    """Return the records of a metrics file (only those of ``kind`` if given)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r for r in rows if kind is None or r["kind"] == kind]
