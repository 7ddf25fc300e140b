# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Expert demonstrations from the engine as a behaviour-cloning data set, split by episode.

:func:`collect` runs ``coda_engine.sim.expert.collect_demonstrations`` per family, embeds each episode's
instruction and normalises the actions; :meth:`DemoSet.split` holds out whole episodes for validation;
:func:`concat` aggregates sets (e.g. demonstrations and relabelled policy rollouts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda_policy.model import action_targets


@dataclass
class DemoSet:
    """Flattened demonstration steps; ``instr_index`` points into ``embeddings`` (one per episode)."""

    obs: np.ndarray
    """(N, obs_dim) float32 observations, each the one the expert acted in."""
    actions: np.ndarray
    """(N, 4) float32 normalised actions (``action_targets``)."""
    episode: np.ndarray
    """(N,) int64 episode index (global over families)."""
    family: np.ndarray
    """(N,) int64 index into ``families``."""
    embeddings: np.ndarray
    """(E, instruction_dim) float32 instruction embedding of each episode."""
    instructions: list[str]
    """The E instructions."""
    families: tuple[str, ...]
    """Family names."""

    def __len__(self) -> int:
        """Return the number of steps."""
        return len(self.obs)

    @property
    def num_episodes(self) -> int:
        """Number of episodes."""
        return len(self.instructions)

    def subset(self, episodes: np.ndarray) -> DemoSet:
        """Return the steps of the given episode indices (episode numbering kept)."""
        mask = np.isin(self.episode, episodes)
        return DemoSet(self.obs[mask], self.actions[mask], self.episode[mask], self.family[mask],
                       self.embeddings, self.instructions, self.families)

    def split(self, val_fraction: float, rng: np.random.Generator) -> tuple[DemoSet, DemoSet]:
        """(train, validation) holding out ``val_fraction`` of each family's episodes (at least one each)."""
        train_eps, val_eps = [], []
        for f in range(len(self.families)):
            eps = np.unique(self.episode[self.family == f])
            eps = eps[rng.permutation(len(eps))]
            n_val = max(1, round(val_fraction * len(eps))) if len(eps) > 1 else 0
            val_eps.append(eps[:n_val])
            train_eps.append(eps[n_val:])
        return self.subset(np.concatenate(train_eps)), self.subset(np.concatenate(val_eps))

    def with_families(self, families: tuple[str, ...]) -> DemoSet:
        """Return the same steps with family indices into ``families`` (which must hold every family of this set)."""
        missing = [f for f in self.families if f not in families]
        if missing:
            raise ValueError(f"families {tuple(families)} lack {missing} of this DemoSet")
        index = np.asarray([families.index(f) for f in self.families], dtype=np.int64)
        return DemoSet(self.obs, self.actions, self.episode, index[self.family], self.embeddings, self.instructions,
                       tuple(families))

    def tensors(self) -> dict[str, torch.Tensor]:
        """``obs``, ``instr`` (per step), ``action``, ``family`` as tensors."""
        return {"obs": torch.from_numpy(self.obs), "instr": torch.from_numpy(self.embeddings[self.episode]),
                "action": torch.from_numpy(self.actions), "family": torch.from_numpy(self.family)}

    def save(self, path: Path | str) -> None:
        """Write to an ``.npz`` file."""
        np.savez_compressed(path, obs=self.obs, actions=self.actions, episode=self.episode, family=self.family,
                            embeddings=self.embeddings, instructions=np.asarray(self.instructions),
                            families=np.asarray(self.families))

    @classmethod
    def load(cls, path: Path | str) -> DemoSet:
        """Read a file written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as d:
            return cls(d["obs"], d["actions"], d["episode"], d["family"], d["embeddings"],
                       [str(s) for s in d["instructions"]], tuple(str(s) for s in d["families"]))


def concat(sets: list[DemoSet]) -> DemoSet:
    """One set holding all steps and episodes of ``sets`` (same families); episode indices are renumbered."""
    if not sets:
        raise ValueError("concat needs at least one DemoSet")
    families = sets[0].families
    for s in sets[1:]:
        if s.families != families:
            raise ValueError(f"cannot concatenate DemoSets of families {families} and {s.families}")
    offsets = np.cumsum([0] + [s.num_episodes for s in sets[:-1]])
    return DemoSet(
        np.concatenate([s.obs for s in sets]).astype(np.float32),
        np.concatenate([s.actions for s in sets]).astype(np.float32),
        np.concatenate([s.episode + o for s, o in zip(sets, offsets, strict=True)]).astype(np.int64),
        np.concatenate([s.family for s in sets]).astype(np.int64),
        np.concatenate([s.embeddings for s in sets]).astype(np.float32),
        [i for s in sets for i in s.instructions], families)


def collect(families: tuple[str, ...], episodes: int, rng: np.random.Generator, split: str, embedder: object,
            max_delta: float, demonstrator: str = "expert") -> DemoSet:
    """``episodes`` successful expert episodes per family on ``split``, with embedded instructions.

    ``demonstrator``: ``expert`` (scripted) or ``state_expert`` (``coda_engine.sim.expert.run_expert``).
    """
    from coda_engine.sim.arm import SimArm
    from coda_engine.sim.expert import collect_demonstrations
    from coda_engine.sim.scene import SceneParams

    arm = SimArm()
    obs, acts, eps, fams, instructions = [], [], [], [], []
    for f, family in enumerate(families):
        data = collect_demonstrations(family, rng, SceneParams(split=split), episodes, arm=arm,
                                      demonstrator=demonstrator)
        obs.append(data["observations"])
        acts.append(action_targets(data["actions"], max_delta))
        eps.append(data["episode"].astype(np.int64) + len(instructions))
        fams.append(np.full(len(data["actions"]), f, dtype=np.int64))
        instructions += [str(s) for s in data["instructions"]]
    embeddings = embedder.embed(instructions)  # type: ignore[attr-defined]
    return DemoSet(np.concatenate(obs).astype(np.float32), np.concatenate(acts), np.concatenate(eps),
                   np.concatenate(fams), np.asarray(embeddings, dtype=np.float32), instructions, tuple(families))


def from_episodes(episodes: list[Any], families: tuple[str, ...], embedder: object, max_delta: float) -> DemoSet | None:
    """Return the successful episodes among ``episodes`` as demonstrations of ``families``.

    ``episodes`` have ``scene``, ``success``, ``observations`` and ``actions`` (metres): ``RecordedEpisode``
    objects with observations kept (one more observation than actions: the last is dropped) or corrective
    demonstrations (``coda_policy.corrective.CorrectiveEpisode``: one observation per action); episodes of other
    families are skipped. None if no episode qualifies.
    """
    kept = [ep for ep in episodes if ep.success and ep.observations is not None and ep.actions is not None
            and len(ep.actions) >= 1 and ep.scene.family in families]
    if not kept:
        return None
    return from_steps([np.asarray(ep.observations[:len(ep.actions)], dtype=np.float32) for ep in kept],
                      [action_targets(np.asarray(ep.actions, dtype=np.float32), max_delta) for ep in kept],
                      [ep.scene.family for ep in kept], [str(ep.scene.instruction) for ep in kept], families, embedder)


def from_steps(observations: list[np.ndarray], actions: list[np.ndarray], episode_families: list[str],
               instructions: list[str], families: tuple[str, ...], embedder: object) -> DemoSet:
    """Return episodes given as per-episode arrays as one :class:`DemoSet` of ``families``.

    Episode k has ``observations[k]`` ``(T, obs_dim)``, normalised ``actions[k]`` ``(T, 4)``, family name
    ``episode_families[k]`` and ``instructions[k]``, which ``embedder`` embeds.
    """
    if not observations:
        raise ValueError("from_steps needs at least one episode")
    lengths = [len(a) for a in actions]
    embeddings = embedder.embed(list(instructions))  # type: ignore[attr-defined]
    return DemoSet(np.concatenate(observations).astype(np.float32), np.concatenate(actions).astype(np.float32),
                   np.repeat(np.arange(len(lengths), dtype=np.int64), lengths),
                   np.repeat(np.asarray([families.index(f) for f in episode_families], dtype=np.int64), lengths),
                   np.asarray(embeddings, dtype=np.float32), list(instructions), tuple(families))
