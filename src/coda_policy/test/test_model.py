# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Policy network: layout, shapes, bounds, order invariance over object slots, config errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate
from coda_engine.sim.layout import LAYOUT, slot_offset
from coda_engine.sim.scene import SceneParams
from coda_policy.config import PolicyConfig, default_layout
from coda_policy.model import CodaPolicy, CodaPolicyNet, action_targets, to_metres
from coda_policy.sft import build_policy


def test_default_layout_matches_the_engine():
    engine = {k: v for k, v in LAYOUT.items() if not k.startswith(("target_", "goal_"))}
    assert default_layout() == engine
    assert PolicyConfig().obs_dim == LAYOUT["stage_index"][0] + 1


def test_shapes_and_bounds(tiny_policy_config):
    net = build_policy(tiny_policy_config, 0).net
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(5, tiny_policy_config.obs_dim, generator=gen)
    for i in range(tiny_policy_config.max_objects):
        obs[:, slot_offset(i) + 10] = 1.0
    mean, values = net(obs, torch.randn(5, 384, generator=gen))
    assert mean.shape == (5, 4) and values.shape == (5, tiny_policy_config.num_stages)
    assert torch.all(mean.abs() <= 1.0)
    net.set_num_stages(3)
    _, values = net(obs, torch.randn(5, 384, generator=gen))
    heads = net.value_heads(torch.tensor([0, 1, 2, 7, 3]))
    assert heads.tolist() == [0, 1, 2, 2, 2]  # past the last stage: the last head
    assert torch.equal(net.head_value(values, heads), values[torch.arange(5), heads])


def _scene_obs(seed: int) -> np.ndarray:
    params = SceneParams(num_distractors=(3, 3))
    scene = generate("pick_place", np.random.default_rng(seed), params)
    return SimArm().reset(scene)


def _permute_slots(obs: np.ndarray, order: list[int]) -> np.ndarray:
    out = obs.copy()
    width = slot_offset(1) - slot_offset(0)
    for new, old in enumerate(order):
        out[slot_offset(new):slot_offset(new) + width] = obs[slot_offset(old):slot_offset(old) + width]
    return out


def test_permuting_object_slots_leaves_the_action_unchanged(tiny_policy_config, embedder):
    net = build_policy(tiny_policy_config, 1).net.eval()
    obs = _scene_obs(3)
    assert obs[slot_offset(4) + 10] == 1.0 and obs[slot_offset(6) + 10] == 0.0  # 2 + 3 objects, 2 empty slots
    instr = torch.from_numpy(embedder.embed(["place the red cube in the blue bin"]))
    orders = [[1, 0, 2, 3, 4, 5, 6], [0, 1, 4, 2, 3, 5, 6], [6, 4, 0, 5, 2, 1, 3]]
    with torch.no_grad():
        base, base_v = net(torch.from_numpy(obs)[None], instr)
        for order in orders:
            mean, values = net(torch.from_numpy(_permute_slots(obs, order))[None], instr)
            torch.testing.assert_close(mean, base, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(values, base_v, atol=1e-5, rtol=1e-5)
        # A change in a distractor's attributes does reach the output (the slots are not ignored).
        moved = obs.copy()
        moved[slot_offset(3):slot_offset(3) + 3] += 0.2
        assert not torch.allclose(net(torch.from_numpy(moved)[None], instr)[0], base)


def test_select_action_and_unit_conversion(tiny_policy_config, embedder):
    policy = CodaPolicy(CodaPolicyNet(tiny_policy_config))
    with pytest.raises(RuntimeError, match="reset"):
        policy.select_action(_scene_obs(0))
    policy.reset(embedder.embed_one("reach the red ball"))
    action = policy.select_action(_scene_obs(0))
    assert action.shape == (4,) and np.all(np.abs(action) <= 1.0)
    sampled = policy.select_action(np.stack([_scene_obs(0)] * 3), generator=torch.Generator().manual_seed(0))
    assert sampled.shape == (3, 4)
    metres = to_metres(np.array([1.0, -2.0, 0.5, 0.3]), 0.05)
    np.testing.assert_allclose(metres, [0.05, -0.05, 0.025, 0.3], rtol=1e-6)
    np.testing.assert_allclose(action_targets(metres, 0.05), [1.0, -1.0, 0.5, 0.3], rtol=1e-6)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"d_model": 30, "num_heads": 4}, "num_heads"),
    ({"num_stages": 0}, "num_stages"),
    ({"max_delta": 0.5}, "max_delta"),
    ({"layout": {"ee_pos": (0, 3)}}, "layout"),
])
def test_bad_policy_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"PolicyConfig.{field}"):
        PolicyConfig(**kwargs)


def test_config_dict_round_trip():
    cfg = PolicyConfig(d_model=32, num_heads=2, num_stages=3)
    assert PolicyConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown fields"):
        PolicyConfig.from_dict({**cfg.to_dict(), "bogus": 1})
