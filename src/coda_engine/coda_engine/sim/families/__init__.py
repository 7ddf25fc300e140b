# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The four task families, one module each; ``FAMILIES`` maps a family name to its definition."""

from __future__ import annotations

from coda_engine.sim.families import pick_place, push, reach, stack
from coda_engine.sim.families.base import TaskFamily, WorldState

FAMILIES: dict[str, TaskFamily] = {
    "reach": reach.FAMILY,
    "pick_place": pick_place.FAMILY,
    "push": push.FAMILY,
    "stack": stack.FAMILY,
}


def get_family(name: str) -> TaskFamily:
    """Return the family called ``name``; ValueError naming the known families otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown task family {name!r}; expected one of {sorted(FAMILIES)}") from None


__all__ = ["FAMILIES", "TaskFamily", "WorldState", "get_family"]
