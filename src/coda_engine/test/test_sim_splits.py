# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Named splits: the training generator never reads the OOD data files; OOD scenes differ as documented."""

import sys

import numpy as np
import pytest
import yaml

from coda_engine.sim import vocab
from coda_engine.sim.families import FAMILIES
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams

_OPENED: list[str] = []
_RECORDING = [False]


def _hook(event, args):
    if _RECORDING[0] and event == "open" and args and isinstance(args[0], str | bytes):
        _OPENED.append(str(args[0]))


sys.addaudithook(_hook)


def _opened_while(fn):
    vocab.load_vocabulary.cache_clear()
    _OPENED.clear()
    _RECORDING[0] = True
    try:
        fn()
    finally:
        _RECORDING[0] = False
    return list(_OPENED)


def test_training_generation_never_reads_ood_files():
    rng = np.random.default_rng(0)
    opened = _opened_while(lambda: [generate(f, rng) for f in FAMILIES])
    assert any(p.endswith("train.yaml") for p in opened)
    assert not [p for p in opened if str(vocab.OOD_DIR) in p]


def test_ood_split_reads_its_own_file_only():
    opened = _opened_while(lambda: generate("reach", np.random.default_rng(0), SceneParams(split="position")))
    ood = {p for p in opened if str(vocab.OOD_DIR) in p}
    assert ood == {str(vocab.OOD_DIR / "position.yaml")}


def test_position_split_places_objects_outside_training_region():
    x0, x1, y0, y1 = yaml.safe_load(vocab.TRAIN_FILE.read_text())["regions"]["objects"]
    rng = np.random.default_rng(1)
    for family in ("reach", "stack"):
        scene = generate(family, rng, SceneParams(split="position"))
        for obj in scene.objects:
            x, y = obj.position[:2]
            assert not (x0 < x < x1 and y0 < y < y1), (obj.name, x, y)


def test_object_split_uses_unseen_colours_and_sizes():
    train = yaml.safe_load(vocab.TRAIN_FILE.read_text())
    scene = generate("reach", np.random.default_rng(2), SceneParams(split="object"))
    assert scene.target.color_name not in train["colors"]
    assert "split:object" in scene.perturbation_tags


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_instruction_split_uses_held_out_phrasing(family):
    train = yaml.safe_load(vocab.TRAIN_FILE.read_text())
    rng = np.random.default_rng(3)
    stems = {t.split("{")[0] for t in train["templates"][family]}
    for _ in range(3):
        text = generate(family, rng, SceneParams(split="instruction")).instruction
        assert not any(text.startswith(s) for s in stems), text


def test_distractor_split_has_more_distractors():
    rng = np.random.default_rng(4)
    counts = [len(generate("pick_place", rng, SceneParams(split="distractor")).distractors) for _ in range(3)]
    assert min(counts) >= 3
