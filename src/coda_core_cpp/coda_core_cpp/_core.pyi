# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Type stub of the compiled extension ``coda_core_cpp._core`` (bindings/module.cpp)."""

from collections.abc import Iterator, Mapping

import numpy as np
import numpy.typing as npt

ArrayLike = npt.ArrayLike
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]

def version() -> str:
    """Version of the C++ core."""

def compute_gae(
    rewards: ArrayLike,
    values: ArrayLike,
    episode_starts: ArrayLike,
    last_values: ArrayLike,
    dones: ArrayLike,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
) -> tuple[F32, F32]:
    """GAE with Stable-Baselines3 semantics over (T, n_envs) arrays; returns (advantages, returns).

    ``episode_starts[t + 1]`` masks the bootstrap of step t; ``dones`` (n_envs,) masks
    ``last_values`` after the last step. Runs without the GIL. ValueError on wrong shapes/dtypes.
    """

class Minibatch:
    """Copies of one shuffled minibatch (flat index = step * n_envs + env)."""

    @property
    def indices(self) -> npt.NDArray[np.int64]: ...
    @property
    def observations(self) -> F32: ...
    @property
    def actions(self) -> F32: ...
    @property
    def old_values(self) -> F32: ...
    @property
    def old_log_probs(self) -> F32: ...
    @property
    def advantages(self) -> F32: ...
    @property
    def returns(self) -> F32: ...
    @property
    def stages(self) -> I32: ...

class MinibatchIterator(Iterator[Minibatch]):
    """Seeded shuffled minibatches over the stored transitions (the last one may be smaller)."""

    def __iter__(self) -> MinibatchIterator: ...
    def __next__(self) -> Minibatch: ...
    def __len__(self) -> int: ...

class RolloutBuffer:
    """Preallocated float32 rollout storage (buffer_size, n_envs, ...); int32 stages.

    The array properties are writable numpy views of the storage (no copy); they stay valid for the
    buffer's lifetime (``reset`` zeroes in place). Not thread-safe: use from one thread at a time.
    """

    def __init__(self, buffer_size: int, n_envs: int, obs_dim: int, action_dim: int) -> None: ...
    def add(
        self,
        obs: ArrayLike,
        action: ArrayLike,
        reward: ArrayLike,
        episode_start: ArrayLike,
        value: ArrayLike,
        log_prob: ArrayLike,
        stage: ArrayLike,
    ) -> None:
        """Store one step for all envs: obs (n_envs, obs_dim), action (n_envs, action_dim), the rest (n_envs,).

        Float arguments accept float/int/bool dtypes (converted to float32, no copy if already
        float32); ``stage`` needs an integer dtype. ValueError names the argument and the shapes;
        IndexError when the buffer is full.
        """

    def reset(self) -> None:
        """Zero every array and rewind to step 0."""

    def compute_gae(
        self, last_values: ArrayLike, dones: ArrayLike, gamma: float = 0.99, gae_lambda: float = 0.95
    ) -> None:
        """Fill ``advantages`` and ``returns`` over the stored steps (see :func:`compute_gae`)."""

    def minibatches(self, batch_size: int, seed: int) -> MinibatchIterator:
        """Iterate over all stored transitions in a seeded random order, batch_size at a time."""

    @property
    def buffer_size(self) -> int: ...
    @property
    def n_envs(self) -> int: ...
    @property
    def obs_dim(self) -> int: ...
    @property
    def action_dim(self) -> int: ...
    @property
    def pos(self) -> int: ...
    @property
    def full(self) -> bool: ...
    @property
    def observations(self) -> F32: ...
    @property
    def actions(self) -> F32: ...
    @property
    def rewards(self) -> F32: ...
    @property
    def episode_starts(self) -> F32: ...
    @property
    def values(self) -> F32: ...
    @property
    def log_probs(self) -> F32: ...
    @property
    def advantages(self) -> F32: ...
    @property
    def returns(self) -> F32: ...
    @property
    def stages(self) -> I32: ...

class TransitionRing:
    """Single-producer/single-consumer ring of float32 records; drop-oldest on overflow (counted)."""

    def __init__(self, capacity: int, record_size: int) -> None: ...
    def push(self, record: ArrayLike) -> bool:
        """Copy one record in (never blocks or allocates in C++); False if the oldest was dropped."""

    def drain(self, max_records: int = -1) -> F32:
        """Take up to max_records (all if negative) records, oldest first, as (n, record_size)."""

    @property
    def capacity(self) -> int: ...
    @property
    def record_size(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def pushed(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def popped(self) -> int: ...

class PotentialProgram:
    """A compiled staged-potential program (see include/coda_core/potential.hpp for the language)."""

    @staticmethod
    def compile(source: str, layout: Mapping[str, tuple[int, int]]) -> PotentialProgram:
        """Compile ``source`` against ``layout`` {name: (offset, length)}; PotentialError on bad source."""

    @property
    def num_stages(self) -> int: ...
    @property
    def stage_names(self) -> list[str]: ...
    @property
    def stages(self) -> list[tuple[str, str, str]]:
        """(name, progress source, done source) per stage."""

    @property
    def source(self) -> str: ...
    @property
    def layout(self) -> dict[str, tuple[int, int]]: ...
    @property
    def required_dim(self) -> int: ...
    def evaluate(self, state: ArrayLike, stage: int) -> tuple[float, int]:
        """(phi, new_stage) for one state (D,) starting from ``stage`` in [0, K]."""

    def evaluate_batch(self, states: ArrayLike, stages: ArrayLike) -> tuple[F32, I32]:
        """(phi (N,), new_stages (N,)) for states (N, D) float32 and stages (N,) int32. Runs without the GIL."""

def shape_rewards(rewards: ArrayLike, phi: ArrayLike, next_phi: ArrayLike, dones: ArrayLike, gamma: float) -> F32:
    """``rewards + gamma * next_phi * (1 - dones) - phi`` in float32 (same shapes)."""

class ObjectTokenActor:
    """Action mean tanh(actor(obs)) of the policy's object-token network for one observation (float32)."""

    def __init__(self, spec: Mapping[str, object]) -> None:
        """Build from ``NumpyActionMean.spec()``; ValueError naming the key or ``ActorSpec`` field that does not fit."""

    def __call__(self, obs: ArrayLike) -> F32:
        """(action_dim,) in [-1, 1] from (obs_dim,); NaN when obs is not finite or no object is present."""

    @property
    def obs_dim(self) -> int: ...
    @property
    def action_dim(self) -> int: ...
    @property
    def num_slots(self) -> int: ...
