# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Learned critic: features without privileged state, training on grounded labels, save/version/reload, CLI."""

import dataclasses
import json

import numpy as np
import pytest

from coda_critic.dataset import Examples, FeatureConfig, episode_features, frame_indices, label
from coda_critic.diagnosis import MODES, CriticInputError
from coda_critic.grounded import GroundedCritic
from coda_critic.learned import (
    CONFIG_FILE,
    LearnedConfig,
    LearnedCritic,
    agreement,
    embed_instructions,
    load_critic,
    predict,
    save_model,
    train,
)
from coda_critic.models import EMBEDDED_MODEL
from coda_critic.text2potential import ProgramSpec, Text2Potential
from coda_engine.text_embedding import TextEmbedder

FEATURES = FeatureConfig(num_frames=4, frame_size=32, proprio_points=8)


@pytest.fixture(scope="module")
def embedder():
    return TextEmbedder()


@pytest.fixture(scope="module")
def labelled(episodes):
    eps = list(episodes.values())
    diagnoses = GroundedCritic().diagnose(eps)
    examples = label(episode_features(eps, FEATURES), diagnoses, [ep.scene.split for ep in eps])
    return eps, diagnoses, examples


@pytest.fixture(scope="module")
def trained(labelled, embedder):
    _, _, examples = labelled
    text = embed_instructions(examples.instructions, embedder)
    config = LearnedConfig(features=FEATURES, epochs=60, batch_size=16, lr=3e-3, seed=3)
    model, history = train(examples, text, config)
    return model, history, text


def test_frame_selection():
    assert frame_indices(2, 4) == [0, 0, 0, 1]
    assert frame_indices(3, 4) == [0, 1, 1, 2]
    assert frame_indices(6, 4) == [0, 1, 4, 5]
    with pytest.raises(ValueError, match="no keyframes"):
        frame_indices(0, 4)


def test_features_read_no_privileged_state(labelled):
    eps, _, examples = labelled
    assert examples.frames.shape == (len(eps), 4, 3, 32, 32) and examples.frames.dtype == np.uint8
    assert examples.proprio.shape == (len(eps), 8, 4)
    # Removing the privileged object states, stages and potentials changes nothing.
    stripped = [dataclasses.replace(ep, samples=[{**s, "objects": [], "stage": 0, "potential": 0.0}
                                                 for s in ep.samples]) for ep in eps]
    again = episode_features(stripped, FEATURES)
    assert np.array_equal(again.frames, examples.frames) and np.array_equal(again.proprio, examples.proprio)
    with pytest.raises(CriticInputError, match="empty keyframes"):
        episode_features([dataclasses.replace(eps[0], keyframes=[], keyframe_steps=[])], FEATURES)
    with pytest.raises(ValueError, match="mismatched ids"):
        label(episode_features(eps[:2], FEATURES), GroundedCritic().diagnose(eps[1:3]), ["id", "id"])


def test_training_fits_grounded_labels(labelled, trained):
    _, _, examples = labelled
    model, history, text = trained
    assert history["loss"][-1] < 0.2 * history["loss"][0]
    modes, stages, probs = predict(model, examples, text)
    assert np.mean(modes == examples.mode) == 1.0 and np.mean(stages == examples.stage) == 1.0
    assert np.all((probs > 0) & (probs <= 1))
    with pytest.raises(ValueError, match="text embeddings"):
        train(examples, text[:3], LearnedConfig(features=FEATURES, epochs=1))


def test_save_version_reload(tmp_path, labelled, trained, embedder):
    eps, grounded, examples = labelled
    model, _, text = trained
    folder = save_model(model, tmp_path, {"note": "test"})
    meta = json.loads((folder / CONFIG_FILE).read_text())
    assert folder.name == meta["version"] and meta["version"].startswith("lc-") and meta["modes"] == list(MODES)
    critic = load_critic(folder, embedder)
    assert critic.version == folder.name
    diagnoses = critic.diagnose(eps)
    assert [d.failure_mode for d in diagnoses] == [d.failure_mode for d in grounded]
    assert [d.failed_stage for d in diagnoses] == [d.failed_stage for d in grounded]
    for d in diagnoses:
        assert d.critic_backend == "learned" and d.critic_version == critic.version and 0 < d.confidence <= 1
        if d.is_failure:  # the learned critic's text goes through Text2potential like any other
            program = Text2Potential().translate(d)
            assert isinstance(program, ProgramSpec) and program.parsed["mode"] == d.failure_mode
    reloaded = predict(critic.model, examples, text)
    assert np.array_equal(reloaded[0], predict(model, examples, text)[0])
    # A tampered version or a missing weight file is refused with the reason.
    meta["version"] = "lc-0000000000"
    (folder / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="hash to"):
        load_critic(folder, embedder)
    with pytest.raises(ValueError, match="missing"):
        load_critic(tmp_path / "nothing", embedder)
    with pytest.raises(CriticInputError, match="empty keyframes"):
        LearnedCritic(model, "v", embedder).diagnose([dataclasses.replace(eps[0], keyframes=[], keyframe_steps=[])])


