# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Corrective demonstrations on the real simulator: where the expert takes over, and what is kept."""

from __future__ import annotations

import numpy as np
import pytest

from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import run_episode
from coda_engine.sim.families.push import _push_height
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams
from coda_policy.corrective import CorrectiveConfig, run_corrective, takeover_step, trace_takeover
from coda_policy.data import from_episodes
from coda_policy.model import action_targets


@pytest.fixture(scope="module")
def arm() -> SimArm:
    return SimArm()


def test_takeover_is_the_entry_of_the_failed_stage_minus_the_margin():
    steps, stages = [0, 2, 4, 6, 8, 10], [0, 0, 1, 1, 2, 2]
    assert takeover_step(steps, stages, failed_stage=2, margin=2) == 6
    assert takeover_step(steps, stages, failed_stage=1, margin=0) == 4
    assert takeover_step(steps, stages, failed_stage=1, margin=9) == 0  # never before the start
    assert takeover_step(steps, stages, failed_stage=3, margin=1) == 0  # a stage never reached: from the start
    assert takeover_step(steps, stages, failed_stage=-1, margin=1) == 0  # success has no failed stage
    # the failure's onset, when the critic knows it, decides
    assert takeover_step(steps, stages, failed_stage=0, margin=2, failure_step=9) == 7
    assert takeover_step(steps, stages, failed_stage=2, margin=2, failure_step=1) == 0
    with pytest.raises(ValueError, match="differ in length"):
        takeover_step(steps, stages[:-1], failed_stage=1, margin=0)


def test_trace_takeover_is_the_peak_of_the_recorded_progress_without_a_critic():
    steps = [0, 2, 4, 6, 8, 10]
    assert trace_takeover(steps, [0.1, 0.2, 0.35, 0.3, 0.2, 0.1], margin=2) == 2  # best progress at step 4
    assert trace_takeover(steps, [0.1, 0.2, 0.35, 0.35, 0.2, 0.1], margin=0) == 6  # its last step at the peak
    assert trace_takeover(steps, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], margin=1) == 9  # still rising: near the end
    assert trace_takeover(steps, [0.5, 0.4, 0.3, 0.2, 0.1, 0.0], margin=1) == 0  # never better than the start
    assert trace_takeover([], [], margin=1) == 0
    with pytest.raises(ValueError, match="differ in length"):
        trace_takeover(steps, [0.1], margin=1)


def test_config_rejects_negative_steps():
    with pytest.raises(ValueError, match="margin_steps=-1"):
        CorrectiveConfig(margin_steps=-1)


def test_expert_recovers_from_a_policy_that_wandered_off(arm):
    """A "policy" that drives the open gripper away and up fails; the expert takes over at step 6 and succeeds."""
    scene = generate("pick_place", np.random.default_rng(5), SceneParams())

    def wander(obs, state):
        return np.array([-0.03, 0.02, 0.02, -1.0], dtype=np.float32)

    assert not run_episode(arm, scene, wander).success
    result = run_corrective(arm, scene, wander, takeover=6, relabel=2)
    assert result.success
    assert result.takeover == 6 and result.policy_steps == 6
    # kept: the 2 relabelled policy steps and every expert step until success
    assert len(result.observations) == len(result.actions) == result.steps - 4
    assert result.observations.dtype == np.float32 and result.actions.shape[1] == 4
    # the relabelled states are the policy's (moving away), labelled with the expert's action (toward the target)
    first_label = result.actions[0]
    to_target = scene.target.position[:2] - result.observations[0][:2]
    assert float(first_label[:2] @ to_target) > 0.0
    # corrective demonstrations feed behaviour cloning like recorded episodes (one observation per action)
    class _Embed:
        def embed(self, texts):
            return np.zeros((len(texts), 384), dtype=np.float32)

    demos = from_episodes([result], ("reach", "pick_place"), _Embed(), 0.05)
    assert demos is not None and len(demos) == len(result.actions) and demos.num_episodes == 1
    np.testing.assert_allclose(demos.actions, action_targets(result.actions, 0.05))


def test_takeover_at_zero_is_the_state_expert_from_the_start(arm):
    scene = generate("stack", np.random.default_rng(8), SceneParams())
    result = run_corrective(arm, scene, lambda o, s: np.zeros(4, np.float32), takeover=0, relabel=3)
    assert result.success and result.policy_steps == 0 and len(result.actions) == result.steps


def test_rejects_negative_takeover(arm):
    scene = generate("reach", np.random.default_rng(1), SceneParams())
    with pytest.raises(ValueError, match="takeover=-1"):
        run_corrective(arm, scene, lambda o, s: np.zeros(4, np.float32), takeover=-1)


def test_a_takeover_never_reached_keeps_every_policy_step_with_the_experts_label(arm):
    """What ``relabel_successes`` keeps: the policy acts to its success; each of its states gets the expert's action."""
    from coda_engine.sim.state_expert import StateExpert

    scene = generate("reach", np.random.default_rng(3), SceneParams())
    slow = StateExpert("reach")
    slow.reset()
    taken: list[np.ndarray] = []

    def policy(obs, state):  # the expert's moves at 60% of their length: a different path to the same success
        action = np.asarray(slow.act(state), dtype=np.float32) * np.array([0.6, 0.6, 0.6, 1.0], np.float32)
        taken.append(action)
        return action

    never = 1 << 30
    result = run_corrective(arm, scene, policy, takeover=never, relabel=never)
    assert result.success and result.policy_steps == result.steps == len(taken)
    assert len(result.actions) == len(result.observations) == result.steps  # every policy step kept
    # the labels are the expert's, not the policy's: longer moves toward the target in the policy's own states
    moved = np.linalg.norm(np.asarray(taken)[:, :3], axis=1)
    labelled = np.linalg.norm(result.actions[:, :3], axis=1)
    assert float(labelled.sum()) > float(moved.sum()) * 1.2


@pytest.mark.parametrize("realign", [False, True])
def test_push_labels_low_behind_the_target_follow_realign_push(arm, realign):
    """A policy holding its tool 2 cm above the push height behind the target.

    The default labels climb away to re-approach, ``realign_push`` labels go back down toward the push's start.
    """
    scene = generate("push", np.random.default_rng(4), SceneParams())
    arm.reset(scene)
    state = arm.world_state()
    p, g = np.asarray(state.target_pos, float), np.asarray(state.goal_pos, float)
    u = (g[:2] - p[:2]) / np.linalg.norm(g[:2] - p[:2])
    reach = float(np.hypot(state.target_size[0], state.target_size[1]))
    hold = np.array([*(p[:2] - (reach + 0.02) * u), _push_height(state) + 0.02])

    def hover(obs, s):  # drive to the hold point and stay there, fingers closed
        return np.array([*np.clip(hold - np.asarray(s.ee_pos, float), -0.02, 0.02), -1.0], dtype=np.float32)

    never = 1 << 30
    result = run_corrective(arm, scene, hover, takeover=never, relabel=never, max_steps=60, realign_push=realign)
    assert not result.success and len(result.actions) == 60
    assert np.linalg.norm(np.asarray(arm.world_state().ee_pos) - hold) < 0.01  # the policy reached its hold point
    dz = float(result.actions[-1][2])
    assert (dz <= 0.0) if realign else (dz > 0.0), (realign, result.actions[-1])
