# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Paired comparison of two methods on the same held-out scenes: the difference and its bootstrap interval.

Every method of an experiment starts from the same round-0 policy of its seed and is scored on the same
held-out scenes, so the per-scene outcomes of two methods pair up. :func:`paired_difference` returns the
difference of their OOD means (a - b: mean over seeds of the mean over splits of the mean over scenes) and a
percentile interval from a crossed bootstrap: each replicate draws seeds with replacement and, within each
split, scenes with replacement (the same drawn scenes for every drawn seed, since a scene is the same for all
seeds). Both sources of variation, which seeds and which scenes, are in the interval. Pure module: no rclpy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Outcomes = Mapping[str, Mapping[str, int]]
"""split -> scene id -> success (0/1) of one run."""


def paired_difference(a: Mapping[int, Outcomes], b: Mapping[int, Outcomes], splits: Sequence[str],
                      rng: np.random.Generator, n_boot: int = 10_000, level: float = 0.95) -> dict[str, Any]:
    """Return the difference ``a - b`` of the mean success over ``splits`` and its bootstrap interval.

    ``a`` and ``b`` map seed -> outcomes. Only seeds both have are used, and per split only the scenes both runs
    scored (a ValueError names what is missing when nothing pairs up). Returns ``diff``, ``ci`` ([low, high] at
    ``level``), ``per_seed`` (seed -> difference), ``seeds``, ``scenes`` (per seed) and ``n_boot``.
    """
    if not 0.0 < level < 1.0 or n_boot < 1:
        raise ValueError(f"level={level} must be in (0, 1) and n_boot={n_boot} >= 1")
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError(f"no seed in common (a: {sorted(a)}, b: {sorted(b)})")
    columns: list[tuple[str, str]] = []
    for split in splits:
        common = set.intersection(*[set(a[s].get(split, {})) & set(b[s].get(split, {})) for s in seeds])
        if not common:
            raise ValueError(f"split {split!r}: no scene scored by both runs of every seed")
        columns += [(split, scene) for scene in sorted(common)]
    diff = np.array([[a[s][split][scene] - b[s][split][scene] for split, scene in columns] for s in seeds],
                    dtype=np.float64)  # (seeds, scenes)
    strata = [np.array([i for i, (sp, _) in enumerate(columns) if sp == split]) for split in splits]
    # Weights of the point estimate: every seed alike, every split alike, every scene of a split alike.
    scene_w = np.zeros(len(columns))
    for idx in strata:
        scene_w[idx] = 1.0 / (len(idx) * len(strata))
    point = float(np.mean(diff @ scene_w))
    seed_counts = rng.multinomial(len(seeds), np.full(len(seeds), 1.0 / len(seeds)), size=n_boot) / len(seeds)
    boot_w = np.zeros((n_boot, len(columns)))
    for idx in strata:
        counts = rng.multinomial(len(idx), np.full(len(idx), 1.0 / len(idx)), size=n_boot)
        boot_w[:, idx] = counts / (len(idx) * len(strata))
    replicates = np.einsum("bs,sn,bn->b", seed_counts, diff, boot_w)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(replicates, [tail, 1.0 - tail])
    return {"diff": point, "ci": [float(low), float(high)], "level": level, "n_boot": n_boot,
            "per_seed": {str(s): float(d) for s, d in zip(seeds, diff @ scene_w, strict=True)},
            "seeds": len(seeds), "scenes": len(columns)}
