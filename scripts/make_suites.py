#!/usr/bin/env python3
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Generate the shipped held-out evaluation suites (run once; kept so the files can be reproduced).

    source scripts/env.sh && python scripts/make_suites.py            # rewrites coda_policy/suites/*.yaml
    python scripts/make_suites.py --out /tmp/suites --splits id      # elsewhere / some splits

For every split and family, scenes come from the engine's split generator,
``generate_seeded(family, seed, SceneParams(split=split))``, with seeds

    seed = 2**63 + (split index << 32) + (family index << 24) + i,    i = 0, 1, 2, ...

All of them lie in [2**63, 2**64), while every seed the engine and the trainers draw is below 2**63
(``generator.generate`` draws from [0, 2**63 - 1), the scene generator node keeps 63 bits, RL environments
and demonstration collection go through ``generate``), so no training scene is built from a suite seed.

``--validation`` writes the validation suites (``coda_policy/suites/validation/``) instead: the same
generators with seeds from ``VALIDATION_SEED_BASE = 2**63 + 2**62`` on, disjoint from the test suites' seeds
(which stay below 2**63 + 2**35) and from training. Designs and hyperparameters are chosen on them; the test
suites stay a test.
Values are rounded for readable files (colours 1e-3, sizes 0.1 mm, mass 1 g, friction 0.01, positions
10 um, quaternions 1e-4); the rounded entry is the frozen scene. An entry is kept only when the
family's scripted expert solves that frozen scene; the seeds dropped are listed in the file's provenance.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import run_expert
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SPLITS, GenerationError, ObjectSpec, Scene, SceneParams
from coda_policy.suite import FAMILY_ORDER, SUITES_DIR, Suite, entry_from_scene, save_suite, scene_from_entry

SEED_BASE = 2**63
"""First suite seed; every training seed is below it."""
VALIDATION_SEED_BASE = 2**63 + 2**62
"""First validation-suite seed (above every test-suite seed)."""
PER_FAMILY = 25
"""Entries per family and split."""


def suite_seed(split: str, family: str, i: int, base: int = SEED_BASE) -> int:
    """Seed of candidate ``i`` of ``family`` in ``split`` (in [2**63, 2**64), disjoint from training seeds)."""
    return base + (SPLITS.index(split) << 32) + (FAMILY_ORDER.index(family) << 24) + i


def _round_object(o: ObjectSpec) -> ObjectSpec:
    def rnd(values: tuple[float, ...], digits: int) -> tuple[float, ...]:
        return tuple(round(v, digits) + 0.0 for v in values)

    return dataclasses.replace(
        o,
        rgba=rnd(o.rgba, 3),  # type: ignore[arg-type]
        size=rnd(o.size, 4),  # type: ignore[arg-type]
        mass=round(o.mass, 3),
        friction=round(o.friction, 2),
        position=rnd(o.position, 5),  # type: ignore[arg-type]
        orientation=rnd(o.orientation, 4),  # type: ignore[arg-type]
    )


def make_suite(split: str, per_family: int, arm: SimArm, log: bool = True, base: int = SEED_BASE,
               purpose: str = "Held-out") -> Suite:
    """Return the suite of ``split``: ``per_family`` expert-solved frozen scenes of every family.

    Candidate seeds start at ``base`` (:func:`suite_seed`); ``purpose`` heads the suite's description.
    """
    params = SceneParams(split=split)
    prefix = "" if base == SEED_BASE else "val_"
    entries, dropped = [], {}
    for family in FAMILY_ORDER:
        kept, failed, i = 0, [], 0
        while kept < per_family:
            if i >= 4 * per_family + 20:
                raise RuntimeError(f"{split}/{family}: the expert failed too often ({failed})")
            seed = suite_seed(split, family, i, base)
            i += 1
            try:
                scene = generate_seeded(family, seed, params, scene_id=f"{prefix}{split}-{family}-{kept:03d}")
            except GenerationError:
                failed.append(seed)
                continue
            scene = dataclasses.replace(scene, objects=[_round_object(o) for o in scene.objects])
            entry = entry_from_scene(scene)
            frozen: Scene = scene_from_entry(entry, split=split, suite_name=split, index=len(entries))
            if not run_expert(arm, frozen).success:
                failed.append(seed)
                continue
            entries.append(entry_from_scene(frozen))
            kept += 1
        dropped[family] = failed
        if log:
            print(f"{split:12s} {family:10s} kept {kept}, dropped {len(failed)}", file=sys.stderr)
    provenance = {
        "script": "scripts/make_suites.py",
        "generator": "coda_engine.sim.generator.generate_seeded(family, seed, SceneParams(split=split))",
        "params": params.to_json_dict(),
        "seeds": f"{'2**63' if base == SEED_BASE else '2**63 + 2**62'} + (split index << 32) + (family index << 24) "
        "+ i; split index in "
        f"{list(SPLITS)}, family index in {list(FAMILY_ORDER)}",
        "rounding": "rgba 1e-3, size 1e-4 m, mass 1e-3 kg, friction 1e-2, position 1e-5 m, orientation 1e-4",
        "kept": "entries whose frozen scene the family's scripted expert solves",
        "dropped_seeds": dropped,
    }
    description = (
        f"{purpose} '{split}' suite: {per_family} frozen scenes per family from the engine's '{split}' split "
        "generator with seeds disjoint from training (see provenance)."
    )
    return Suite(name=split, split=split, entries=entries, description=description, provenance=provenance)


def main(argv: list[str] | None = None) -> int:
    """Write ``<out>/<split>.yaml`` for the chosen splits."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=SUITES_DIR, help="output folder (default: the shipped suites)")
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=list(SPLITS))
    parser.add_argument("--per-family", type=int, default=PER_FAMILY)
    parser.add_argument("--validation", action="store_true",
                        help="write the validation suites (seeds from 2**63 + 2**62; default folder suites/validation)")
    args = parser.parse_args(argv)
    if args.validation and args.out == SUITES_DIR:
        args.out = SUITES_DIR / "validation"
    args.out.mkdir(parents=True, exist_ok=True)
    arm = SimArm()
    base, purpose = (VALIDATION_SEED_BASE, "Validation") if args.validation else (SEED_BASE, "Held-out")
    for split in args.splits:
        start = time.perf_counter()
        suite = make_suite(split, args.per_family, arm, base=base, purpose=purpose)
        use = ("designs and hyperparameters are chosen on this file" if args.validation
               else "the data engine never reads this file")
        comment = (
            f"{purpose} evaluation suite '{split}' (format: coda_policy/suites/README.md).\n"
            f"Generated by scripts/make_suites.py{' --validation' if args.validation else ''}; {use}."
        )
        path = save_suite(suite, args.out / f"{split}.yaml", comment)
        print(f"{path}: {len(suite.entries)} entries in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
