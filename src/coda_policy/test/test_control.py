# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Serving logic without ROS: kinematics, observation assembly, holds on bad inputs, clipping, version swaps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coda_engine.digests import file_sha256
from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams
from coda_policy.checkpoint import MODEL_FILE, save_checkpoint
from coda_policy.control import (
    ControlConfig,
    LoadedPolicy,
    ObjectInfo,
    PandaKinematics,
    PolicyController,
    load_version,
)
from coda_policy.sft import build_policy


def _objects(arm: SimArm) -> list[ObjectInfo]:
    return [ObjectInfo(tuple(o.position), tuple(o.rgba[:3]), o.shape, tuple(o.size), o.role)
            for o in arm.object_states()]


@pytest.fixture(scope="module")
def sim():
    arm = SimArm()
    scene = generate("pick_place", np.random.default_rng(4), SceneParams(num_distractors=(2, 2)))
    first = arm.reset(scene)
    for _ in range(3):
        last = arm.step(np.array([0.02, -0.01, -0.03, -1.0]))
    return arm, scene, first, last


def test_kinematics_and_observation_match_the_simulator(sim, tiny_policy_config):
    arm, _, _, last = sim
    ee, opening = PandaKinematics().forward(list(SimArm.joint_names), list(arm.joint_positions()))
    np.testing.assert_allclose(ee, arm.tcp_position(), atol=5e-4)  # the sim reports the pre-step site
    assert opening == pytest.approx(float(last[6]), abs=1e-5)
    controller = PolicyController(ControlConfig(family="pick_place"))
    obs = controller.builder.build(ee, opening, _objects(arm))
    # Same content as the simulator's observation, except the velocity (no previous tick here).
    np.testing.assert_allclose(np.delete(obs, [3, 4, 5]), np.delete(last, [3, 4, 5]), atol=5e-4)
    with pytest.raises(KeyError, match="joint_states lacks"):
        PandaKinematics().forward(["panda_joint1"], [0.0])
    # a driver with its own joint names (a robot file's joint_names / finger_joints), in its own order
    driver = PandaKinematics([f"fr3_joint{i}" for i in range(1, 8)], ["fr3_finger_joint1", "fr3_finger_joint2"])
    names = [*driver.names[7:], *reversed(driver.names[:7])]
    positions = [*arm.joint_positions()[7:], *reversed(arm.joint_positions()[:7])]
    ee_driver, opening_driver = driver.forward(names, positions)
    np.testing.assert_allclose(ee_driver, ee, atol=1e-12)
    assert opening_driver == pytest.approx(opening)
    with pytest.raises(KeyError, match="fr3_joint1"):
        driver.forward(list(SimArm.joint_names), list(arm.joint_positions()))
    with pytest.raises(ValueError, match="7 arm and 2 finger joint names, got 6 and 2"):
        PandaKinematics([f"j{i}" for i in range(6)], ["a", "b"])


def test_holds_until_inputs_are_fresh_and_finite_then_clips(sim, tiny_policy_config):
    arm, _, _, _ = sim
    cfg = ControlConfig(family="pick_place", max_input_age=0.5, max_delta=0.01)
    controller = PolicyController(cfg)
    assert controller.tick(0.0).reason == "no policy version loaded"
    net = build_policy(tiny_policy_config, 0).net.eval()
    with torch.no_grad():
        net.actor[-1].bias.fill_(5.0)  # saturate: the action mean is ~1 on every axis
    controller.swap(LoadedPolicy("v1", net))
    assert controller.tick(0.0).reason == "no instruction"
    controller.set_instruction("put the cube in the bin", np.ones(384, dtype=np.float32) / np.sqrt(384))
    assert controller.tick(0.0).reason == "waiting for joint_states"
    ee, opening = PandaKinematics().forward(list(SimArm.joint_names), list(arm.joint_positions()))
    controller.set_arm(10.0, ee, opening)
    controller.set_objects(10.0, _objects(arm))
    cmd = controller.tick(10.1)
    assert not cmd.hold and cmd.version == "v1"
    np.testing.assert_allclose(cmd.delta, [0.01, 0.01, 0.01], atol=1e-6)  # clipped to max_delta
    assert -1.0 <= cmd.gripper <= 1.0
    stale = controller.tick(10.6)
    assert stale.hold and "joint_states stale" in stale.reason and not np.any(stale.delta)
    controller.set_arm(11.0, np.array([np.nan, 0.0, 0.3]), opening)
    controller.set_objects(11.0, _objects(arm))
    bad = controller.tick(11.0)
    assert bad.hold and "non-finite" in bad.reason and not np.any(bad.delta)
    controller.set_arm(11.0, ee, opening)
    net2 = build_policy(tiny_policy_config, 1).net.eval()
    controller.swap(LoadedPolicy("v2", net2))
    assert controller.tick(11.1).version == "v2"


