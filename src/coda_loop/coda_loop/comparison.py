# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""A change against its control, paired on seeds and scenes: ``coda compare``.

A design change is tried by running one method with a ``--set`` option from the same round-0 policies as a control
experiment (``coda experiment ... --out DIR/knob`` with ``DIR/knob/seed<k>/sft`` copied from the control), so the
two runs of each seed start alike and are scored on the same held-out scenes. :func:`compare` reads the per-scene
outcomes both ``results.json`` files keep (``runs.<method>.<seed>.outcomes``) and returns, per suite kind
(validation, test), the paired difference of the OOD mean with its bootstrap interval over seeds and scenes
(:func:`coda_loop.stats.paired_difference`), each side's OOD mean per seed, and the same difference per OOD split
and per task family (families read from the shipped suites' entries). Designs are chosen on ``validation``;
``test`` is read after.

Two checkpoints (or pairs of them) compare the same way from ``coda eval --json`` outputs on the shipped suites:
a side given as eval outputs pairs them by position (the k-th arm file with the k-th control file, shown as seed k),
e.g. every round's PPO update against the policy it started from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda_loop.config import OOD_SPLITS
from coda_loop.stats import Outcomes, paired_difference

SUITE_KINDS = ("validation", "test")
"""Suite kinds compared, in the order designs are read: validation chooses, test is read after."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a method's runs in one or more ``results.json`` files."""

    files: tuple[Path, ...]
    """The ``results.json`` files (``coda experiment``), one or several seeds each."""
    method: str = "coda"
    """The method whose runs are read."""

    @classmethod
    def parse(cls, specs: Sequence[str]) -> Side:
        """Return the side named by ``FILE[:METHOD]`` strings; every file of one side names the same method."""
        files, methods = [], set()
        for spec in specs:
            path, sep, method = spec.rpartition(":")
            if not sep or not method or "/" in method:  # no method given (or the colon belonged to the path)
                path, method = spec, "coda"
            files.append(Path(path))
            methods.add(method)
        if len(methods) != 1:
            raise ValueError(f"one side reads one method, got {sorted(methods)} from {list(specs)}")
        return cls(tuple(files), methods.pop())

    def label(self) -> str:
        """Short name: the method and its files."""
        return f"{self.method} ({', '.join(map(str, self.files))})"

    def outcomes(self) -> dict[int, Mapping[str, Outcomes]]:
        """Return seed -> suite kind -> per-scene outcomes; a ValueError names a file or a seed that does not fit.

        ``results.json`` files give their seeds; ``coda eval --json`` outputs give their position in ``files``.
        """
        out: dict[int, Mapping[str, Outcomes]] = {}
        kinds = set()
        for index, path in enumerate(self.files):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as error:
                raise ValueError(f"{path}: not a readable results.json ({error})") from error
            is_eval = isinstance(data, dict) and {"policy", "outcomes", "kind"} <= set(data)
            kinds.add(is_eval)
            if len(kinds) > 1:
                raise ValueError(f"{path}: one side is either results.json files or coda eval outputs, not both")
            if is_eval:
                out[index] = eval_outcomes(path, data)
                continue
            runs = data.get("runs") if isinstance(data, dict) else None
            if not isinstance(runs, dict):
                raise ValueError(f"{path}: has no per-run records ('runs'); rerun coda experiment on its folder")
            if self.method not in runs:
                raise ValueError(f"{path}: no runs of method {self.method!r} (it has {sorted(runs)})")
            for seed, record in runs[self.method].items():
                if not str(seed).isdigit():
                    raise ValueError(f"{path}: runs.{self.method} must map seeds to run records, not {seed!r}")
                if int(seed) in out:
                    raise ValueError(f"{path}: seed {seed} of {self.method} is already in an earlier file")
                outcomes = record.get("outcomes") if isinstance(record, dict) else None
                if not isinstance(outcomes, dict):
                    raise ValueError(f"{path}: {self.method} seed {seed} keeps no per-scene outcomes")
                out[int(seed)] = outcomes
        return out


def eval_outcomes(path: Path, data: Mapping[str, Any]) -> dict[str, Outcomes]:
    """Return ``{kind: outcomes}`` of a ``coda eval --json`` output on the shipped ``test`` or ``validation`` suites.

    Outputs on other suite files (``kind`` ``files``) or without per-scene outcomes are a ValueError naming the file.
    """
    kind = data.get("kind")
    if kind not in SUITE_KINDS:
        raise ValueError(f"{path}: a coda eval output compares only on the shipped test or validation suites, "
                         f"it scored {kind!r} ({dict(data['suites'])})")
    outcomes = data["outcomes"]
    if not isinstance(outcomes, dict) or not outcomes:
        raise ValueError(f"{path}: keeps no per-scene outcomes")
    return {kind: {split: {str(k): int(v) for k, v in by_scene.items()} for split, by_scene in outcomes.items()}}


def scene_families(kind: str) -> dict[str, str]:
    """Return scene id -> task family of the shipped suites of ``kind`` (``test`` or ``validation``)."""
    from coda_policy.suite import default_suites

    return {entry["id"]: entry["family"] for suite in default_suites(kind=kind).values() for entry in suite.entries}


def _of_family(outcomes: Outcomes, families: Mapping[str, str], family: str) -> dict[str, dict[str, int]]:
    return {split: {scene: ok for scene, ok in by_scene.items() if families.get(scene) == family}
            for split, by_scene in outcomes.items()}


def _ood_mean(outcomes: Outcomes, splits: Sequence[str]) -> float:
    return float(np.mean([np.mean(list(outcomes[s].values())) for s in splits if outcomes.get(s)]))


def _part(a: Mapping[int, Outcomes], b: Mapping[int, Outcomes], splits: Sequence[str], rng_seed: int,
          n_boot: int) -> dict[str, Any]:
    """Return the paired difference of ``a`` - ``b`` over ``splits`` with both sides' mean OOD success over seeds."""
    diff = paired_difference(a, b, splits, np.random.default_rng(rng_seed), n_boot=n_boot)
    return {"diff": diff["diff"], "ci": diff["ci"],
            "arm": float(np.mean([_ood_mean(outcomes, splits) for outcomes in a.values()])),
            "control": float(np.mean([_ood_mean(outcomes, splits) for outcomes in b.values()]))}


def paired_ood(a: Mapping[int, Outcomes], b: Mapping[int, Outcomes], rng_seed: int = 0,
               n_boot: int = 10_000) -> dict[str, Any] | None:
    """Return :func:`~coda_loop.stats.paired_difference` of ``a`` - ``b`` over the OOD splits every run scored.

    ``a`` and ``b``: seed -> split -> scene -> 0/1 of one suite kind. The result names those ``splits``; None when
    the two share no seed or no OOD split (a run may have evaluated some splits only).
    """
    runs = [*a.values(), *b.values()]
    splits = [x for x in OOD_SPLITS if all(x in o for o in runs)]
    if not (set(a) & set(b)) or not splits:
        return None
    return {**paired_difference(a, b, splits, np.random.default_rng(rng_seed), n_boot=n_boot), "splits": splits}


def compare(arm: Side, control: Side, rng_seed: int = 0, n_boot: int = 10_000,
            families: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Any]:
    """Return ``arm`` - ``control`` per suite kind, paired on the seeds both have (module docstring).

    ``families``: suite kind -> scene id -> family (default: read from the shipped suites). A kind neither side
    scored is left out, and each kind pairs the OOD splits every run scored; no seed in common is a ValueError naming
    both sides' seeds.
    """
    a, b = arm.outcomes(), control.outcomes()
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError(f"no seed in common: {arm.label()} has {sorted(a)}, {control.label()} has {sorted(b)}")
    result: dict[str, Any] = {"arm": arm.label(), "control": control.label(), "seeds": seeds}
    for kind in SUITE_KINDS:
        if not all(a[s].get(kind) and b[s].get(kind) for s in seeds):
            continue
        ka = {s: a[s][kind] for s in seeds}
        kb = {s: b[s][kind] for s in seeds}
        row = paired_ood(ka, kb, rng_seed, n_boot)
        if row is None:
            continue
        splits = row["splits"]
        row["arm_ood"] = {str(s): _ood_mean(ka[s], splits) for s in seeds}
        row["control_ood"] = {str(s): _ood_mean(kb[s], splits) for s in seeds}
        row["by_split"] = {split: _part(ka, kb, [split], rng_seed, n_boot) for split in splits}
        names = (families or {}).get(kind) or scene_families(kind)
        row["families"] = {}
        for family in sorted(set(names.values())):
            try:
                row["families"][family] = _part({s: _of_family(ka[s], names, family) for s in seeds},
                                                {s: _of_family(kb[s], names, family) for s in seeds},
                                                splits, rng_seed, n_boot)
            except ValueError:  # the family has no scene in some split of these runs
                continue
        result[kind] = row
    if not any(kind in result for kind in SUITE_KINDS):
        raise ValueError(f"{arm.label()} and {control.label()} share no suite kind scored on every seed")
    return result


def format_comparison(result: Mapping[str, Any]) -> str:
    """Return the comparison as text: per suite kind the pooled difference, every seed, split and family."""
    lines = [f"arm:     {result['arm']}", f"control: {result['control']}", f"seeds {result['seeds']}"]
    for kind in SUITE_KINDS:
        row = result.get(kind)
        if row is None:
            continue
        low, high = row["ci"]
        lines += ["", f"{kind}: arm - control {row['diff']:+.3f} [{low:+.3f}, {high:+.3f}] "
                      f"({row['scenes']} paired scenes per seed, {row['seeds']} seeds; OOD splits "
                      f"{', '.join(row['splits'])})",
                  "  seed   arm    control  difference"]
        lines += [f"  {seed:>4}  {row['arm_ood'][seed]:.3f}  {row['control_ood'][seed]:.3f}    {diff:+.3f}"
                  for seed, diff in row["per_seed"].items()]
        for title, rows in (("split", row["by_split"]), ("family", row["families"])):
            lines.append(f"  {title:<12}  arm    control  difference")
            lines += [f"  {name:<12}  {f['arm']:.3f}  {f['control']:.3f}    {f['diff']:+.3f} "
                      f"[{f['ci'][0]:+.3f}, {f['ci'][1]:+.3f}]" for name, f in rows.items()]
    return "\n".join(lines)
