# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""A recorded behaviour-cloning step (``coda_policy.finetune``): trained, recorded, replayed, changed."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from coda_engine.sim.families import get_family
from coda_engine.sim.layout import LAYOUT
from coda_engine.sim.stages import compile_program
from coda_policy.checkpoint import load_policy, read_config, save_checkpoint
from coda_policy.finetune import (
    FinetuneConfig,
    episode_potential_gains,
    finetune,
    potential_gain_weights,
    replay_finetune_config,
    stage_balanced_weights,
)
from coda_policy.model import CodaPolicyNet


def test_stage_balanced_weights_give_each_stage_of_a_family_the_same_share() -> None:
    family = np.array([0, 0, 0, 0, 1, 1])
    stage = np.array([0, 0, 0, 1, 2, 2])
    w = stage_balanced_weights(family, stage)
    # family 0: stage 0 (3 rows) and stage 1 (1 row) half each of its 4 rows' mass; family 1 keeps its 2 rows
    np.testing.assert_allclose(w, [2 / 3, 2 / 3, 2 / 3, 2.0, 1.0, 1.0])
    assert w[family == 0].sum() == pytest.approx(4) and w[family == 1].sum() == pytest.approx(2)


ONE_STAGE = """stage slide:
  progress = clip(ee_pos.x, 0, 1)
  done     = ee_pos.x > 2
"""


def _rows(xs: list[float]) -> np.ndarray:
    obs = np.zeros((len(xs), LAYOUT["stage_index"][0] + 1), dtype=np.float32)
    obs[:, LAYOUT["ee_pos"][0]] = xs
    return obs


def test_potential_gains_follow_each_episode_and_stop_at_its_end() -> None:
    program = compile_program(ONE_STAGE, LAYOUT)
    obs = _rows([0.1, 0.3, 0.2, 0.6, 0.0, 0.5])
    episode = np.array([3, 3, 3, 3, 8, 8])
    gains = episode_potential_gains(obs, episode, program)
    phi = [program.evaluate(o, 0)[0] for o in obs]
    # within an episode: the next row's potential minus this row's; the last row of each episode gains nothing
    np.testing.assert_allclose(gains, [phi[1] - phi[0], phi[2] - phi[1], phi[3] - phi[2], 0.0,
                                       phi[5] - phi[4], 0.0], atol=1e-6)
    assert gains[0] > 0 and gains[1] < 0


def test_potential_gain_weights_favour_progress_and_keep_family_shares() -> None:
    obs = _rows([0.1, 0.3, 0.3, 0.6, 0.0, 0.0, 0.5])
    episode = np.array([0, 0, 0, 0, 1, 1, 1])
    family = np.array([0, 0, 0, 0, 1, 1, 1])
    w, used = potential_gain_weights(obs, episode, family, ("reach", "push"), {"reach": ONE_STAGE}, 1.0)
    assert used == {"reach": "round", "push": "default"}
    assert w[family == 0].sum() == pytest.approx(4) and w[family == 1].sum() == pytest.approx(3)
    # reach rows 0 and 2 raise the potential (0.2 and 0.3), row 1 and the episode's last row do not
    assert w[2] > w[0] > w[1] and w[1] == pytest.approx(w[3])
    flat, _ = potential_gain_weights(obs, episode, family, ("reach", "push"), {"reach": ONE_STAGE}, 0.0)
    np.testing.assert_allclose(flat, 1.0)
    # a program naming scene objects cannot be read from the stored observations: the family's default is used
    named = ONE_STAGE.replace("ee_pos.x, 0, 1", "dist(ee_pos, red_cube_pos), 0, 1")
    _, used = potential_gain_weights(obs, episode, family, ("reach", "push"), {"reach": named}, 1.0)
    assert used["reach"] == "default"
    default = compile_program(get_family("reach").program, LAYOUT)
    assert np.any(episode_potential_gains(obs[:4], episode[:4], default) != 0)