def test_load_version_checks_the_announced_hash(tmp_path, tiny_policy_config):
    net = build_policy(tiny_policy_config, 0).net.eval()
    folder = save_checkpoint(tmp_path / "v9", net, "v9")
    digest = file_sha256(folder / MODEL_FILE)
    loaded = load_version(folder, digest)
    assert (loaded.version, loaded.sha256) == ("v9", digest)
    with pytest.raises(ValueError, match="sha256"):
        load_version(folder, "0" * 64)
    # Unannounced hash: still computed, so commands name the exact weights. Another model under the same
    # version id gets its own hash, and every command (holds included) carries the hash of the model it came from.
    other = save_checkpoint(tmp_path / "again" / "v9", build_policy(tiny_policy_config, 1).net.eval(), "v9")
    retrained = load_version(other)
    assert retrained.version == "v9" and retrained.sha256 == file_sha256(other / MODEL_FILE) != digest
    controller = PolicyController(ControlConfig(family="pick_place"))
    controller.swap(loaded)
    assert (controller.tick(0.0).version, controller.tick(0.0).sha256) == ("v9", digest)
    controller.swap(retrained)
    held = controller.tick(0.0)
    assert held.hold and (held.version, held.sha256) == ("v9", retrained.sha256)


@pytest.mark.parametrize(("kwargs", "field"), [({"max_input_age": 0.0}, "max_input_age"),
                                               ({"max_delta": 1.0}, "max_delta"),
                                               ({"control_rate_hz": 0.0}, "control_rate_hz")])
def test_bad_control_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"ControlConfig.{field}"):
        ControlConfig(**kwargs)


def test_a_version_runs_only_at_the_rate_it_was_trained_at(tmp_path, tiny_policy_config):
    """The checkpoint stores its control rate; load_version (the policy node's) refuses another one."""
    import json

    from coda_policy.checkpoint import CONFIG_FILE, TRAINED_CONTROL_HZ, read_config, trained_control_hz

    net = build_policy(tiny_policy_config, 0).net.eval()
    folder = save_checkpoint(tmp_path / "v10", net, "v10")
    assert trained_control_hz(read_config(folder)) == TRAINED_CONTROL_HZ == SimArm().config.control_hz
    assert load_version(folder, control_hz=TRAINED_CONTROL_HZ).version == "v10"
    with pytest.raises(ValueError, match=r"v10 was trained at 10 Hz and cannot run at 20 Hz"):
        load_version(folder, control_hz=20.0)
    fast = save_checkpoint(tmp_path / "v20", net, "v20", control_hz=20.0)
    assert load_version(fast, control_hz=20.0).version == "v20"
    with pytest.raises(ValueError, match="trained at 20 Hz and cannot run at 10 Hz"):
        load_version(fast, control_hz=10.0)
    # A config.json of before the field: trained by the 10 Hz simulator, the only rate versions were trained at.
    config = json.loads((folder / CONFIG_FILE).read_text())
    del config["control_hz"]
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    assert load_version(folder, control_hz=10.0).version == "v10"
    config["control_hz"] = "fast"
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(ValueError, match="control_hz='fast' is not a rate"):
        load_version(folder, control_hz=10.0)
