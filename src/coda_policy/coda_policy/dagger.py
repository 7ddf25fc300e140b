# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""DAgger: roll out the behaviour-cloned policy, label the states it visits with the expert, aggregate, retrain.

A policy trained only on expert trajectories drifts into states the expert never visited and has no data
there (compounding errors). Each DAgger round runs episodes in which, per step, the expert's action is
executed with probability ``beta`` and the policy's otherwise (optionally with Gaussian action noise), records
every visited observation with the action the expert would take there, adds these steps to the data set and
continues training the policy on the whole set.

The labels come from :class:`coda_engine.sim.state_expert.StateExpert`, the family expert with its phase read from
the world state before every action, so that it can label states the policy reached.

``train_dagger(cfg)`` runs the rounds; each round's rollouts and checkpoint are stored under
``<output_dir>/<version_id>/rounds/`` and an interrupted run resumes from the last finished round.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from coda_engine.sim.state_expert import StateExpert, off_table
from coda_policy.checkpoint import load_policy, make_version_id, save_checkpoint
from coda_policy.data import DemoSet, concat
from coda_policy.metrics import MetricsLog
from coda_policy.model import CodaPolicy, action_targets
from coda_policy.serving import make_action_fn
from coda_policy.sft import SFTConfig, evaluate_and_save, fit_bc, prepare_run, validation_loss


@dataclass
class DAggerConfig:
    """DAgger settings; the base behaviour-cloning settings (data, network, batches, output) are in ``sft``."""

    sft: SFTConfig = field(default_factory=SFTConfig)
    """Initial demonstrations, network, batch size, weight decay, clip, evaluation, seed, output folder."""
    init_from: str = ""
    """Checkpoint folder whose network (and shape) starts round 1; empty trains one first by behaviour cloning
    with ``sft``."""
    rounds: int = 3
    """DAgger rounds (collect, aggregate, train)."""
    episodes_per_round: int = 50
    """Rollout episodes per family and round."""
    beta: float = 0.5
    """Probability of executing the expert's action (instead of the policy's) per step in round 1."""
    beta_decay: float = 0.5
    """``beta`` is multiplied by this after every round (0 gives pure policy rollouts from round 2 on)."""
    noise: float = 0.0
    """Std of Gaussian noise added to the executed displacement, as a fraction of ``max_delta`` (0 disables)."""
    steps_per_round: int = 1000
    """Gradient steps after each round's aggregation."""
    lr: float = 3e-4
    """Peak learning rate of each round's training (cosine decay to 5% of it)."""
    version_id: str = ""
    """Version id of the final checkpoint; empty derives ``dagger-<hash of this config>``."""

    def __post_init__(self) -> None:
        """Check the fields; errors name the field."""
        errors = []
        for name in ("rounds", "episodes_per_round", "steps_per_round"):
            if getattr(self, name) < 1:
                errors.append(f"DAggerConfig.{name}={getattr(self, name)} must be >= 1")
        if not 0.0 <= self.beta <= 1.0:
            errors.append(f"DAggerConfig.beta={self.beta} must be in [0, 1]")
        if not 0.0 <= self.beta_decay <= 1.0:
            errors.append(f"DAggerConfig.beta_decay={self.beta_decay} must be in [0, 1]")
        if not 0.0 <= self.noise <= 1.0:
            errors.append(f"DAggerConfig.noise={self.noise} must be in [0, 1]")
        if not 0.0 < self.lr < 1.0:
            errors.append(f"DAggerConfig.lr={self.lr} must be in (0, 1)")
        if self.init_from and not (Path(self.init_from) / "config.json").is_file():
            errors.append(f"DAggerConfig.init_from={self.init_from!r} is not a checkpoint folder")
        if errors:
            raise ValueError("; ".join(errors))
        if not self.version_id:
            self.version_id = make_version_id("dagger", self.to_dict(with_version=False))

    def beta_at(self, round_index: int) -> float:
        """Expert-execution probability of round ``round_index`` (0-based)."""
        return self.beta * self.beta_decay**round_index

    def to_dict(self, with_version: bool = True) -> dict[str, Any]:
        """JSON-friendly dict of the settings."""
        data = asdict(self)
        data["sft"] = self.sft.to_dict(with_version)
        if not with_version:
            data.pop("version_id")
        return data


@dataclass
class DAggerResult:
    """What a run produced."""

    folder: Path
    """Final checkpoint folder."""
    version_id: str
    """Its version id."""
    rounds: list[dict[str, Any]]
    """Per round: beta, rollout episodes and their success rate, aggregated steps, losses."""
    success: dict[str, float]
    """Success rate per family of the final policy (empty if not measured)."""
    seconds: float
    """Wall time."""


