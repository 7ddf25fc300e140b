# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Vocabularies and regions of the generator, read from ``coda_engine/data/sim``.

``train.yaml`` holds everything the ``id`` split uses. Each OOD split adds one file of ``ood/``;
:func:`load_vocabulary` reads an OOD file only when that split is asked for, so generating training
scenes never touches held-out vocabularies or regions (``test_sim_splits.py`` checks the file opens).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "sim"
TRAIN_FILE = DATA_DIR / "train.yaml"
OOD_DIR = DATA_DIR / "ood"


@dataclass(frozen=True)
class Vocabulary:
    """Everything a split draws from."""

    split: str
    """Split name."""
    colors: dict[str, tuple[float, float, float, float]]
    """Colour word -> RGBA."""
    color_jitter: float
    """Uniform RGB noise added to each colour."""
    nouns: dict[str, list[str]]
    """Shape name -> words naming it (the first is canonical)."""
    size_scale: tuple[float, float]
    """Multiplier range on nominal sizes."""
    exclude_size_range: tuple[float, float] | None
    """Scales inside this range are excluded (OOD sizes), or None."""
    mass: tuple[float, float]
    """Mass range, kg."""
    friction: tuple[float, float]
    """Sliding friction range."""
    object_region: tuple[float, float, float, float]
    """Sampling box of movable objects: x_min, x_max, y_min, y_max (m)."""
    goal_region: tuple[float, float, float, float]
    """Sampling box of goals (bins, regions, base cubes)."""
    exclude_region: tuple[float, float, float, float] | None
    """Positions inside this box (grown by ``shift_min``) are excluded (OOD positions), or None."""
    shift_min: float
    """Margin of ``exclude_region``, m."""
    num_distractors: tuple[int, int]
    """Inclusive range."""
    confusable_distractors: bool
    """Distractors deliberately share the target's colour or shape."""
    referring: tuple[str, ...]
    """Referring modes."""
    templates: dict[str, list[str]]
    """Family -> instruction templates with ``{target}`` and ``{goal}``."""
    synonyms: dict[str, list[str]]
    """Word -> alternatives."""


def _read(path: Path) -> dict[str, Any]:
    with path.open() as stream:
        return yaml.safe_load(stream) or {}


@functools.cache
def load_vocabulary(split: str) -> Vocabulary:
    """Return the vocabulary of ``split``: ``train.yaml``, plus ``ood/<split>.yaml`` for an OOD split."""
    from coda_engine.sim.scene import SPLITS

    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    data = _read(TRAIN_FILE)
    train_region = tuple(data["regions"]["objects"])
    train_scale = tuple(data["size_scale"])
    exclude_region = None
    exclude_scale = None
    if split != "id":
        extra = _read(OOD_DIR / f"{split}.yaml")
        if extra.pop("exclude_training_region", False):
            exclude_region = train_region
        if extra.pop("exclude_training_size_scale", False):
            exclude_scale = train_scale
        if "templates" in extra:
            data["train_templates"] = data["templates"]
        data.update(extra)
    return Vocabulary(
        split=split,
        colors={k: tuple(v) for k, v in data["colors"].items()},  # type: ignore[misc]
        color_jitter=float(data["color_jitter"]),
        nouns={k: list(v) for k, v in data["nouns"].items()},
        size_scale=tuple(data["size_scale"]),  # type: ignore[arg-type]
        exclude_size_range=exclude_scale,  # type: ignore[arg-type]
        mass=tuple(data["mass"]),  # type: ignore[arg-type]
        friction=tuple(data["friction"]),  # type: ignore[arg-type]
        object_region=tuple(data["regions"]["objects"]),  # type: ignore[arg-type]
        goal_region=tuple(data["regions"]["goals"]),  # type: ignore[arg-type]
        exclude_region=exclude_region,  # type: ignore[arg-type]
        shift_min=float(data.get("shift_min", 0.0)),
        num_distractors=tuple(data["num_distractors"]),  # type: ignore[arg-type]
        confusable_distractors=bool(data.get("confusable_distractors", False)),
        referring=tuple(data["referring"]),
        templates={k: list(v) for k, v in data["templates"].items()},
        synonyms={k: list(v) for k, v in (data.get("synonyms") or {}).items()},
    )
