# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda train sft|rl|compare|replay`` end to end through the subcommand's module, with tiny settings."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from coda_policy import cli
from coda_policy.checkpoint import load_policy


@pytest.fixture
def main(coda_subcommand):
    """``coda train ARGS``."""
    return lambda argv: coda_subcommand(cli, argv)


def test_coda_train_sft_then_rl_from_it(tmp_path, capsys, embedder, main):
    assert main(["sft", "--families", "reach", "--episodes-per-family", "3", "--steps", "5",
                 "--batch-size", "16", "--eval-episodes", "1", "--output-dir", str(tmp_path), "--no-progress",
                 "--version-id", "sft-cli", "--demos-file", str(tmp_path / "reach.npz")]) == 0
    sft = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sft["version_id"] == "sft-cli" and set(sft["success"]) == {"reach"}
    assert main(["rl", "--family", "reach", "--n-envs", "2", "--n-steps", "8", "--total-env-steps", "16",
                 "--batch-size", "8", "--epochs", "1", "--output-dir", str(tmp_path), "--no-progress",
                 "--init-from", sft["folder"], "--version-id", "rl-cli", "--keep-successes", "4"]) == 0
    rl = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rl["env_steps"] == 16 and (tmp_path / "rl-cli" / "successes.npz").is_file() == (rl["successes"] > 0)
    net, config = load_policy(tmp_path / "rl-cli")
    assert config["meta"]["parent"] == sft["folder"] and net.cfg.num_stages == 2
    assert config["meta"]["rl"]["keep_successes"] == 4

    # replay: the recorded settings give the same weights; a budget or the sparse reward can be changed on top
    replays = tmp_path / "replays"
    assert main(["replay", str(tmp_path / "rl-cli"), "--output-dir", str(replays), "--version-id", "same",
                 "--no-progress"]) == 0
    same = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert same["replayed"] == str(tmp_path / "rl-cli") and same["env_steps"] == 16 and same["shaping"] is True
    again, _ = load_policy(replays / "same")
    for (name, a), b in zip(net.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert main(["replay", str(tmp_path / "rl-cli"), "--output-dir", str(replays), "--version-id", "sparse",
                 "--reward", "sparse", "--total-env-steps", "32", "--no-progress"]) == 0
    sparse = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sparse["env_steps"] == 32 and sparse["shaping"] is False
    recorded = load_policy(replays / "sparse")[1]["meta"]["rl"]
    assert recorded["program"] == "" and recorded["init_from"] == sft["folder"] and recorded["seed"] == 0
    assert main(["replay", str(replays / "sparse"), "--output-dir", str(replays), "--version-id", "default",
                 "--reward", "default-program", "--no-progress"]) == 0
    default = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert default["env_steps"] == 32 and default["shaping"] is True

    moved = tmp_path / "moved-sft"
    shutil.move(sft["folder"], moved)
    cases = [
        (["replay", str(moved)], "not trained by PPO"),
        (["replay", str(tmp_path / "rl-cli")], "is gone"),
        (["replay", str(tmp_path / "rl-cli"), "--init-from", str(moved), "--version-id", "rl-cli"], "overwrite"),
        (["replay", str(tmp_path / "rl-cli"), "--init-from", str(moved), "--total-env-steps", "0"], "total_env_steps"),
        (["replay", str(tmp_path / "absent")], "no checkpoint config"),
        (["replay", str(tmp_path / "rl-cli"), "--reward", "dense"], "reward='dense'"),
        (["replay", str(tmp_path / "rl-cli"), "--batches", "stage-balanced"], "behaviour-cloning settings"),
        # a setting a training config refuses, or a demonstrations file that does not fit it: exit 2 naming it,
        # nothing trained
        (["sft", "--steps", "-3"], "SFTConfig.steps=-3"),
        (["sft", "--families", "push", "--demos-file", str(tmp_path / "reach.npz")], "holds families ('reach',)"),
        (["rl", "--family", "reach", "--keep-successes", "-1"], "RLConfig.keep_successes=-1"),
        (["compare", "--family", "lift"], "RLConfig.family='lift'"),
    ]
    for argv, words in cases:
        assert main([*argv, "--output-dir", str(tmp_path), "--no-progress"]) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "" and words in captured.err, (argv, captured.err)


def test_coda_train_compare_runs_both_conditions_per_seed(tmp_path, capsys, embedder, main):
    assert main(["compare", "--family", "reach", "--seeds", "0", "1", "--n-envs", "2", "--n-steps", "8",
                 "--total-env-steps", "16", "--batch-size", "8", "--epochs", "1", "--output-dir", str(tmp_path),
                 "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["seeds"] == [0, 1] and len(out["shaped"]["runs"]) == len(out["sparse"]["runs"]) == 2
    folders = {r["folder"] for name in ("shaped", "sparse") for r in out[name]["runs"]}
    assert len(folders) == 4  # one run folder per condition and seed
    assert all(r["env_steps"] == 16 for name in ("shaped", "sparse") for r in out[name]["runs"])
