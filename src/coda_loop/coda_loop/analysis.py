# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Where a run's budget went and what it bought: ``coda analyze RUN_DIR ...``.

:func:`analyze_run` reads one run folder's memory and returns, per round:

* **generation**: scenes per family and per allocation kind (targeted / replay / exploration), and the share
  of the budget spent on scenes the acting policy already solved (its episode on the scene succeeded) and on
  *solved conditions* (scene conditions, e.g. ``pick_place position_region=left_far``, on which the acting
  policy succeeded in at least ``SOLVED_RATE`` of last round's generated scenes, with ``MIN_SUPPORT`` or more);
* **demonstrations**: new demonstrations and their labelled steps, corrective ones (recovered, by failure mode),
  relabelled successes, and the share of the behaviour-cloning set the round's own demonstrations make up (how
  far all-demonstration cloning dilutes them);
* **RL**: family, shaped or sparse, success before and after on the gate's scenes, kept or not;
* **memory**: diagnoses recalled by similarity and what they changed;
* **weights**: a digest of the weights the round's behaviour cloning produced (round 0: the SFT policy), so two
  runs of one seed can be checked for where they part (:func:`weights_shared_through`: an ablation whose
  mechanism decided nothing yet trains byte-identical weights).

and per scene condition the success of the acting policy on the generated scenes with that condition in every
round (a learning curve per condition), with, for the conditions a round targeted, the success in that round
(before training on its scenes) and in the next (after). Pure module: no rclpy.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from coda_loop.step_results import DiagnoseResult, EpisodesResult, EvaluateResult, GenerateResult, TrainResult

SOLVED_RATE = 0.8
"""A condition is solved when the acting policy succeeded on at least this share of its scenes last round."""
MIN_SUPPORT = 3
"""Scenes a condition needs in a round before it counts as solved (or not)."""
CONDITION_KEYS = ("position_region", "num_distractors", "target_shape", "target_color", "phrasing", "target_size")
"""Condition keys the analysis groups by (the generator's targetable vocabulary)."""


def _groups(scene: Any) -> list[tuple[str, str, str]]:
    from coda_critic.diagnosis import scene_conditions

    values = {c.key: c.value for c in scene_conditions(scene)}
    return [(scene.family, key, values[key]) for key in CONDITION_KEYS if key in values]


def _label(group: tuple[str, str, str]) -> str:
    return f"{group[0]} {group[1]}={group[2]}"