def test_examples_save_and_load(tmp_path, labelled):
    _, _, examples = labelled
    examples.save(tmp_path / "ex.npz")
    back = Examples.load(tmp_path / "ex.npz")
    assert np.array_equal(back.frames, examples.frames) and back.instructions == examples.instructions
    assert np.array_equal(back.mode, examples.mode) and back.split == examples.split
    assert len(Examples.concat([back, back.subset(np.array([0, 2]))])) == len(examples) + 2


def test_cli_train_and_eval(tmp_path, capsys, coda_subcommand):
    from coda_critic import commands

    def main(argv: list[str]) -> int:  # coda critic ARGS
        return coda_subcommand(commands, argv)

    assert main(["train", "--episodes", "6", "--epochs", "2", "--workers", "1", "--out", str(tmp_path),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["train_examples"] == 6 and result["version"].startswith("lc-")
    evaluate = ["eval", "--model", result["folder"], "--episodes", "3", "--splits", "id", "position",
                "--workers", "1", "--latency-episodes", "2", "--data-dir", str(tmp_path / "held_out"), "--json"]
    assert main(evaluate) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(list((tmp_path / "held_out").glob("eval_*.npz"))) == 2
    assert main(evaluate) == 0  # the second run reads the written held-out episodes: same figures
    again = json.loads(capsys.readouterr().out)
    assert again["accuracy"] == report["accuracy"] and again["per_mode"] == report["per_mode"]
    assert set(report["accuracy"]) == {"grounded", "learned"}
    assert set(report["accuracy"]["learned"]) == {"id", "position"} and report["episodes"] == {"id": 3, "position": 3}
    assert set(report["accuracy"]["learned"]["id"]) == {"failure_mode", "stage"}
    assert 0 <= report["accuracy"]["learned"]["position"]["failure_mode"] <= 1
    assert set(report["latency_ms"]) == {"grounded", "learned"} and report["latency_ms"]["grounded"] > 0
    assert 0 < report["text2potential_compile_rate"] <= 1 or report["text2potential_attempts"] == 0


def test_critics_saved_before_later_inputs_still_load(tmp_path):
    from coda_critic.learned import LEGACY_INPUTS, CriticNet

    legacy = CriticNet(LearnedConfig(features=FEATURES, **LEGACY_INPUTS))
    folder = save_model(legacy, tmp_path)
    meta = json.loads((folder / CONFIG_FILE).read_text())
    for key in LEGACY_INPUTS:  # a config.json written before these fields existed
        del meta["config"][key]
    (folder / CONFIG_FILE).write_text(json.dumps(meta))
    critic = load_critic(folder)
    assert critic.version == folder.name
    assert all(getattr(critic.model.config, k) == v for k, v in LEGACY_INPUTS.items())
    assert critic.model.frame[0].in_channels == 3  # no frame-difference channels


def test_embedded_critic_loads_and_agreement_counts(labelled, embedder):
    eps, grounded, _ = labelled
    critic = load_critic(embedder=embedder)  # the embedded default
    assert critic.version == EMBEDDED_MODEL.name
    learned = critic.diagnose(eps)
    score = agreement(learned, grounded)
    assert score["episodes"] == len(eps)
    assert score["failure_mode"] == np.mean([a.failure_mode == b.failure_mode
                                                for a, b in zip(learned, grounded, strict=True)])
    assert agreement(grounded, grounded) == {"episodes": len(eps), "failure_mode": 1.0, "stage": 1.0, "failure": 1.0}
    with pytest.raises(ValueError, match="not about the same episodes"):
        agreement(learned[1:] + learned[:1], grounded)


def test_fine_tuning_starts_from_the_given_network(labelled, trained):
    _, _, examples = labelled
    model, _, text = trained
    # Other architecture settings are ignored: the copy keeps the network's shape and starts from its weights.
    settings = LearnedConfig(features=FeatureConfig(), frame_dim=8, epochs=1, lr=1e-6, batch_size=16, seed=5)
    tuned, history = train(examples, text, settings, init=model)
    assert tuned is not model and tuned.config.features == FEATURES and len(history["loss"]) == 1
    assert np.array_equal(predict(tuned, examples, text)[0], predict(model, examples, text)[0])