def relabelled_rollouts(
    net: Any,
    families: tuple[str, ...],
    episodes: int,
    rng: np.random.Generator,
    split: str,
    embedder: Any,
    beta: float,
    noise: float,
    arm: Any = None,
    progress: bool = False,
) -> tuple[DemoSet, dict[str, float]]:
    """Run ``episodes`` new scenes per family with the mixed policy and label every visited state by the expert.

    Per step the expert's action is executed with probability ``beta``, the deterministic policy's otherwise;
    ``noise`` (fraction of ``max_delta``) perturbs the executed displacement. Once an object falls off the
    table (:func:`off_table`) the episode's later states are not recorded. Returns the visited observations
    with the :class:`StateExpert` actions (normalised) as a :class:`DemoSet`, and the success rate per family.
    """
    from coda_engine.sim.arm import SimArm
    from coda_engine.sim.expert import run_episode
    from coda_engine.sim.generator import generate
    from coda_engine.sim.scene import SceneParams

    arm = arm or SimArm()
    max_delta = net.cfg.max_delta
    was_training = net.training
    net.eval()
    obs, labels, eps, fams, instructions, embeddings = [], [], [], [], [], []
    success: dict[str, float] = {}
    bar = tqdm(total=episodes * len(families), desc="rollouts", disable=not progress, dynamic_ncols=True)
    for f, family in enumerate(families):
        wins = 0
        for _ in range(episodes):
            scene = generate(family, rng, SceneParams(split=split))
            embedding = np.asarray(embedder.embed_one(scene.instruction), dtype=np.float32)
            policy = make_action_fn(net, embedding)
            expert = StateExpert(family)
            expert.reset()
            seen: list[np.ndarray] = []
            said: list[np.ndarray] = []
            lost: list[bool] = []  # set once an object fell off the table: later states are not recorded

            def act(
                o: np.ndarray,
                state: Any,
                policy: Any = policy,
                expert: StateExpert = expert,
                seen: list = seen,
                said: list = said,
                lost: list = lost,
            ) -> np.ndarray:
                label = expert.act(state)
                if not lost and off_table(state):
                    lost.append(True)
                if not lost:
                    seen.append(np.asarray(o, dtype=np.float32))
                    said.append(label)
                chosen = label.copy() if rng.random() < beta else np.asarray(policy(o, state), dtype=np.float32)
                if noise > 0.0:
                    chosen[:3] += rng.normal(0.0, noise * max_delta, 3).astype(np.float32)
                return chosen

            episode = run_episode(arm, scene, act)
            wins += episode.success
            if seen:
                obs.append(np.stack(seen))
                labels.append(action_targets(np.stack(said), max_delta))
                eps.append(np.full(len(seen), len(instructions), dtype=np.int64))
                fams.append(np.full(len(seen), f, dtype=np.int64))
                instructions.append(str(scene.instruction))
                embeddings.append(embedding)
            bar.update(1)
        success[family] = wins / episodes
    bar.close()
    net.train(was_training)
    data = DemoSet(
        np.concatenate(obs),
        np.concatenate(labels),
        np.concatenate(eps),
        np.concatenate(fams),
        np.stack(embeddings),
        instructions,
        tuple(families),
    )
    return data, success


def _initial_policy(cfg: DAggerConfig, embedder: Any, demos: DemoSet) -> CodaPolicy:
    if cfg.init_from:
        return CodaPolicy(load_policy(cfg.init_from)[0])
    from coda_policy.sft import train_sft

    result = train_sft(replace(cfg.sft, eval_episodes=0, version_id=""), embedder, demos)
    return CodaPolicy(load_policy(result.folder)[0])


def train_dagger(cfg: DAggerConfig, embedder: Any = None, demos: DemoSet | None = None) -> DAggerResult:
    """Run DAgger as configured; see the module docstring."""
    start = time.time()
    base = cfg.sft
    embedder, demos, train_set, val_set, eval_rng = prepare_run(base, embedder, demos)
    val = val_set.tensors()
    folder = base.output_dir / cfg.version_id
    rounds_dir = folder / "rounds"
    log = MetricsLog(folder / "metrics.jsonl", append=True)
    log.write("config", **cfg.to_dict(), demo_steps=len(train_set))
    policy = _initial_policy(cfg, embedder, demos)
    gen = torch.Generator().manual_seed(base.seed)
    collected: list[DemoSet] = []
    history: list[dict[str, Any]] = []
    for k in range(cfg.rounds):
        data_file, ckpt = rounds_dir / f"round{k + 1}.npz", rounds_dir / f"round{k + 1}"
        beta = cfg.beta_at(k)
        rollout_rng = np.random.default_rng([base.seed, 100 + k])
        if data_file.is_file() and (ckpt / "config.json").is_file():  # finished before: resume
            collected.append(DemoSet.load(data_file))
            policy = CodaPolicy(load_policy(ckpt)[0])
            history.append({"round": k + 1, "resumed": True, "beta": beta})
            continue
        rollouts, rollout_success = relabelled_rollouts(
            policy.net,
            base.families,
            cfg.episodes_per_round,
            rollout_rng,
            base.split,
            embedder,
            beta,
            cfg.noise,
            progress=base.progress,
        )
        collected.append(rollouts)
        train = concat([train_set, *collected]).tensors()
        first_val = validation_loss(policy, val)
        train_loss, val_loss = fit_bc(
            policy,
            train,
            val,
            cfg.steps_per_round,
            cfg.lr,
            base,
            log,
            gen,
            f"dagger round {k + 1}",
            step_offset=k * cfg.steps_per_round,
        )
        row = {
            "round": k + 1,
            "beta": beta,
            "rollout_success": rollout_success,
            "rollout_steps": len(rollouts),
            "train_steps": len(train["obs"]),
            "val_loss_before": first_val,
            "val_loss": val_loss,
            "train_loss": train_loss,
        }
        log.write("round", **row)
        history.append(row)
        policy.net.eval()
        rounds_dir.mkdir(parents=True, exist_ok=True)
        rollouts.save(data_file)
        save_checkpoint(ckpt, policy.net, f"{cfg.version_id}-r{k + 1}", {"trainer": "dagger", "round": k + 1})
    meta = {"trainer": "dagger", "dagger": cfg.to_dict(), "rounds": history, "parent": cfg.init_from}
    success, seconds = evaluate_and_save(policy, base, embedder, eval_rng, folder, cfg.version_id, meta, log, start)
    return DAggerResult(folder, cfg.version_id, history, success, seconds)
