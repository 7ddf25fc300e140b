# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures of the critic tests.

One simulated arm, a small set of real labelled episodes, and tiny random transformers checkpoints (a
causal LM and a LLaVA) built offline and saved to folders.
"""

from __future__ import annotations

import numpy as np
import pytest

from coda_critic.actors import make_actor
from coda_engine.episodes import RecordingConfig, run_recorded_episode
from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate_seeded
from coda_engine.sim.scene import SceneParams

# (family, actor, scene seed) -> the episodes the tests label; every one runs on the real MuJoCo arm.
CASES = [
    ("pick_place", "expert", 11),
    ("reach", "wander", 12),
    ("reach", "wrong_object", 13),
    ("pick_place", "offset_grasp", 14),
    ("pick_place", "drop", 15),
    ("pick_place", "wrong_place", 16),
    ("stack", "sweep", 17),
    ("stack", "slow", 18),
    ("stack", "drop", 19),
    ("push", "wander", 20),
]


@pytest.fixture(scope="session")
def arm():
    sim = SimArm()
    yield sim
    sim.close()


@pytest.fixture(scope="session")
def episodes(arm):
    """Return the recorded episodes of ``CASES`` (keyframes 32x32), keyed by (family, actor)."""
    result = {}
    for family, actor, seed in CASES:
        scene = generate_seeded(family, seed, SceneParams(num_distractors=(1, 2)))
        act = make_actor(actor, scene, np.random.default_rng(seed))
        result[(family, actor)] = run_recorded_episode(
            arm, scene, act, episode_id=f"t-{family}-{actor}", policy_version=actor, robot_id="sim_test",
            config=RecordingConfig(keyframe_size=32))
    return result


def byte_tokenizer():
    """Return a byte-level tokenizer (256 byte tokens, no merges) with special tokens and an ``<image>`` token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                        unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    return tokenizer


def _tiny_llama_config(tokenizer):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id)


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    """Save a random 1-layer Llama (hidden 32) with the byte tokenizer to a folder."""
    import torch
    from transformers import LlamaForCausalLM

    tokenizer = byte_tokenizer()
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(_tiny_llama_config(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory):
    """Save a random LLaVA (CLIP vision tower 16 px / 8 px patches, the tiny Llama) to a folder."""
    import torch
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    tokenizer = byte_tokenizer()
    vision = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                              image_size=16, patch_size=8, projection_dim=16)
    config = LlavaConfig(vision_config=vision, text_config=_tiny_llama_config(tokenizer), vision_feature_layer=-1,
                         image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
                         vision_feature_select_strategy="default")
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny_llava")
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
