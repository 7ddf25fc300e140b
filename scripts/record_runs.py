#!/usr/bin/env python3
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""A development record keyed ``seed<k>_<name>`` as the ``runs`` of a results.json, so ``coda compare`` reads it.

    python scripts/record_runs.py docs/results/bench-state-expert.json --out runs/state-expert.json
    coda compare --arm runs/state-expert.json:corrective --control runs/state-expert.json:open_loop

Two early development records (``docs/results/bench-state-expert.json``, ``docs/results/bench-dev-variants.json``)
keep one entry per run, ``{"seed0_corrective": {"method": ..., "seed": 0, "changes_from_bench": ..., "record":
{..., "outcomes": ...}}}``, from before ``coda experiment`` wrote ``runs``. This writes
``{"runs": {"corrective": {"0": record}}, "from": RECORD}``: the run's name (the key after ``seed<k>_``) becomes the
method name ``coda compare FILE:NAME`` asks for. Pure standard library; nothing is recomputed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

KEY = re.compile(r"seed(\d+)_(\w+)")
"""A run's key in such a record: its seed, then its name."""


def as_runs(record: dict[str, Any], source: str = "") -> dict[str, Any]:
    """Return ``{"runs": {name: {seed: record}}}`` of a record keyed ``seed<k>_<name>``; ValueError names a bad key."""
    runs: dict[str, dict[str, Any]] = {}
    for key, entry in record.items():
        match = KEY.fullmatch(key)
        if not match or not isinstance(entry, dict) or not isinstance(entry.get("record"), dict):
            raise ValueError(f"{source or 'record'}: {key!r} is not a seed<k>_<name> entry holding a 'record'")
        seed, name = match.groups()
        if str(entry.get("seed", seed)) != seed:
            raise ValueError(f"{source or 'record'}: {key!r} says seed {entry.get('seed')!r}")
        runs.setdefault(name, {})[seed] = entry["record"]
    if not runs:
        raise ValueError(f"{source or 'record'}: no runs")
    return {"runs": runs, "from": source}


def main(argv: list[str] | None = None) -> int:
    """Write the reshaped record to ``--out`` (or print it) and list its runs on stderr."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path, help="a development record keyed seed<k>_<name>")
    parser.add_argument("--out", type=Path, help="results.json to write (default: print it)")
    args = parser.parse_args(argv)
    try:
        result = as_runs(json.loads(args.record.read_text()), str(args.record))
    except (OSError, ValueError) as error:
        print(f"record_runs: {error}", file=sys.stderr)
        return 2
    text = json.dumps(result)
    if args.out is None:
        print(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    names = ", ".join(f"{name} (seeds {', '.join(sorted(seeds))})" for name, seeds in result["runs"].items())
    print(f"{args.out or 'stdout'}: {names}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
