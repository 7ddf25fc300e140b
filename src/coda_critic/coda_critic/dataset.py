# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Examples for the learned critic: what a real arm's episode carries, with grounded labels.

:func:`episode_features` keeps only what an episode from a real arm has too: the keyframes (start,
stage changes, end) resampled to ``num_frames``, their steps, the tool trajectory and finger opening
(proprioception, resampled to ``proprio_points``), the instruction and the task family. Privileged
object states, stages and potentials are not read. :func:`generate_examples` runs the fault actors
(:mod:`coda_critic.actors`) on generated scenes of one split with real MuJoCo and labels every episode
with the grounded critic. Pure module: no rclpy.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from coda_critic.actors import applicable_actors, make_actor
from coda_critic.diagnosis import MODES, Diagnosis, EpisodeLike, check_episodes
from coda_critic.grounded import GroundedCritic
from coda_engine.episodes import RecordingConfig, run_recorded_episode
from coda_engine.sim.families import FAMILIES
from coda_engine.sim.scene import Scene, SceneParams

FAMILY_NAMES: tuple[str, ...] = tuple(FAMILIES)
"""Family order of the one-hot input."""
MAX_STAGES = 4
"""Most stages of any family's default program (the stage head has MAX_STAGES + 1 classes: none, 0..3)."""
MAX_KEYFRAMES = 8
"""Keyframe counts above this are clipped (count one-hot input)."""


@dataclass(frozen=True)
class FeatureConfig:
    """Shapes of the learned critic's inputs."""

    num_frames: int = 4
    """Keyframes per example: the first, the first and last stage change, the last (repeated when fewer)."""
    frame_size: int = 48
    """Keyframe width and height, pixels (frames of another size are resized by nearest neighbour)."""
    proprio_points: int = 16
    """Tool-trajectory samples per example."""

    def __post_init__(self) -> None:
        """Check ranges."""
        if self.num_frames < 2 or not 16 <= self.frame_size <= 128 or self.proprio_points < 2:
            raise ValueError(f"FeatureConfig: num_frames={self.num_frames} must be >= 2, frame_size="
                             f"{self.frame_size} in [16, 128], proprio_points={self.proprio_points} >= 2")


@dataclass
class Examples:
    """A batch of learned-critic inputs (and labels when known), as arrays."""

    frames: np.ndarray
    """(N, F, 3, S, S) uint8."""
    frame_steps: np.ndarray
    """(N, F) float32: keyframe step / episode length."""
    keyframe_count: np.ndarray
    """(N,) int64 number of keyframes the episode had."""
    proprio: np.ndarray
    """(N, P, 4) float32: tool x, y, z (m) and finger opening (x 10) along the episode."""
    family: np.ndarray
    """(N,) int64 index into ``FAMILY_NAMES``."""
    instructions: list[str]
    """Instruction texts."""
    episode_ids: list[str]
    """Episode ids."""
    mode: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(N,) int64 index into ``MODES`` (grounded label), or empty."""
    stage: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(N,) int64 failed stage + 1 (0 = success), or empty."""
    split: list[str] = field(default_factory=list)
    """Split of each scene, or empty."""

    def __len__(self) -> int:
        """Return the number of examples."""
        return len(self.episode_ids)

    def subset(self, index: np.ndarray) -> Examples:
        """Return the examples at ``index``."""
        idx = np.asarray(index)
        pick = (lambda xs: [xs[i] for i in idx]) if len(idx) else (lambda xs: [])
        return Examples(self.frames[idx], self.frame_steps[idx], self.keyframe_count[idx], self.proprio[idx],
                        self.family[idx], pick(self.instructions), pick(self.episode_ids),
                        self.mode[idx] if len(self.mode) else self.mode,
                        self.stage[idx] if len(self.stage) else self.stage,
                        pick(self.split) if self.split else [])

    @staticmethod
    def concat(parts: Sequence[Examples]) -> Examples:
        """Join batches."""
        return Examples(np.concatenate([p.frames for p in parts]), np.concatenate([p.frame_steps for p in parts]),
                        np.concatenate([p.keyframe_count for p in parts]), np.concatenate([p.proprio for p in parts]),
                        np.concatenate([p.family for p in parts]), [i for p in parts for i in p.instructions],
                        [i for p in parts for i in p.episode_ids], np.concatenate([p.mode for p in parts]),
                        np.concatenate([p.stage for p in parts]), [s for p in parts for s in p.split])

    def save(self, path: Path | str) -> None:
        """Write to ``.npz``."""
        np.savez_compressed(path, frames=self.frames, frame_steps=self.frame_steps,
                            keyframe_count=self.keyframe_count, proprio=self.proprio, family=self.family,
                            instructions=np.asarray(self.instructions), episode_ids=np.asarray(self.episode_ids),
                            mode=self.mode, stage=self.stage, split=np.asarray(self.split))

    @classmethod
    def load(cls, path: Path | str) -> Examples:
        """Read what :meth:`save` wrote."""
        with np.load(path, allow_pickle=False) as d:
            return cls(d["frames"], d["frame_steps"], d["keyframe_count"], d["proprio"], d["family"],
                       [str(s) for s in d["instructions"]], [str(s) for s in d["episode_ids"]], d["mode"],
                       d["stage"], [str(s) for s in d["split"]])


