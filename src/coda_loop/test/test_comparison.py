# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda compare``: a change against its control from results.json files, paired on seeds and scenes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coda_loop.cli import main
from coda_loop.comparison import Side, compare, format_comparison, scene_families
from coda_loop.config import OOD_SPLITS

FAMILIES = ("reach", "push")


def _outcomes(rate: dict[str, float], seed: int, per_family: int = 20) -> dict[str, dict[str, int]]:
    """Return split -> scene -> 0/1 with success ``rate[family]``, scene ids named like the shipped suites'."""
    rng = np.random.default_rng(seed)
    return {split: {f"{split}-{family}-{i:03d}": int(rng.random() < rate[family])
                    for family in FAMILIES for i in range(per_family)} for split in OOD_SPLITS}


def _results(path: Path, runs: dict[str, dict[int, dict[str, float]]]) -> Path:
    """Write a results.json holding ``runs``: method -> seed -> family success rate (test and validation)."""
    data = {"runs": {method: {str(seed): {"outcomes": {"test": _outcomes(rate, 10 * seed + 1),
                                                            "validation": _outcomes(rate, 10 * seed + 2)}}
                              for seed, rate in by_seed.items()} for method, by_seed in runs.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _families() -> dict[str, dict[str, str]]:
    ids = {f"{split}-{family}-{i:03d}": family for split in OOD_SPLITS for family in FAMILIES for i in range(20)}
    return {"test": ids, "validation": ids}


def test_difference_pools_seeds_from_several_files_and_splits_by_family(tmp_path):
    """The arm's two seeds come from two files, the control's from one; push gains, reach is the same."""
    arm = Side.parse([str(_results(tmp_path / "s4" / "results.json", {"coda": {4: {"reach": .9, "push": .9}}})),
                      str(_results(tmp_path / "s0" / "results.json", {"coda": {0: {"reach": .9, "push": .9}}}))])
    control_file = _results(tmp_path / "base" / "results.json",
                            {"coda": {0: {"reach": .9, "push": .3}, 4: {"reach": .9, "push": .3}},
                             "open_loop": {0: {"reach": .5, "push": .5}}})
    result = compare(arm, Side.parse([f"{control_file}:coda"]), n_boot=2000, families=_families())
    assert result["seeds"] == [0, 4]
    for kind in ("validation", "test"):
        row = result[kind]
        assert row["seeds"] == 2 and row["scenes"] == len(OOD_SPLITS) * 40 and row["splits"] == list(OOD_SPLITS)
        # the point difference is the mean of the seeds' differences, each arm OOD mean minus the control's
        per_seed = {s: row["arm_ood"][s] - row["control_ood"][s] for s in ("0", "4")}
        assert row["per_seed"] == pytest.approx(per_seed)
        assert row["diff"] == pytest.approx(np.mean(list(per_seed.values())))
        assert row["ci"][0] > 0.1  # a 60-point gain on half the scenes
        push, reach = row["families"]["push"], row["families"]["reach"]
        assert push["diff"] > 0.4 and push["ci"][0] > 0.3 and push["arm"] > push["control"]
        assert reach["diff"] == pytest.approx(0.0) and reach["ci"] == pytest.approx([0.0, 0.0])
    # one seed only where the control has one: open_loop as the control pairs seed 0 alone
    single = compare(arm, Side.parse([f"{control_file}:open_loop"]), n_boot=500, families=_families())
    assert single["seeds"] == [0] and single["validation"]["seeds"] == 1


def test_difference_per_split_finds_the_split_that_moved(tmp_path):
    """The arm gains on ``position`` only: that split's row has the gain, the other splits are level.

    The pooled difference is the mean of the splits' (the OOD mean weighs the splits equally).
    """
    def runs(position_rate: float) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
        rng = np.random.default_rng(5)
        outcomes = {split: {f"{split}-{family}-{i:03d}": int(rng.random() < (position_rate if split == "position"
                                                                              else 0.6))
                            for family in FAMILIES for i in range(20)} for split in OOD_SPLITS}
        return {"1": {"outcomes": {"test": outcomes, "validation": outcomes}}}

    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": {"coda": runs(0.95), "open_loop": runs(0.3)}}))
    row = compare(Side.parse([str(path)]), Side.parse([f"{path}:open_loop"]), n_boot=1000,
                  families=_families())["test"]
    assert list(row["by_split"]) == list(OOD_SPLITS)
    position = row["by_split"]["position"]
    assert position["diff"] > 0.4 and position["ci"][0] > 0.3 and position["arm"] > position["control"]
    for split in OOD_SPLITS[1:]:  # the same draws on both sides
        assert row["by_split"][split]["diff"] == pytest.approx(0.0)
    assert row["diff"] == pytest.approx(np.mean([r["diff"] for r in row["by_split"].values()]))
    assert "  position" in format_comparison({"arm": "a", "control": "b", "seeds": [1], "test": row})


def test_side_parse_defaults_to_coda_and_refuses_two_methods(tmp_path):
    assert Side.parse(["runs/x/results.json"]) == Side((Path("runs/x/results.json"),), "coda")
    assert Side.parse(["a.json:open_loop", "b.json:open_loop"]).method == "open_loop"
    with pytest.raises(ValueError, match="one side reads one method"):
        Side.parse(["a.json:open_loop", "b.json:coda"])


def test_what_does_not_fit_is_named(tmp_path):
    base = _results(tmp_path / "base" / "results.json", {"coda": {0: {"reach": .5, "push": .5}}})
    other = _results(tmp_path / "other" / "results.json", {"coda": {7: {"reach": .5, "push": .5}}})
    with pytest.raises(ValueError, match=r"no runs of method 'closed_loop' \(it has \['coda'\]\)"):
        compare(Side.parse([f"{base}:closed_loop"]), Side.parse([str(base)]), families=_families())
    with pytest.raises(ValueError, match=r"no seed in common: .* has \[7\], .* has \[0\]"):
        compare(Side.parse([str(other)]), Side.parse([str(base)]), families=_families())
    with pytest.raises(ValueError, match="seed 0 of coda is already in an earlier file"):
        Side.parse([str(base), str(base)]).outcomes()
    (tmp_path / "flat.json").write_text(json.dumps({"runs": {"coda": {"final": {}, "outcomes": {}}}}))
    with pytest.raises(ValueError, match=r"runs\.coda must map seeds to run records, not 'final'"):
        Side.parse([str(tmp_path / "flat.json")]).outcomes()
    (tmp_path / "old.json").write_text(json.dumps({"results": {}}))
    with pytest.raises(ValueError, match="has no per-run records"):
        Side.parse([str(tmp_path / "old.json")]).outcomes()
    with pytest.raises(ValueError, match=r"not a readable results\.json"):
        Side.parse([str(tmp_path / "missing.json")]).outcomes()


def test_scene_families_cover_the_shipped_suites():
    for kind in ("test", "validation"):
        families = scene_families(kind)
        assert set(families.values()) == {"reach", "pick_place", "push", "stack"}
        assert len(families) == 5 * 4 * 25  # five splits, four families, 25 entries each
        assert all(f"-{family}-" in scene for scene, family in families.items())


def test_cli_prints_the_comparison_and_names_a_bad_file(tmp_path, capsys):
    """The command reads the shipped suites' families; scene ids here are the suites' own."""
    def shipped(rate: float, seed: int, kind: str) -> dict[str, dict[str, int]]:
        rng = np.random.default_rng(seed)
        by_split: dict[str, dict[str, int]] = {}
        for scene in scene_families(kind):
            split = scene.removeprefix("val_").split("-")[0]
            by_split.setdefault(split, {})[scene] = int(rng.random() < rate)
        return by_split

    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": {m: {"3": {"outcomes": {k: shipped(rate, i, k) for i, k in
                                                                  enumerate(("test", "validation"))}}}
                                         for m, rate in (("coda", .8), ("open_loop", .6))}}))
    assert main(["compare", "--arm", str(path), "--control", f"{path}:open_loop", "--boot", "500", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["seeds"] == [3] and set(result["validation"]["families"]) == {"reach", "pick_place", "push", "stack"}
    assert 0.0 < result["validation"]["diff"] < 0.4
    assert main(["compare", "--arm", str(path), "--control", f"{path}:open_loop", "--boot", "500"]) == 0
    assert "validation: arm - control +" in capsys.readouterr().out
    assert main(["compare", "--arm", str(tmp_path / "nope.json"), "--control", str(path)]) == 2
    assert "nope.json: not a readable results.json" in capsys.readouterr().err


def test_coda_eval_outputs_pair_by_position(tmp_path, capsys):
    """Two PPO updates against the policies they started from: ``coda eval --json`` outputs on the validation suites.

    The first update gains on push and the second changes nothing; pairs go by position, shown as seeds 0 and 1.
    """
    from coda_policy.suite import default_suites

    suites = default_suites(OOD_SPLITS, kind="validation")

    def write(name: str, push_rate: float, seed: int) -> str:
        rng = np.random.default_rng(seed)
        outcomes = {split: {e["id"]: int(rng.random() < (push_rate if e["family"] == "push" else 0.7))
                            for e in suite.entries} for split, suite in suites.items()}
        data = {"policy": f"runs/x/{name}", "results": {}, "outcomes": outcomes, "kind": "validation",
                "episodes": 400, "seconds": 1.0, "suites": {split: str(suite.path) for split, suite in suites.items()}}
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
        return str(tmp_path / f"{name}.json")

    arm = [write("r001-rl", 0.9, 1), write("r002-rl", 0.5, 2)]
    control = [write("r001-bc", 0.2, 1), write("r002-bc", 0.5, 2)]
    result = compare(Side.parse(arm), Side.parse(control), n_boot=1000)
    assert result["seeds"] == [0, 1] and "test" not in result
    row = result["validation"]
    assert row["per_seed"]["1"] == pytest.approx(0.0)  # the same draws: no change
    assert row["per_seed"]["0"] > 0.1 and row["families"]["push"]["diff"] > 0.3
    assert row["families"]["reach"]["diff"] == pytest.approx(0.0, abs=0.08)
    assert main(["compare", "--arm", *arm, "--control", *control, "--boot", "200"]) == 0
    assert "validation: arm - control" in capsys.readouterr().out

    mine = json.loads((tmp_path / "r001-bc.json").read_text())
    mine["kind"], mine["suites"] = "files", {"position": "/home/me/my_suite.yaml"}
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    with pytest.raises(ValueError, match="only on the shipped test or validation suites"):
        Side.parse([str(tmp_path / "mine.json")]).outcomes()
    results = _results(tmp_path / "base" / "results.json", {"coda": {0: {"reach": .5, "push": .5}}})
    with pytest.raises(ValueError, match=r"either results\.json files or coda eval outputs"):
        Side.parse([arm[0], str(results)]).outcomes()