def analyze_run(run_dir: Path | str) -> dict[str, Any]:
    """Return the analysis of one run folder (see the module docstring)."""
    from coda_engine.sim.scene import Scene
    from coda_loop.config import LoopConfig
    from coda_loop.memory import MemoryStore

    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file() or not (run_dir / "memory.db").is_file():
        raise ValueError(f"{run_dir} is not a run folder (needs config.json and memory.db)")
    config = LoopConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    rounds: list[dict[str, Any]] = []
    curves: dict[tuple[str, str, str], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    targeted_by_round: dict[int, list[tuple[str, str, str]]] = {}
    with MemoryStore(run_dir / "memory.db") as store:
        for r in range(config.rounds + 1):
            gen, eps = store.finished_step(r, GenerateResult), store.finished_step(r, EpisodesResult)
            if gen is None or eps is None:
                break
            generated = set(gen.scene_ids)
            scenes = {sid: Scene.from_dict(store.get("scene", sid).payload) for sid in gen.scene_ids}  # type: ignore[union-attr]
            solved_scene = []
            for episode_id in eps.episode_ids:
                record = store.get("episode", episode_id)
                if record is None or record.payload["scene_id"] not in generated:
                    continue
                scene = scenes[record.payload["scene_id"]]
                success = int(bool(record.payload["success"]))
                solved_scene.append(success)
                for group in _groups(scene):
                    curves[group][r].append(success)
            program = store.get("generation_program", gen.program_id)
            kinds: Counter[str] = Counter()
            targeted: list[tuple[str, str, str]] = []
            for line in (program.payload["allocations"] if program is not None else []):
                kinds[line["kind"]] += int(line["count"])
                if line["kind"] == "targeted":
                    extra = [c for c in line["conditions"] if c["key"] != "family"]
                    targeted += [(line["family"], c["key"], c["value"]) for c in extra] or [(line["family"], "", "")]
            targeted_by_round[r] = targeted
            row: dict[str, Any] = {
                "round": r, "generated": len(generated), "by_family": dict(Counter(s.family for s in scenes.values())),
                "by_kind": dict(kinds),
                "spent_on_solved_scenes": (sum(solved_scene) / len(solved_scene)) if solved_scene else None,
                "spent_on_solved_conditions": _solved_share(scenes.values(), curves, r),
                "edited": {**gen.edited_scenes, **({"played exactly": gen.unedited_replays}
                                                   if gen.unedited_replays else {})},
            }
            train = store.finished_step(r, TrainResult)
            if train is not None:  # round 0: the SFT version; later: the BC version, kept by its gate or not
                row["bc_weights"] = _weights_digest(run_dir / "checkpoints" / (train.bc_version or train.version))
            if r > 0 and train is not None:
                row["new_demos"] = train.new_demos
                row["new_steps"] = train.new_steps
                row["demo_episodes"] = train.demo_episodes
                if train.demo_episodes:
                    row["new_demo_share"] = train.new_demos / train.demo_episodes
                if train.corrective is not None:
                    c = train.corrective
                    row["corrective"] = {"failed_scenes": c.failed_scenes, "recovered": c.recovered,
                                         "by_mode": c.by_mode, "corrective_steps": c.corrective_steps,
                                         "relabelled_successes": c.relabelled_successes}
                if train.rl is not None:
                    rl = train.rl
                    row["rl"] = {"family": rl.family, "shaped": rl.shaped, "success_before": rl.success_before,
                                 "success_after": rl.success_after, "kept": rl.kept}
                if train.bc_gate is not None:
                    gate = train.bc_gate
                    row["bc_gate"] = {"before": gate.before, "after": gate.after, "kept": gate.kept}
            diag = store.finished_step(r, DiagnoseResult)
            if diag is not None and diag.recalled:
                row["recalled"] = len(diag.recalled)
            evaluation = store.finished_step(r, EvaluateResult)
            if evaluation is not None:
                row["eval"] = {"per_split": evaluation.per_split, "ood": evaluation.ood}
                if evaluation.validation is not None:
                    row["validation"] = {"per_split": evaluation.validation.per_split,
                                         "ood": evaluation.validation.ood}
            rounds.append(row)
    effects = []
    for r, groups in targeted_by_round.items():
        for group in dict.fromkeys(groups):
            if not group[1]:
                continue
            now, after = curves.get(group, {}).get(r, []), curves.get(group, {}).get(r + 1, [])
            if now and after:
                effects.append({"round": r, "condition": _label(group), "scenes": len(now),
                                "success": sum(now) / len(now), "next_round_scenes": len(after),
                                "next_round_success": sum(after) / len(after)})
    rl_rows = [row["rl"] for row in rounds if "rl" in row]
    return {
        "run_dir": str(run_dir), "method": config.method, "seed": config.seed, "rounds": rounds,
        "targeted_effects": effects,
        "conditions": {_label(g): {str(r): [len(v), sum(v) / len(v)] for r, v in sorted(by.items())}
                       for g, by in sorted(curves.items())},
        "totals": {
            "spent_on_solved_scenes": _mean([row["spent_on_solved_scenes"] for row in rounds[1:]]),
            "spent_on_solved_conditions": _mean([row["spent_on_solved_conditions"] for row in rounds[1:]]),
            "rl_rounds": len(rl_rows), "rl_kept": sum(bool(x["kept"]) for x in rl_rows),
            "rl_gain_when_kept": _mean([x["success_after"] - x["success_before"] for x in rl_rows if x["kept"]]),
            "corrective_recovered": sum(row.get("corrective", {}).get("recovered", 0) for row in rounds),
            "corrective_failed_scenes": sum(row.get("corrective", {}).get("failed_scenes", 0) for row in rounds),
            "relabelled_successes": sum(row.get("corrective", {}).get("relabelled_successes", 0) for row in rounds),
            "new_demos": sum(row.get("new_demos") or 0 for row in rounds),
            "new_steps": sum(row.get("new_steps") or 0 for row in rounds),
            "targeted_gain": _mean([e["next_round_success"] - e["success"] for e in effects]),
        },
    }


def _weights_digest(version_dir: Path) -> str | None:
    """First 16 hex digits of the SHA-256 of a checkpoint's weights file (None: no such checkpoint)."""
    from coda_engine.digests import file_sha256

    weights = version_dir / "model.safetensors"
    return file_sha256(weights)[:16] if weights.is_file() else None


def weights_shared_through(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Last round through which two analysed runs cloned byte-identical weights in every round (-1: not even 0).

    Two runs of one seed that share the round-0 policy and whose differences have not yet changed a decision
    (a scene, a demonstration, a kept RL update) train the same weights; the round after this one is where they
    part.
    """
    last = -1
    for row_a, row_b in zip(a["rounds"], b["rounds"], strict=False):  # a run may have fewer rounds
        digest = row_a.get("bc_weights")
        if digest is None or digest != row_b.get("bc_weights"):
            break
        last = row_a["round"]
    return last


def format_shared(results: list[dict[str, Any]]) -> list[str]:
    """One line per run after the first with the same seed: the rounds through which it cloned the first's weights."""
    first = results[0]
    lines = []
    for other in results[1:]:
        if other["seed"] != first["seed"]:
            continue
        k = weights_shared_through(first, other)
        both = min(len(first["rounds"]), len(other["rounds"])) - 1
        parted = f"; they part in round {k + 1}" if k < both else ""
        lines.append(f"{other['method']} (seed {other['seed']}) cloned the same weights as {first['method']} through "
                     f"round {k}{parted}")
    return lines


def _mean(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return float(sum(values) / len(values)) if values else None


def _solved_share(scenes: Any, curves: dict[tuple[str, str, str], dict[int, list[int]]], r: int) -> float | None:
    """Share of this round's scenes all of whose conditions were solved by last round's policy (with support)."""
    if r == 0:
        return None
    scenes = list(scenes)
    if not scenes:
        return None
    solved = 0
    for scene in scenes:
        groups = _groups(scene)
        known = [curves.get(g, {}).get(r - 1, []) for g in groups]
        if all(len(v) >= MIN_SUPPORT and sum(v) / len(v) >= SOLVED_RATE for v in known):
            solved += 1
    return solved / len(scenes)


def format_analysis(result: dict[str, Any]) -> str:
    """Return a plain-text table of one run's analysis."""
    lines = [f"{result['run_dir']} ({result['method']}, seed {result['seed']})",
             "round  gen  solved-scn  solved-cond  targeted/replay/explore  corrective(rec/failed)  "
             "new-demo-share  rl(family shaped before->after kept)  val-ood  test-ood"]
    notes: list[str] = []
    for row in result["rounds"]:
        kinds = row["by_kind"]
        corr = row.get("corrective")
        rl = row.get("rl")
        rl_text = "-"
        if rl:
            rl_text = (f"{rl['family']} {'shaped' if rl['shaped'] else 'sparse'} {rl['success_before']:.2f}->"
                       f"{rl['success_after']:.2f} {'kept' if rl['kept'] else 'refused'}")
        if row.get("edited"):
            notes.append(f"round {row['round']} replays edited: "
                         + ", ".join(f"{k} {v}" for k, v in sorted(row["edited"].items())))
        lines.append(
            f"{row['round']:5d} {row['generated']:4d}  {_pct(row['spent_on_solved_scenes']):>10}  "
            f"{_pct(row['spent_on_solved_conditions']):>11}  "
            f"{kinds.get('targeted', 0):>8}/{kinds.get('replay', 0)}/{kinds.get('exploration', 0):<12} "
            f"{(str(corr['recovered']) + '/' + str(corr['failed_scenes'])) if corr else '-':>22}  "
            f"{_pct(row.get('new_demo_share')):>14}  "
            f"{rl_text:>36}  "
            f"{_pct(row.get('validation', {}).get('ood')):>7}  {_pct(row.get('eval', {}).get('ood')):>8}")
    t = result["totals"]
    lines.append(f"budget on solved scenes {_pct(t['spent_on_solved_scenes'])}, on solved conditions "
                 f"{_pct(t['spent_on_solved_conditions'])}; RL kept {t['rl_kept']} of {t['rl_rounds']} rounds "
                 f"(mean gain when kept {_pct(t['rl_gain_when_kept'])}); corrective demonstrations "
                 f"{t['corrective_recovered']} of {t['corrective_failed_scenes']} failed scenes, "
                 f"{t['relabelled_successes']} relabelled successes; {t['new_demos']} new demonstrations of "
                 f"{t['new_steps']} labelled steps; targeted conditions "
                 f"next-round success change {_pct(t['targeted_gain'], signed=True)}")
    return "\n".join(lines + notes)


def _pct(value: Any, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%"