def _resize(frame: np.ndarray, size: int) -> np.ndarray:
    h, w = frame.shape[:2]
    if (h, w) == (size, size):
        return frame
    rows = (np.arange(size) * h // size).clip(0, h - 1)
    cols = (np.arange(size) * w // size).clip(0, w - 1)
    return frame[rows][:, cols]


def frame_indices(count: int, num_frames: int) -> list[int]:
    """Which of ``count`` keyframes fill the ``num_frames`` slots: first, stage changes spread, last."""
    if count <= 0:
        raise ValueError("no keyframes")
    inner = list(range(1, count - 1))
    if len(inner) > num_frames - 2:
        picks = np.linspace(0, len(inner) - 1, num_frames - 2).round().astype(int)
        inner = [inner[i] for i in picks]
    slots = [0, *inner]
    while len(slots) < num_frames - 1:
        slots.append(slots[-1])
    return [*slots, count - 1]


def episode_features(episodes: Sequence[EpisodeLike], config: FeatureConfig | None = None) -> Examples:
    """Return the inputs of the learned critic for ``episodes`` (checked: keyframes must be present and rgb)."""
    cfg = config or FeatureConfig()
    check_episodes(episodes, need_keyframes=True)
    n, f, s, p = len(episodes), cfg.num_frames, cfg.frame_size, cfg.proprio_points
    frames = np.zeros((n, f, 3, s, s), np.uint8)
    steps = np.zeros((n, f), np.float32)
    proprio = np.zeros((n, p, 4), np.float32)
    counts = np.zeros(n, np.int64)
    family = np.zeros(n, np.int64)
    for i, ep in enumerate(episodes):
        if ep.scene.family not in FAMILY_NAMES:
            raise ValueError(f"episode {ep.episode_id!r}: unknown family {ep.scene.family!r}")
        family[i] = FAMILY_NAMES.index(ep.scene.family)
        counts[i] = len(ep.keyframes)
        length = max(int(ep.steps), 1)
        for j, k in enumerate(frame_indices(len(ep.keyframes), f)):
            frames[i, j] = _resize(np.asarray(ep.keyframes[k]), s).transpose(2, 0, 1)
            steps[i, j] = ep.keyframe_steps[k] / length
        pick = np.linspace(0, len(ep.samples) - 1, p).round().astype(int)
        for j, k in enumerate(pick):
            sample = ep.samples[k]
            e = sample["ee_position"]
            proprio[i, j] = (e["x"], e["y"], e["z"], 10.0 * sample["gripper_opening"])
    return Examples(frames, steps, counts, proprio, family, [ep.scene.instruction for ep in episodes],
                    [ep.episode_id for ep in episodes])


def label(examples: Examples, diagnoses: Sequence[Diagnosis], splits: Sequence[str]) -> Examples:
    """Attach grounded labels (ids must match one to one, in order)."""
    ids = [d.episode_ids[0] for d in diagnoses]
    if ids != examples.episode_ids:
        raise ValueError("diagnoses and examples are not about the same episodes in the same order (mismatched ids)")
    examples.mode = np.array([MODES.index(d.failure_mode) for d in diagnoses], np.int64)
    examples.stage = np.array([d.failed_stage + 1 for d in diagnoses], np.int64)
    examples.split = list(splits)
    return examples


@dataclass(frozen=True)
class GenerationJob:
    """One worker's share of :func:`generate_examples`."""

    split: str
    """Scene split."""
    count: int
    """Episodes."""
    seed: int
    """Seed of the worker's random generator."""
    features: FeatureConfig
    """Input shapes."""
    prefix: str
    """Episode id prefix."""


def _run_job(job: GenerationJob) -> tuple[Examples, list[Diagnosis], list[Scene]]:
    from coda_engine.sim.arm import SimArm
    from coda_engine.sim.generator import generate

    rng = np.random.default_rng(job.seed)
    arm = SimArm()
    critic = GroundedCritic()
    families = list(FAMILY_NAMES)
    params = SceneParams.for_split(job.split)
    episodes, diagnoses = [], []
    recording = RecordingConfig(keyframe_size=job.features.frame_size)
    for i in range(job.count):
        scene = generate(families[i % len(families)], rng, params)
        kinds = applicable_actors(scene)
        kind = kinds[int(rng.integers(len(kinds)))]
        ep = run_recorded_episode(arm, scene, make_actor(kind, scene, rng), episode_id=f"{job.prefix}-{i:05d}",
                                  policy_version=f"actor:{kind}", robot_id="sim_data", config=recording)
        diagnoses.append(critic.diagnose([ep])[0])
        ep.observations = ep.actions = None
        episodes.append(ep)
    arm.close()
    examples = episode_features(episodes, job.features)
    return label(examples, diagnoses, [job.split] * len(episodes)), diagnoses, [ep.scene for ep in episodes]


def generate_examples(split: str, count: int, seed: int, config: FeatureConfig | None = None, workers: int = 1,
                      prefix: str = "") -> tuple[Examples, list[Diagnosis], list[Scene]]:
    """``count`` labelled episodes of ``split`` (families in turn, a random applicable actor each).

    Returns the examples, the grounded diagnoses and the scenes, in the same order.
    """
    cfg = config or FeatureConfig()
    workers = max(1, min(workers, count))
    shares = [count // workers + (1 if w < count % workers else 0) for w in range(workers)]
    jobs = [GenerationJob(split, n, seed * 1000 + w, cfg, f"{prefix or split}-s{seed}-w{w}")
            for w, n in enumerate(shares) if n]
    if len(jobs) == 1:
        results = [_run_job(jobs[0])]
    else:
        with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
            results = pool.map(_run_job, jobs)
    return (Examples.concat([r[0] for r in results]), [d for r in results for d in r[1]],
            [s for r in results for s in r[2]])
