# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Simulated arm, IK, observation layout, stage programs, gymnasium env and the scripted experts."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from coda_engine.sim import stages
from coda_engine.sim.arm import SimArm
from coda_engine.sim.env import CodaSimEnv, make_batch
from coda_engine.sim.expert import collect_demonstrations, run_expert
from coda_engine.sim.families import FAMILIES
from coda_engine.sim.generator import generate
from coda_engine.sim.layout import LAYOUT, OBS_DIM, scene_layout
from coda_engine.sim.scene import SceneParams


@pytest.fixture(scope="module")
def arm():
    sim = SimArm()
    yield sim
    sim.close()


def test_ik_reaches_targets(arm):
    arm.reset(generate("reach", np.random.default_rng(0)))
    for target in ([0.5, 0.1, 0.1], [0.35, -0.25, 0.05], [0.6, 0.2, 0.25]):
        q = arm.ik(np.array(target), arm.joint_positions()[:7], iterations=60)
        assert arm._ik.position_error(q, np.array(target)) < 0.003


def test_step_moves_the_tool_by_the_commanded_displacement(arm):
    arm.reset(generate("reach", np.random.default_rng(1)))
    start = arm.tcp_position()
    for _ in range(4):
        arm.step(np.array([0.03, -0.02, 0.01, -1.0]))
    arm.step(np.zeros(4))
    assert np.allclose(arm.tcp_position() - start, [0.12, -0.08, 0.04], atol=0.01)
    with pytest.raises(ValueError, match="finite"):
        arm.step(np.array([np.nan, 0, 0, 0]))
    assert arm.joint_positions().shape == (9,) and arm.joint_velocities().shape == (9,)


def test_observation_layout_matches_the_scene(arm):
    scene = generate("stack", np.random.default_rng(2))
    obs = arm.reset(scene)
    assert obs.dtype == np.float32 and obs.shape == (OBS_DIM,)
    layout = scene_layout(scene)

    def part(name):
        offset, length = layout[name]
        return obs[offset:offset + length]

    assert np.allclose(part("target_pos"), scene.target.position, atol=1e-4)
    assert np.allclose(part(f"{scene.goal_object}_size"), scene.goal.size)
    assert part("obj1_present")[0] == 1.0 and part(f"obj{len(scene.objects)}_present")[0] == 0.0
    assert all(1 <= n <= 3 for _, n in LAYOUT.values())
    frame = arm.render(64, 64)
    assert frame.shape == (64, 64, 3) and frame.std() > 5


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_expert_succeeds_and_program_reaches_its_last_stage(arm, family):
    rng = np.random.default_rng(11)
    program = stages.compile_program(FAMILIES[family].program, LAYOUT)
    wins = 0
    for _ in range(10):
        episode = run_expert(arm, generate(family, rng, SceneParams()), stop_on_success=True)
        wins += episode.success
        assert np.all(np.diff(episode.stages) >= 0)
        if episode.success:
            assert episode.stages[-1] == program.num_stages
    assert wins >= 9


def test_a_shaping_program_does_not_change_the_stage_the_policy_reads(arm):
    """A program with an inserted stage is tracked in ``stage``/``phi``; the observation keeps the default index."""
    default = FAMILIES["pick_place"].program
    first = default.split("stage grasp:")[0]
    inserted = first.replace("stage reach:", "stage approach:").replace("/ 0.4", "/ 0.2") + default
    scene = generate("pick_place", np.random.default_rng(3), SceneParams())
    expert = FAMILIES["pick_place"].expert
    runs = {}
    for program in (None, inserted):
        obs = arm.reset(scene, program)
        act = expert()
        act.reset()
        rows, tracked = [obs], [arm.stage]
        for _ in range(120):
            obs = arm.step(np.asarray(act.act(arm.world_state()), dtype=np.float64))
            rows.append(obs)
            tracked.append(arm.stage)
        runs[program is None] = (np.asarray(rows), np.asarray(tracked), arm.success())
    (plain, plain_stages, ok), (shaped, shaped_stages, ok2) = runs[True], runs[False]
    assert ok and ok2
    column = LAYOUT["stage_index"][0]
    np.testing.assert_array_equal(shaped, plain)  # the same observations, stage index included
    np.testing.assert_array_equal(plain[:, column], plain_stages)
    assert plain_stages[-1] == 4 and shaped_stages[-1] == 5  # the inserted stage is tracked beside it
    assert np.any(shaped_stages != plain_stages)
    arm.reset(scene)
    assert arm.stage == arm.input_stage


def test_demonstrations_are_written(tmp_path):
    path = tmp_path / "demos.npz"
    data = collect_demonstrations("reach", np.random.default_rng(5), SceneParams(), 2, path)
    saved = np.load(path)
    assert saved["observations"].shape[1] == OBS_DIM
    assert len(saved["actions"]) == len(saved["observations"]) == len(data["episode"])
    assert len(saved["instructions"]) == 2


def test_env_passes_gymnasium_checker():
    env = CodaSimEnv("pick_place")
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs) and "stage" in info and info["success"] is False
    obs, reward, terminated, _, info = env.step(env.action_space.sample())
    assert reward == 0.0 and not terminated and info["instruction"] == env.instruction
    env.close()


def test_batch_of_envs_steps_together():
    batch = make_batch(3, "reach", SceneParams())
    obs, info = batch.reset(seed=0)
    assert obs.shape == (3, OBS_DIM)
    for _ in range(3):
        obs, _, _, _, info = batch.step(np.zeros((3, 4), np.float32))
    assert obs.shape == (3, OBS_DIM) and info["stage"].shape == (3,)
    assert isinstance(batch, gym.vector.VectorEnv)
    batch.close()


@pytest.mark.parametrize(("family", "stage"), [("pick_place", 2), ("pick_place", 3), ("push", 1)])
def test_env_can_start_where_the_expert_enters_a_stage(family, stage):
    """``start_stage``: the scripted expert drives to the stage; its steps count toward the step limit."""
    env = CodaSimEnv(family)
    default = stages.compile_program(FAMILIES[family].program, LAYOUT)
    obs, info = env.reset(seed=5, options={"start_stage": stage})
    _, reached = default.evaluate(obs, 0)
    assert reached >= stage and not info["success"]
    used = env._steps
    assert 0 < used <= FAMILIES[family].max_steps // 2
    truncated = False
    for _ in range(FAMILIES[family].max_steps - used):  # the episode has the rest of the limit, no more
        _, _, terminated, truncated, _ = env.step(np.zeros(4, np.float32))
        assert not terminated
    assert truncated
    fresh, _ = env.reset(seed=5)
    assert env._steps == 0 and default.evaluate(fresh, 0)[1] == 0
    env.close()
