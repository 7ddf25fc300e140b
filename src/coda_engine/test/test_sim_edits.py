# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Scene edits on real generated scenes: one factor changed, the layout checked and settled like a generated one."""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
import pytest

from coda_engine.sim.edits import CLOSEST_GAP, EDIT_OPERATORS, EditConfig, EditError, edit_scene
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import Scene, SceneParams

PARAMS = SceneParams(split="id", position_shift=0.06, size_scale=(0.8, 1.2), num_distractors=(1, 4),
                     referring=("color_shape",))


def _scene(family: str, seed: int = 123) -> Scene:
    return generate_seeded(family, seed, PARAMS)


def _changed(before: Scene, after: Scene) -> dict[str, set[str]]:
    """Object -> the fields an edit changed (positions settle by up to a millimetre: smaller changes do not count)."""
    out: dict[str, set[str]] = {}
    for a, b in zip(before.objects, after.objects, strict=True):
        fields = set()
        if math.dist(a.position, b.position) > 0.005:
            fields.add("position")
        if abs(a.mass - b.mass) > 1e-9:
            fields.add("mass")
        yaw_a, yaw_b = (2 * math.atan2(o.orientation[2], o.orientation[3]) for o in (a, b))
        if abs(math.remainder(yaw_a - yaw_b, 2 * math.pi)) > math.radians(5):
            fields.add("yaw")
        if fields:
            out[a.name] = fields
    return out


@pytest.mark.parametrize("family", ["pick_place", "stack"])
def test_each_edit_changes_one_factor_of_one_object(family: str) -> None:
    scene = _scene(family)
    for operator in EDIT_OPERATORS:
        try:
            edited = edit_scene(scene, operator, np.random.default_rng(0), PARAMS, scene_id="e1", round_index=2)
        except EditError as error:  # stack scenes have no distractor here; the target may be a ball
            assert operator in ("distractor_closer", "target_yaw"), error
            continue
        changed = _changed(scene, edited)
        expected = {"target_shift": (scene.target_object, "position"), "goal_shift": (scene.goal_object, "position"),
                    "target_yaw": (scene.target_object, "yaw"), "target_mass": (scene.target_object, "mass")}
        if operator == "distractor_closer":
            (name, fields), = changed.items()
            assert name in {o.name for o in scene.distractors} and fields == {"position"}
            tx, ty = scene.target.position[:2]
            before, after = scene.object(name), edited.object(name)
            d0, d1 = (math.hypot(o.position[0] - tx, o.position[1] - ty) for o in (before, after))
            assert d1 < 0.97 * d0 and d1 >= before.footprint + scene.target.footprint + CLOSEST_GAP - 0.005
        else:
            name, field = expected[operator]
            assert changed == {name: {field}}, (operator, changed)
        if operator == "target_mass":
            assert edited.target.mass == pytest.approx(scene.target.mass * EditConfig().mass_factor)
        # a new scene of its own: what it came from recorded, the instruction kept, an MJCF that compiles
        assert (edited.scene_id, edited.round, edited.instruction) == ("e1", 2, scene.instruction)
        assert edited.perturbation_tags == [*scene.perturbation_tags, f"edit:{operator}"]
        assert edited.meta["edit"] == {"from": scene.scene_id, "operator": operator}
        assert edited.mjcf != scene.mjcf and mujoco.MjModel.from_xml_string(edited.mjcf) is not None
        assert Scene.from_dict(edited.to_dict()) == edited
        again = edit_scene(scene, operator, np.random.default_rng(0), PARAMS, scene_id="e1", round_index=2)
        assert again == edited  # the same generator state gives the same edit


def test_moves_stay_within_the_regions_and_the_clearance() -> None:
    scene = _scene("pick_place", 7)
    tight = EditConfig(shift=(0.09, 0.1))
    for seed in range(6):
        try:
            edited = edit_scene(scene, "target_shift", np.random.default_rng(seed), PARAMS, scene_id="e",
                                round_index=1, config=tight)
        except EditError as error:
            assert "no valid variant in 12 tries" in str(error)
            continue
        assert 0.085 <= math.dist(scene.target.position[:2], edited.target.position[:2]) <= 0.105
        for i, a in enumerate(edited.objects):
            for b in edited.objects[i + 1:]:
                gap = math.dist(a.position[:2], b.position[:2]) - a.footprint - b.footprint
                assert gap >= PARAMS.min_clearance - 0.003 or "marked_area" in a.name + b.name


def test_an_edit_that_cannot_apply_says_why() -> None:
    reach = _scene("reach")
    with pytest.raises(EditError, match=r"goal_shift of scene .*: the reach family has no goal"):
        edit_scene(reach, "goal_shift", np.random.default_rng(0), PARAMS, scene_id="e", round_index=1)
    with pytest.raises(EditError, match=r"edit 'grow' is not one of"):
        edit_scene(reach, "grow", np.random.default_rng(0), PARAMS, scene_id="e", round_index=1)
    relative = next(s for s in (generate_seeded("pick_place", k, SceneParams(referring=("relative",)))
                                for k in range(40)) if "referring:relative" in s.perturbation_tags)
    with pytest.raises(EditError, match="names the target by a relative position"):
        edit_scene(relative, "target_shift", np.random.default_rng(0), PARAMS, scene_id="e", round_index=1)
    edit_scene(relative, "target_mass", np.random.default_rng(0), PARAMS, scene_id="e", round_index=1)  # no move
    # a move that can never fit (a clearance the moved target cannot keep) is refused after the configured tries,
    # naming the last reason
    def close_pair(scene: Scene) -> bool:  # an object within 5 cm of the target: a 4 cm move keeps it within 9 cm
        t = scene.target
        return any(math.dist(t.position[:2], o.position[:2]) - t.footprint - o.footprint < 0.05
                   for o in scene.objects if o.name != t.name)

    crowded = next(s for s in (_scene("pick_place", k) for k in range(40)) if close_pair(s))
    apart = dataclasses.replace(PARAMS, min_clearance=0.1)
    with pytest.raises(EditError, match=r"no valid variant in 3 tries \(last: overlap:"):
        edit_scene(crowded, "target_shift", np.random.default_rng(0), apart, scene_id="e", round_index=1,
                   config=EditConfig(tries=3))
    with pytest.raises(ValueError, match=r"EditConfig.closer=1.5 must be in \(0, 1\)"):
        EditConfig(closer=1.5)
