# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""DAgger on the real simulator: state-derived expert phases, relabelled rollouts, aggregation, resumable rounds."""

from __future__ import annotations

import numpy as np
import pytest

from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import run_episode
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams
from coda_engine.sim.state_expert import StateExpert
from coda_policy.checkpoint import load_policy
from coda_policy.dagger import DAggerConfig, relabelled_rollouts, train_dagger
from coda_policy.data import DemoSet
from coda_policy.model import action_targets
from coda_policy.serving import make_action_fn
from coda_policy.sft import SFTConfig, build_policy


@pytest.fixture(scope="module")
def arm() -> SimArm:
    return SimArm()


def _replay(net, embedder, family, seed):
    """Run the policy on the first scene of ``seed``; return its observations and the state expert's labels."""
    scene = generate(family, np.random.default_rng(seed), SceneParams())
    policy = make_action_fn(net, embedder.embed_one(scene.instruction))
    expert = StateExpert(family)
    expert.reset()
    seen, said = [], []

    def act(o, s):
        seen.append(o)
        said.append(expert.act(s))
        return policy(o, s)

    run_episode(SimArm(), scene, act)
    return np.stack(seen), np.stack(said)


def test_rollouts_record_visited_states_with_expert_labels(embedder, tiny_policy_config):
    net = build_policy(tiny_policy_config, 3).net.eval()
    data, success = relabelled_rollouts(
        net, ("push",), 1, np.random.default_rng(5), "id", embedder, beta=0.0, noise=0.0
    )
    obs, labels = _replay(net, embedder, "push", 5)
    assert set(success) == {"push"} and data.num_episodes == 1 and data.families == ("push",)
    np.testing.assert_array_equal(data.obs, obs)  # beta 0: the policy drove
    np.testing.assert_allclose(data.actions, action_targets(labels, net.cfg.max_delta), atol=1e-6)
    assert data.embeddings.shape == (1, 384) and np.all(data.family == 0)
    # The untrained policy does not act like the expert: the labels are not its own actions.
    own = np.stack([make_action_fn(net, data.embeddings[0])(o) for o in obs[:5]])
    assert np.abs(action_targets(own, net.cfg.max_delta) - data.actions[:5]).max() > 0.1


def test_beta_one_executes_the_expert(embedder, tiny_policy_config):
    net = build_policy(tiny_policy_config, 3).net.eval()
    data, success = relabelled_rollouts(
        net, ("pick_place",), 1, np.random.default_rng(9), "id", embedder, beta=1.0, noise=0.0
    )
    assert success == {"pick_place": 1.0}
    gripper = data.actions[:, 3]
    assert gripper[0] < 0 and gripper.max() > 0  # opened to approach, closed to grasp


@pytest.mark.slow
def test_dagger_rounds_aggregate_train_and_resume(tmp_path, embedder, tiny_policy_config, small_demos):
    sft = SFTConfig(
        families=("reach", "push"),
        episodes_per_family=4,
        steps=20,
        batch_size=64,
        eval_every=10,
        eval_episodes=0,
        output_dir=tmp_path,
        progress=False,
        policy=tiny_policy_config,
        val_fraction=0.25,
    )
    cfg = DAggerConfig(sft=sft, rounds=2, episodes_per_round=2, steps_per_round=10, beta=0.5)
    result = train_dagger(cfg, embedder, small_demos)
    first, second = result.rounds
    assert first["rollout_steps"] > 0 and second["rollout_steps"] > 0
    assert second["train_steps"] == first["train_steps"] + second["rollout_steps"]  # the set grows
    assert first["train_steps"] > first["rollout_steps"]  # and holds the demonstrations
    assert second["beta"] == pytest.approx(0.25)
    assert np.isfinite(second["val_loss"]) and second["val_loss"] != second["val_loss_before"]  # it trained
    for k in (1, 2):
        rollouts = DemoSet.load(result.folder / "rounds" / f"round{k}.npz")
        assert rollouts.num_episodes == 4 and rollouts.families == ("reach", "push")
    net, config = load_policy(result.folder)
    assert config["meta"]["trainer"] == "dagger" and config["version_id"] == result.version_id
    again = train_dagger(cfg, embedder, small_demos)  # both rounds are on disk: nothing is redone
    assert [r.get("resumed") for r in again.rounds] == [True, True]
    resumed, _ = load_policy(again.folder)
    for (name, a), b in zip(net.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert np.array_equal(a.numpy(), b.numpy()), name


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rounds": 0}, "rounds"),
        ({"beta": 1.5}, "beta"),
        ({"noise": -0.1}, "noise"),
        ({"init_from": "/nonexistent"}, "init_from"),
    ],
)
def test_bad_dagger_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"DAggerConfig.{field}"):
        DAggerConfig(**kwargs)
