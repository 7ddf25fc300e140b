# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Seeded mutations of a valid YAML file, for the property tests of the files users write by hand.

``mutations(data, rng, n)`` yields ``n`` hostile variants of the parsed file ``data``: a field set to a boundary or
wrong-typed value (empty, huge, negative, NaN, inf, a list, a mapping, text), a field removed, an unknown field
added, a list grown or cut, and whole-text damage (non-UTF-8 bytes, a cut, deep nesting, an alias bomb). Each
variant says which field it touched, so a test can check that a refusal names it. Loaded with the
``engine_test_helpers`` fixture (``conftest.load_test_module``) by the robot, fleet and suite file tests, which
check each loader with :func:`loader_contract`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml

DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
HOSTILE: tuple[Any, ...] = (
    None, "", " ", "x" * 5_000, "1e-3", "é🤖", "\x00", -1, 0, 1, -(10**30), 10**400, 2**63, 2**64, -(2**63) - 1,
    1.0e308, -1.0e-308, math.nan, math.inf, -math.inf, True, False, [], {}, [0.0] * 50, [[1, 2], [3]],
    {"nested": {"deeper": [1]}}, "08:00-18:00", "/ns/topic",
)
"""Values a field is set to: boundaries, wrong types, huge and non-finite numbers."""
NAMED = frozenset({"set", "remove", "add", "resize", "aliases"})
"""Mutations whose refusal must name the field they touched (the others damage the YAML text itself)."""
ALIAS_BOMB = (
    "[&a [x, x, x, x, x, x, x, x, x], "
    + ", ".join(f"&b{i} [{', '.join([f'*b{i - 1}' if i else '*a'] * 9)}]" for i in range(6))
    + "]"
)
"""A flow list whose last item nests seven levels of nine aliases: under 1 kB of text for 9**7 strings (shared,
as long as nothing walks them all)."""


class Variant(NamedTuple):
    """One mutated file."""

    kind: str
    """What was done (``set``, ``remove``, ``add``, ``resize``, ``bytes``, ``cut``, ``nest``, ``aliases``)."""
    path: tuple[Any, ...]
    """Where, as keys and indices into the parsed file (empty for whole-text damage)."""
    text: bytes
    """The file's new content."""

    @property
    def field(self) -> str:
        """Return the innermost mapping key on the path ('' when there is none): what a refusal must name."""
        keys = [k for k in self.path if isinstance(k, str)]
        return keys[-1] if keys else ""


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            out.append((*prefix, key))
            out += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out.append((*prefix, i))
            out += _paths(value, (*prefix, i))
    return out


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def _copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_copy(v) for v in data]
    return data


def _dump(data: Any) -> bytes:
    return yaml.dump(data, Dumper=DUMPER, sort_keys=False, allow_unicode=True, width=1_000_000).encode()


def _placeholder(data: Any, path: tuple[Any, ...], marker: str) -> bytes:
    """Dump ``data`` with the value at ``path`` replaced by ``marker`` (to be swapped for raw YAML text)."""
    copy = _copy(data)
    _get(copy, path[:-1])[path[-1]] = marker
    return _dump(copy).replace(f"'{marker}'".encode(), marker.encode())  # the dumper quotes a leading '@'


