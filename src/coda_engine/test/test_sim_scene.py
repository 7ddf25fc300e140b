# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Scene model, generation, determinism, rejections, parameter errors, dict round trip."""

import json
from pathlib import Path

import mujoco
import numpy as np
import pytest

from coda_engine.sim import panda
from coda_engine.sim.families import FAMILIES
from coda_engine.sim.generator import generate, generate_seeded
from coda_engine.sim.scene import MAX_OBJECTS, ROLE_GOAL, ROLE_TARGET, Scene, SceneParams


def test_base_model_builds_with_simplified_meshes_and_position_actuators():
    model = panda.base_model()
    assert model.opt.timestep == pytest.approx(0.002)
    assert model.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    assert model.nu == 8 and model.actuator(0).name == panda.HAND_ACTUATOR
    assert all(model.actuator(f"{j}_pos").biastype == mujoco.mjtBias.mjBIAS_AFFINE for j in panda.ARM_JOINTS)
    original = sum(len(panda.read_obj(p)[1]) for p in panda.asset_dir().glob("link*.obj"))
    assert sum(model.mesh_facenum) < 0.1 * original
    src = Path(__file__).resolve().parents[1]
    assert src not in panda.cache_dir().resolve().parents
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    mujoco.mj_step(model, data, 200)  # holds its home pose under position control
    assert np.allclose(data.qpos[:7], panda.HOME_QPOS, atol=0.02)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generate_is_deterministic_and_valid(family):
    a = generate(family, np.random.default_rng(7))
    b = generate(family, np.random.default_rng(7))
    assert a.to_dict() == b.to_dict()
    assert generate_seeded(family, a.seed).to_dict() == a.to_dict()
    assert a.target.role == ROLE_TARGET and (family == "reach") == (a.goal is None)
    if a.goal is not None:
        assert a.goal.role == ROLE_GOAL
    assert len(a.objects) <= MAX_OBJECTS and a.instruction and a.mjcf_sha256
    assert mujoco.MjModel.from_xml_string(a.mjcf).nbody >= len(a.objects)
    c = generate(family, np.random.default_rng(8))
    assert c.to_dict() != a.to_dict()


def test_scene_dict_round_trip_is_exact():
    scene = generate("pick_place", np.random.default_rng(3), SceneParams(camera_jitter=0.02, light_jitter=0.1))
    data = scene.to_dict()
    assert set(data) >= {"header", "scene_id", "objects", "target_object", "goal_object", "params_json"}
    assert set(data["objects"][0]) == {"name", "shape", "role", "color_name", "rgba", "size", "mass", "friction",
                                       "pose", "twist", "visible"}
    again = Scene.from_dict(json.loads(json.dumps(data)))
    assert again == scene and again.to_dict() == data
    for obj in scene.objects:  # float32 message fields carry the values exactly
        assert all(np.float32(v) == v for v in (*obj.rgba, obj.mass, obj.friction))


def test_rejections_are_recorded_with_reasons():
    rng = np.random.default_rng(0)
    # A shape-only reference among four distractors is often ambiguous: those layouts must be rejected.
    scene = generate("reach", rng, SceneParams(num_distractors=(4, 4), referring=("shape",)))
    assert "ambiguous_reference:shape" in scene.rejections
    assert [o.shape for o in scene.objects].count(scene.target.shape) == 1
    assert scene.meta["generation"]["attempts"] == len(scene.rejections) + 1
    crowded = [generate("push", rng, SceneParams(num_distractors=(4, 4), min_clearance=0.03)) for _ in range(4)]
    kinds = {r.split(":", 1)[0] for s in crowded for r in s.rejections}
    assert kinds & {"overlap", "blocked_path", "push_distance"}
    assert kinds <= {"overlap", "push_distance", "blocked_path", "ambiguous_reference", "ambiguous_goal",
                     "unreachable", "unstable", "position_excluded"}
    assert all(len(s.distractors) == 4 for s in crowded)


def test_impossible_params_name_the_parameter():
    with pytest.raises(ValueError, match="num_distractors"):
        SceneParams(num_distractors=(6, 9))
    with pytest.raises(ValueError, match="split"):
        SceneParams(split="nowhere")
    with pytest.raises(ValueError, match="synonyms"):
        generate("reach", np.random.default_rng(0), SceneParams(synonyms=True))
    with pytest.raises(ValueError, match=r"num_distractors.*min_clearance"):
        generate("stack", np.random.default_rng(0), SceneParams(num_distractors=(5, 5), min_clearance=0.1))
    with pytest.raises(ValueError, match="unknown task family"):
        generate("juggle", np.random.default_rng(0))


def test_malformed_scene_dict_is_rejected():
    data = generate("reach", np.random.default_rng(1)).to_dict()
    data["target_object"] = "ghost"
    data["objects"][0]["size"]["x"] = -1.0
    with pytest.raises(ValueError, match=r"ghost|size"):
        Scene.from_dict(data)
