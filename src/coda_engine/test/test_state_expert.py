# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The state-derived expert on the real simulator.

It solves the tasks, takes over any state, labels as a function of the state, and demonstrates through the same
entry points as the scripted expert.
"""

from __future__ import annotations

import numpy as np
import pytest

from coda_engine.policies import STATE_EXPERT, resolve
from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import collect_demonstrations, run_episode, run_expert
from coda_engine.sim.families import get_family
from coda_engine.sim.families.push import _push_height
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams
from coda_engine.sim.state_expert import StateExpert, demonstrator, off_table


@pytest.fixture(scope="module")
def arm() -> SimArm:
    return SimArm()


@pytest.mark.parametrize("family", ["pick_place", "push", "stack"])
def test_state_expert_alone_solves_the_task(arm, family):
    rng = np.random.default_rng(11)
    for _ in range(2):
        expert = StateExpert(family)
        expert.reset()
        assert run_episode(arm, generate(family, rng, SceneParams()), lambda o, s, e=expert: e.act(s)).success


def test_state_expert_takes_over_a_carried_object(arm):
    """A fresh engine expert starts in "approach" and opens the gripper; the state expert keeps carrying."""
    scene = generate("pick_place", np.random.default_rng(3), SceneParams())
    driver = get_family("pick_place").expert()
    driver.reset()
    arm.reset(scene)
    for _ in range(80):
        if driver.phase == "carry":
            break
        arm.step(driver.act(arm.world_state()))
    assert driver.phase == "carry"
    state = arm.world_state()
    fresh = get_family("pick_place").expert()
    fresh.reset()
    assert fresh.act(state)[3] < 0  # the stateful expert would drop the object here
    taker = StateExpert("pick_place")
    taker.reset()
    action = taker.act(state)
    assert taker.phase in ("carry", "lower") and action[3] > 0
    for _ in range(60):  # and it finishes the task from there
        if arm.success():
            break
        arm.step(taker.act(arm.world_state()))
    assert arm.success()


def test_off_table_detects_a_fallen_object(arm):
    arm.reset(generate("push", np.random.default_rng(1), SceneParams()))
    state = arm.world_state()
    assert not off_table(state)
    state.positions[state.target.name] = np.array([0.9, 0.6, -0.4])
    assert off_table(state)


@pytest.mark.parametrize("family", ["pick_place", "push", "stack"])
def test_labels_are_a_function_of_the_state(arm, family):
    """On its own trajectory, a fresh state expert that saw only the previous state gives the running one's action.

    The scripted expert is not such a function (its phase and counters depend on the path), which is why every label
    of states the policy reached comes from this expert.
    """
    scene = generate(family, np.random.default_rng(5), SceneParams())
    running = StateExpert(family)
    running.reset()
    states: list = []
    actions: list[np.ndarray] = []

    def act(obs, state):
        states.append(state)
        actions.append(running.act(state))
        return actions[-1]

    assert run_episode(arm, scene, act).success
    for t in range(1, len(states)):
        fresh = StateExpert(family)
        fresh.reset()
        fresh.act(states[t - 1])  # the finger opening one step before (closing or settled)
        np.testing.assert_allclose(fresh.act(states[t]), actions[t], atol=1e-7, err_msg=f"{family} step {t}")


def test_state_expert_demonstrates_through_resolve_and_collect(arm):
    scene = generate("stack", np.random.default_rng(2), SceneParams())
    episode = run_episode(arm, scene, resolve(STATE_EXPERT, scene, None))
    assert episode.success
    replay = run_expert(arm, scene, STATE_EXPERT)  # deterministic: the same episode through run_expert
    np.testing.assert_array_equal(replay.actions, episode.actions)
    data = collect_demonstrations("stack", np.random.default_rng(2), SceneParams(), 1, arm=arm,
                                  demonstrator=STATE_EXPERT)
    np.testing.assert_array_equal(data["actions"], episode.actions)
    scripted = run_expert(arm, scene)  # the default demonstrator is the scripted one: a different, longer episode
    assert scripted.success and scripted.steps != episode.steps


def test_unknown_demonstrator_is_named():
    with pytest.raises(ValueError, match="demonstrator 'oracle' must be one of"):
        demonstrator("reach", "oracle")


def test_realign_push_goes_back_down_where_the_default_climbs(arm):
    """Push labels low behind the target depend on ``realign_push``.

    With it, a tool point just above the push height or just off the push line, behind the target (where a policy's
    push often is), goes back to the push's start without climbing, where the default climbs to re-approach; on the
    line at the push height both push, and far off to the side both climb.
    """
    scene = generate("push", np.random.default_rng(4), SceneParams())
    arm.reset(scene)
    state = arm.world_state()
    p, g = np.asarray(state.target_pos, float), np.asarray(state.goal_pos, float)
    u = (g[:2] - p[:2]) / np.linalg.norm(g[:2] - p[:2])
    side = np.array([-u[1], u[0]])
    reach = float(np.hypot(state.target_size[0], state.target_size[1]))
    push_z = _push_height(state)
    for realign in (False, True):
        expert = StateExpert("push", realign_push=realign)
        for perp, dz, want in ((0.03, 0.0, "back"), (0.0, 0.02, "back"), (0.0, 0.0, "push"), (0.08, 0.0, "up")):
            if want == "back" and not realign:
                want = "up"
            ee = np.array([*(p[:2] - (reach + 0.02) * u + perp * side), push_z + dz])
            expert.reset()
            action = expert.act(type(state)(**{**state.__dict__, "ee_pos": ee}))
            toward_goal = float(action[:2] @ u)
            if want == "back":
                assert action[2] <= 0.0 and toward_goal < 0.0, (realign, perp, dz, action)
            elif want == "push":
                assert toward_goal > 0.0 and abs(action[2]) < 0.01, (realign, perp, dz, action)
            else:
                assert action[2] > 0.0, (realign, perp, dz, action)


@pytest.mark.parametrize("realign", [False, True])
def test_state_expert_solves_push_with_either_labelling(arm, realign):
    rng = np.random.default_rng(12)
    for _ in range(2):
        expert = StateExpert("push", realign_push=realign)
        expert.reset()
        assert run_episode(arm, generate("push", rng, SceneParams()), lambda o, s, e=expert: e.act(s)).success
