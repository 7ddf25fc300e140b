# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Behaviour cloning on real demonstrations, checkpoints, serving through the engine's resolver, determinism."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from coda_engine.policies import resolve
from coda_engine.sim.arm import SimArm
from coda_engine.sim.expert import run_episode
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams
from coda_policy.checkpoint import CONFIG_FILE, MODEL_FILE, load_policy, save_checkpoint
from coda_policy.data import concat
from coda_policy.metrics import read_metrics
from coda_policy.sft import SFTConfig, build_policy, train_sft


def _cfg(tmp_path, tiny_policy_config, **kw) -> SFTConfig:
    base = {"families": ("reach", "push"), "episodes_per_family": 4, "steps": 60, "batch_size": 64,
            "eval_every": 20, "eval_episodes": 0, "lr": 3e-3, "output_dir": tmp_path, "progress": False,
            "policy": tiny_policy_config, "val_fraction": 0.25}
    return SFTConfig(**{**base, **kw})


def test_sft_loss_decreases_on_real_demos(tmp_path, tiny_policy_config, embedder, small_demos):
    result = train_sft(_cfg(tmp_path, tiny_policy_config), embedder, small_demos)
    assert result.val_loss < 0.7 * result.first_val_loss
    rows = read_metrics(result.folder / "metrics.jsonl", "train")
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    config = json.loads((result.folder / CONFIG_FILE).read_text())
    assert config["version_id"] == result.version_id == result.folder.name
    assert config["meta"]["trainer"] == "sft"


def test_sft_is_deterministic_for_a_seed(tmp_path, tiny_policy_config, embedder, small_demos):
    a = train_sft(_cfg(tmp_path / "a", tiny_policy_config, steps=15), embedder, small_demos)
    b = train_sft(_cfg(tmp_path / "b", tiny_policy_config, steps=15), embedder, small_demos)
    c = train_sft(_cfg(tmp_path / "c", tiny_policy_config, steps=15, seed=1), embedder, small_demos)
    net_a, net_b, net_c = (load_policy(r.folder)[0] for r in (a, b, c))
    for (name, pa), pb in zip(net_a.state_dict().items(), net_b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert not all(torch.equal(pa, pc) for pa, pc in zip(net_a.state_dict().values(), net_c.state_dict().values(),
                                                          strict=True))


def test_concat_renumbers_episodes_and_keeps_instructions(small_demos):
    train, val = small_demos.split(0.25, np.random.default_rng(0))
    both = concat([train, val, train])
    assert len(both) == 2 * len(train) + len(val)
    assert both.num_episodes == 3 * small_demos.num_episodes
    assert len(np.unique(both.episode)) == 2 * len(np.unique(train.episode)) + len(np.unique(val.episode))
    tensors, parts = both.tensors(), [train.tensors(), val.tensors(), train.tensors()]
    for key in ("obs", "instr", "action", "family"):
        assert torch.equal(tensors[key], torch.cat([p[key] for p in parts])), key
    other = concat([small_demos.subset(np.array([0]))])
    other.families = ("reach", "stack")
    with pytest.raises(ValueError, match="families"):
        concat([small_demos, other])
    with pytest.raises(ValueError, match="at least one"):
        concat([])


def test_checkpoint_round_trip_is_bit_exact(tmp_path, tiny_policy_config):
    net = build_policy(tiny_policy_config, 5).net.eval()
    with torch.no_grad():
        net.log_std.add_(0.123)
    folder = save_checkpoint(tmp_path / "v1", net, "v1", {"note": "test"})
    assert (folder / MODEL_FILE).is_file()
    loaded, config = load_policy(folder)
    assert config["version_id"] == "v1" and config["meta"] == {"note": "test"}
    assert loaded.cfg == net.cfg
    for (name, a), b in zip(net.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    gen = torch.Generator().manual_seed(0)
    obs, instr = torch.rand(4, net.cfg.obs_dim, generator=gen), torch.randn(4, 384, generator=gen)
    obs[:, net.index.present] = 1.0
    with torch.no_grad():
        assert torch.equal(net(obs, instr)[0], loaded(obs, instr)[0])


def test_checkpoint_errors(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint config"):
        load_policy(tmp_path)
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"format": 99}))
    with pytest.raises(ValueError, match="format 99"):
        load_policy(tmp_path)


def test_engine_resolver_runs_a_saved_version(tmp_path, tiny_policy_config):
    net = build_policy(tiny_policy_config, 2).net.eval()
    save_checkpoint(tmp_path / "pol-1", net, "pol-1")
    scene = generate("reach", np.random.default_rng(0), SceneParams())
    act = resolve("pol-1", scene, tmp_path)
    episode = run_episode(SimArm(), scene, act, max_steps=5)
    assert episode.steps == 5 and np.all(np.isfinite(episode.actions))
    assert np.all(np.abs(episode.actions[:, :3]) <= 0.05 + 1e-7) and np.all(np.abs(episode.actions[:, 3]) <= 1.0)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"val_fraction": 0.0}, "val_fraction"),
    ({"families": ("fly",)}, "families"),
    ({"episodes_per_family": 1}, "episodes_per_family"),
    ({"steps": 0}, "steps"),
])
def test_bad_sft_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"SFTConfig.{field}"):
        SFTConfig(**kwargs)


def test_focus_rows_get_their_share_of_every_batch(tmp_path, tiny_policy_config, small_demos):
    """``fit_bc`` with a focus set: those rows are learnt as if they were ``focus_share`` of the data."""
    from coda_policy.metrics import MetricsLog
    from coda_policy.sft import fit_bc, validation_loss

    data = small_demos.tensors()
    focus = torch.arange(0, len(data["obs"]), 20)  # one row in 20, with actions nobody would imitate otherwise
    data["action"] = data["action"].clone()
    data["action"][focus] = torch.tensor([0.9, -0.9, 0.9, 0.9])
    only = {k: v[focus] for k, v in data.items()}
    cfg = SFTConfig(families=("reach", "push"), batch_size=64, eval_every=50, progress=False)
    losses = []
    for share in (0.0, 0.5):
        policy = build_policy(tiny_policy_config, 0)
        log = MetricsLog(tmp_path / f"metrics-{share}.jsonl")
        fit_bc(policy, data, only, 100, 3e-3, cfg, log, torch.Generator().manual_seed(0), "focus",
               focus=focus, focus_share=share)
        losses.append(validation_loss(policy, only))
    assert losses[1] < 0.5 * losses[0]
    with pytest.raises(ValueError, match=r"focus_share=1\.0"):
        fit_bc(build_policy(tiny_policy_config, 0), data, only, 1, 1e-3, cfg, MetricsLog(tmp_path / "m.jsonl"),
               torch.Generator(), "focus", focus=focus, focus_share=1.0)


def test_the_same_weights_give_the_same_file_bytes(tmp_path, tiny_policy_config):
    """Equal weights give an equal file.

    The memory, the workers' caches and the policy node name a version by its file's sha256 (a header whose
    metadata order varied between saves once broke that).
    """
    from coda_engine.digests import file_sha256

    net = build_policy(tiny_policy_config, 5).net.eval()
    digests = {file_sha256(save_checkpoint(tmp_path / f"copy{i}", net, "v1") / MODEL_FILE) for i in range(12)}
    assert len(digests) == 1
