# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The offline MiniLM embedder: real model, unit vectors, meaning-aware similarity, per-string cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coda_engine.text_embedding import EMBEDDING_DIM, TextEmbedder


def test_embeddings_are_unit_vectors_that_reflect_meaning(tmp_path: Path) -> None:
    embedder = TextEmbedder(cache_file=tmp_path / "cache.npz")
    texts = ["touch the red cube", "put your finger on the red block", "stack the blue cube on the green cube"]
    vectors = embedder.embed(texts)
    assert vectors.shape == (3, EMBEDDING_DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert len(embedder) == 3
    again = embedder.embed([texts[1], texts[1]])
    assert len(embedder) == 3 and np.array_equal(again[0], vectors[1])
    embedder.save()
    reloaded = TextEmbedder(cache_file=tmp_path / "cache.npz")
    assert len(reloaded) == 3 and np.array_equal(reloaded.embed_one(texts[2]), vectors[2])


@pytest.mark.slow
def test_one_string_per_call_gives_vectors_that_do_not_depend_on_what_came_before() -> None:
    # batch_size=64 fails this check on these strings (last bits differ by about 1e-7)
    texts = [f"pick up the red cube number {i} and place it in the bin" for i in range(64)] + ["touch the ball"]
    fresh = TextEmbedder(batch_size=1).embed(texts)
    earlier = TextEmbedder(batch_size=1)
    earlier.embed(texts[:10])
    assert np.array_equal(earlier.embed(texts), fresh)  # bit for bit


def test_a_vector_cached_at_one_thread_count_is_not_handed_out_at_another(tmp_path: Path) -> None:
    """MiniLM's vectors differ in their last bits between torch thread counts: the cache keys on the count too."""
    import torch

    text = "push the red cube to the green square"
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = TextEmbedder(batch_size=1).embed_one(text)
        torch.set_num_threads(2)
        shared = TextEmbedder(batch_size=1, cache_file=tmp_path / "cache.npz")
        two = shared.embed_one(text)
        assert not np.array_equal(one, two), "this check needs a string whose vector depends on the thread count"
        torch.set_num_threads(1)
        assert np.array_equal(shared.embed_one(text), one) and len(shared) == 2  # computed again, at 1 thread
        shared.save()
        reloaded = TextEmbedder(batch_size=1, cache_file=tmp_path / "cache.npz")
        assert len(reloaded) == 2 and np.array_equal(reloaded.embed_one(text), one)
        torch.set_num_threads(2)
        assert np.array_equal(reloaded.embed_one(text), two) and len(reloaded) == 2  # both came from the file
    finally:
        torch.set_num_threads(before)