def mutations(data: dict[str, Any], rng: np.random.Generator, n: int) -> Iterator[Variant]:
    """Yield ``n`` variants of ``data`` (see the module docstring), chosen by ``rng``."""
    paths = _paths(data)
    mappings = [p for p in [(), *paths] if isinstance(_get(data, p), dict)]
    lists = [p for p in paths if isinstance(_get(data, p), list)]
    original = _dump(data)
    kinds = ("set", "set", "set", "set", "remove", "add", "resize", "bytes", "cut", "nest", "aliases")
    for _ in range(n):
        kind = kinds[int(rng.integers(len(kinds)))]
        path = paths[int(rng.integers(len(paths)))]
        if kind == "set":
            copy = _copy(data)
            _get(copy, path[:-1])[path[-1]] = _copy(HOSTILE[int(rng.integers(len(HOSTILE)))])
            yield Variant(kind, path, _dump(copy))
        elif kind == "remove":
            copy = _copy(data)
            del _get(copy, path[:-1])[path[-1]]
            yield Variant(kind, path, _dump(copy))
        elif kind == "add":
            where = mappings[int(rng.integers(len(mappings)))]
            copy = _copy(data)
            _get(copy, where)["unexpected_key"] = 1
            yield Variant(kind, (*where, "unexpected_key"), _dump(copy))
        elif kind == "resize" and lists:
            where = lists[int(rng.integers(len(lists)))]
            copy = _copy(data)
            items = _get(copy, where)
            if items and rng.random() < 0.5:
                items.pop(int(rng.integers(len(items))))
            else:
                items.append(_copy(items[0]) if items else 0)
            yield Variant(kind, where, _dump(copy))
        elif kind == "bytes":
            at = int(rng.integers(len(original) + 1))
            junk = bytes(rng.choice([0x80, 0xC3, 0xED, 0xA0, 0xFF, 0xFE, 0x00, 0x1B], size=int(rng.integers(1, 4))))
            yield Variant(kind, (), original[:at] + junk + original[at:])
        elif kind == "cut":
            yield Variant(kind, (), original[: int(rng.integers(len(original)))])
        elif kind == "nest":
            depth = int(rng.integers(500, 5000))
            text = _placeholder(data, path, "@@NEST@@").replace(b"@@NEST@@", b"[" * depth + b"]" * depth)
            yield Variant(kind, path, text)
        else:
            text = _placeholder(data, path, "@@BOMB@@")
            yield Variant("aliases", path, text.replace(b"@@BOMB@@", ALIAS_BOMB.encode()))


def finite_numbers(value: Any) -> bool:
    """Tell whether every number inside ``value`` (nested dicts, lists, tuples, to any depth) is finite."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return False
    return True


def loader_contract(data: dict[str, Any], rng: np.random.Generator, n: int, folder: Path,
                    load: Callable[[Path], Any], error: type[Exception], check_loaded: Callable[[Any], list[str]],
                    names: Callable[[Variant, str], bool] | None = None) -> tuple[list[str], dict[str, int]]:
    """Write ``n`` mutations of ``data`` under ``folder`` and load each with ``load``; return (problems, outcomes).

    The contract: a variant loads (then ``check_loaded(obj)`` lists what is wrong with it) or is refused with
    ``error`` whose message names the file and, for the ``NAMED`` kinds, the field (``names(variant, message)``
    when a loader names some fields otherwise), in at most 1,000 characters; either way within 2 s of CPU time.
    Anything else is a problem. ``outcomes`` counts the loaded and the refused variants.
    """
    problems: list[str] = []
    outcomes = {"loaded": 0, "refused": 0}
    for i, variant in enumerate(mutations(data, rng, n)):
        path = folder / f"variant{i:03d}.yaml"
        path.write_bytes(variant.text)
        what = f"{variant.kind} {list(variant.path)}"
        start = time.process_time()  # CPU time of the load: a busy machine does not lengthen it
        try:
            loaded = load(path)
        except error as exc:
            message = str(exc)
            outcomes["refused"] += 1
            if str(path) not in message:
                problems.append(f"{what}: the message does not name the file: {message[:200]}")
            named = variant.field in message or (names is not None and names(variant, message))
            if variant.kind in NAMED and not named:
                problems.append(f"{what}: the message does not name {variant.field!r}: {message[:200]}")
            if len(message) > 1000:
                problems.append(f"{what}: a message of {len(message)} characters")
        except Exception as exc:  # the finding: anything but the module's error
            problems.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]}")
        else:
            outcomes["loaded"] += 1
            problems += [f"{what}: {problem}" for problem in check_loaded(loaded)]
        if time.process_time() - start > 2.0:
            problems.append(f"{what}: took {time.process_time() - start:.1f} s of CPU")
    return problems, outcomes
