# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Files a run folder holds, written so that a killed run never leaves half a file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def atomic_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and an atomic rename."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)