@pytest.fixture
def recorded_step(tmp_path: Path, small_demos, tiny_policy_config) -> tuple[FinetuneConfig, Path]:
    """Write a 12-step fine-tune of an untrained tiny policy on two demonstration files, laid out as a loop run's."""
    ckpts, demos = tmp_path / "run" / "checkpoints", tmp_path / "run" / "demos"
    save_checkpoint(ckpts / "parent", CodaPolicyNet(tiny_policy_config), "parent")
    demos.mkdir()
    first = small_demos.subset(np.unique(small_demos.episode)[::2])
    first.save(demos / "r000.npz")
    small_demos.save(demos / "r001.npz")
    cfg = FinetuneConfig(init_from=str(ckpts / "parent"), demos=(str(demos / "r000.npz"),
                         str(demos / "r001.npz")), steps=12, lr=1e-3, warmup_steps=3, split_seed=(5, 1, 2),
                         batch_seed=5001, families=("reach", "push"), batch_size=32, eval_every=6,
                         focus_from_episode=first.num_episodes, focus_share=0.25, torch_threads=1)
    finetune(cfg, ckpts / "step", "step", {"round": 1})
    return cfg, ckpts / "step"


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    return load_policy(folder)[0].state_dict()


def test_a_recorded_step_replays_to_the_same_weights_and_changes_one_thing_at_a_time(recorded_step, tmp_path):
    cfg, folder = recorded_step
    meta = read_config(folder)["meta"]
    assert meta["trainer"] == "loop-bc" and meta["round"] == 1 and meta["finetune"] == cfg.to_dict()
    again = replay_finetune_config(folder)
    assert again == cfg
    finetune(again, tmp_path / "again", "step")
    first, second = _tensors(folder), _tensors(tmp_path / "again")
    assert all(torch.equal(first[k], second[k]) for k in first)
    changed = replay_finetune_config(folder, batches="stage-balanced")
    assert changed.batches == "stage-balanced" and changed.steps == cfg.steps
    finetune(changed, tmp_path / "balanced", "step")
    balanced = _tensors(tmp_path / "balanced")
    assert not all(torch.equal(first[k], balanced[k]) for k in first)
    # (they differ because the data holds several stages per family, whose shares the balancing changes)
    from coda_policy.data import DemoSet

    stages = np.rint(DemoSet.load(cfg.demos[1]).obs[:, LAYOUT["stage_index"][0]])
    assert len(np.unique(stages)) > 1


def test_a_replay_given_the_recorded_meta_writes_its_own_record(recorded_step, tmp_path):
    cfg, folder = recorded_step
    recorded = read_config(folder)["meta"]
    stale = {**recorded, "trainer": "sft", "finetune_programs_used": {"push": "round"}}
    finetune(replay_finetune_config(folder, steps=2), tmp_path / "again", "step", stale)
    meta = read_config(tmp_path / "again")["meta"]
    # the context is kept; the trainer, the settings and the programs used are the replay's own (uniform batches)
    assert meta["round"] == 1 and meta["trainer"] == "loop-bc"
    assert meta["finetune"]["steps"] == 2 and recorded["finetune"]["steps"] == cfg.steps == 12
    assert "finetune_programs_used" not in meta


def test_replay_names_what_is_missing_or_wrong(recorded_step, tmp_path):
    cfg, folder = recorded_step
    with pytest.raises(ValueError, match="no such setting to change: epochs"):
        replay_finetune_config(folder, epochs=3)
    with pytest.raises(ValueError, match="batches='sorted'"):
        replay_finetune_config(folder, batches="sorted")
    with pytest.raises(ValueError, match="is not a checkpoint folder"):
        replay_finetune_config(folder, init_from=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="records no behaviour-cloning step"):
        replay_finetune_config(folder.parent / "parent")
    # a run folder moved whole: the recorded paths are gone, the same files are found by the run's layout
    shutil.move(tmp_path / "run", tmp_path / "elsewhere")
    folder = tmp_path / "elsewhere" / "checkpoints" / "step"
    moved = replay_finetune_config(folder)
    assert moved.init_from == str(folder.parent / "parent")
    assert moved.demos == tuple(str(tmp_path / "elsewhere" / "demos" / f"r00{r}.npz") for r in (0, 1))
    shutil.move(folder.parent / "parent", tmp_path / "moved")
    with pytest.raises(ValueError, match=r"initial policy .* is gone"):
        replay_finetune_config(folder)
    assert replay_finetune_config(folder, init_from=str(tmp_path / "moved")).init_from == str(tmp_path / "moved")
    (tmp_path / "elsewhere" / "demos" / "r001.npz").unlink()
    with pytest.raises(ValueError, match=r"r001\.npz of .* is gone"):
        replay_finetune_config(folder, init_from=str(tmp_path / "moved"))
    with pytest.raises(ValueError, match=r"FinetuneConfig\.steps=-1"):
        FinetuneConfig(**{**cfg.to_dict(), "steps": -1})
