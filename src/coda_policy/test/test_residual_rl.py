# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The residual head and the off-policy residual learner, on real simulated arms with a tiny policy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from coda_policy.checkpoint import load_policy, read_config, save_checkpoint
from coda_policy.config import ResidualRLConfig
from coda_policy.residual_rl import train_residual
from coda_policy.sft import build_policy


@pytest.fixture
def cloned(tmp_path: Path, tiny_policy_config) -> Path:
    """Return a saved (untrained) tiny policy standing in for a cloned one."""
    folder = tmp_path / "r000-sft"
    save_checkpoint(folder, build_policy(tiny_policy_config, 3).net.eval(), folder.name)
    return folder


def _cfg(cloned: Path, out: Path, **kw) -> ResidualRLConfig:
    fields = {"init_from": str(cloned), "family": "reach", "total_env_steps": 96, "n_envs": 2, "learning_starts": 32,
              "value_warmup_updates": 20, "batch_size": 16, "updates_per_step": 1.0, "residual_hidden": 16,
              "critic_hidden": 32, "eval_episodes": 2, "output_dir": out, "version_id": "rl", **kw}
    return ResidualRLConfig(**fields)


def test_a_new_residual_head_leaves_the_actions_as_they_were(tiny_policy_config) -> None:
    net = build_policy(tiny_policy_config, 0).net.eval()
    generator = torch.Generator().manual_seed(0)
    obs = torch.rand(5, tiny_policy_config.obs_dim, generator=generator)
    obs[:, net.index.present] = 1.0  # every slot holds an object (with none, attention has nothing to attend)
    instr = torch.randn(5, tiny_policy_config.instruction_dim, generator=generator)
    before, _ = net(obs, instr)
    net.add_residual(8, 0.2)
    after, _ = net(obs, instr)
    assert torch.equal(before, after)
    with torch.no_grad():
        net.residual[-1].bias.fill_(10.0)  # a saturated correction moves each action by at most the scale
    moved, _ = net(obs, instr)
    assert torch.all((moved - before).abs() <= 0.2 + 1e-6) and torch.any((moved - before).abs() > 0.1)


def test_the_learner_trains_only_the_residual_and_its_result_loads_everywhere(cloned: Path, tmp_path: Path,
                                                                              embedder) -> None:
    result = train_residual(_cfg(cloned, tmp_path / "a"), embedder)
    assert result.env_steps == 96 and result.updates > 0 and result.episodes >= 0
    first, last = result.warmup_value_loss
    assert last < first, "the staged value warm-up did not fit the critics to the potential"
    assert result.eval_success_init is not None and result.eval_success is not None
    base, tuned = load_file(cloned / "model.safetensors"), load_file(result.folder / "model.safetensors")
    assert set(tuned) - set(base) and all(k.startswith("residual.") for k in set(tuned) - set(base))
    assert all(np.array_equal(base[k], tuned[k]) for k in base), "the cloned policy's weights changed"
    assert np.any(tuned["residual.4.weight"] != 0), "the residual head did not learn"
    net, config = load_policy(result.folder)  # what the sim workers, the policy node and the loop call
    assert net.residual is not None and config["policy"]["residual_hidden"] == 16
    meta = read_config(result.folder)["meta"]
    assert meta["trainer"] == "residual_rl" and meta["residual_rl"]["total_env_steps"] == 96
    again = train_residual(_cfg(cloned, tmp_path / "b"), embedder)  # the same seed: the same weights
    twin = load_file(again.folder / "model.safetensors")
    assert all(np.array_equal(tuned[k], twin[k]) for k in tuned)
    # a policy that already has a residual head (cloned after an earlier round's RL) trains that head further
    more = train_residual(_cfg(result.folder, tmp_path / "c"), embedder)
    further = load_file(more.folder / "model.safetensors")
    assert set(further) == set(tuned) and all(np.array_equal(tuned[k], further[k]) for k in base)
    assert any(not np.array_equal(tuned[k], further[k]) for k in further if k.startswith("residual."))


def test_bad_settings_name_the_field(cloned: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="init_from='/nowhere' is not a checkpoint folder"):
        _cfg(cloned, tmp_path, init_from="/nowhere")
    with pytest.raises(ValueError, match=r"residual_scale=0.0 must be in \(0.0, 1.0\]"):
        _cfg(cloned, tmp_path, residual_scale=0.0)
    with pytest.raises(ValueError, match=r"start_stage_share=2\.0 must be in"):
        _cfg(cloned, tmp_path, start_stage_share=2.0)
