# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Supervised fine-tuning (behaviour cloning) on the engine's expert demonstrations.

``train_sft(cfg)``: collect (or load) demonstrations, hold out whole episodes for validation, minimise the
action MSE with AdamW and a cosine schedule, log to ``<output_dir>/<version_id>/metrics.jsonl``, measure the
success rate per family on new scenes of the split and save the checkpoint in the same folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from coda_policy.checkpoint import make_version_id, run_config_dict, save_checkpoint
from coda_policy.config import PolicyConfig
from coda_policy.data import DemoSet, collect
from coda_policy.evaluation import success_rates
from coda_policy.metrics import MetricsLog
from coda_policy.model import CodaPolicy, CodaPolicyNet

FAMILIES = ("reach", "pick_place", "push", "stack")


@dataclass
class SFTConfig:
    """Behaviour-cloning settings."""

    families: tuple[str, ...] = FAMILIES
    """Task families whose expert demonstrations are used (and evaluated)."""
    episodes_per_family: int = 100
    """Successful expert episodes collected per family."""
    split: str = "id"
    """Engine split the demonstration and evaluation scenes are generated from."""
    val_fraction: float = 0.1
    """Fraction of each family's episodes held out for validation (whole episodes)."""
    steps: int = 12000
    """Gradient steps (measured on 200 demos/family, id success over the same 40 scenes per family, reach /
    pick_place / push / stack: 2,500 steps .68 / .23 / .50 / .05; 6,000 steps 1.0 / .40 / .68 / .40; 12,000 steps
    1.0 / .78 / .60 / .70)."""
    batch_size: int = 256
    """Steps per minibatch."""
    lr: float = 1e-3
    """Peak learning rate (AdamW, cosine decay to 5% of it)."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient norm clip."""
    eval_every: int = 250
    """Validation loss every this many steps (and at the end)."""
    eval_episodes: int = 20
    """Episodes per family for the final success-rate measurement (0 skips it)."""
    seed: int = 0
    """Seeds demonstrations, the split, initialisation, batching and evaluation scenes."""
    output_dir: Path = Path("runs/policy")
    """Checkpoint root: the checkpoint goes to ``output_dir / version_id``."""
    version_id: str = ""
    """Version id of the checkpoint; empty derives ``sft-<hash of this config>``."""
    demos_file: str = ""
    """Optional ``.npz`` cache of the demonstrations: loaded if it exists, written after collecting otherwise."""
    num_threads: int = 2
    """torch intra-op threads."""
    progress: bool = True
    """Show a progress bar."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Network shape."""

    def __post_init__(self) -> None:
        """Check the fields; errors name the field."""
        from coda_engine.sim.families import FAMILIES as KNOWN

        self.families = tuple(self.families)
        self.output_dir = Path(self.output_dir)
        errors = []
        if not self.families or any(f not in KNOWN for f in self.families):
            errors.append(f"SFTConfig.families={self.families} must be a non-empty subset of {sorted(KNOWN)}")
        for name in ("episodes_per_family", "steps", "batch_size", "eval_every", "num_threads"):
            if getattr(self, name) < 1:
                errors.append(f"SFTConfig.{name}={getattr(self, name)} must be >= 1")
        if self.episodes_per_family < 2:
            errors.append(f"SFTConfig.episodes_per_family={self.episodes_per_family} must be >= 2 (one is held out)")
        if not 0.0 < self.val_fraction < 1.0:
            errors.append(f"SFTConfig.val_fraction={self.val_fraction} must be in (0, 1)")
        if not 0.0 < self.lr < 1.0:
            errors.append(f"SFTConfig.lr={self.lr} must be in (0, 1)")
        if self.weight_decay < 0 or self.grad_clip <= 0:
            errors.append(f"SFTConfig.weight_decay={self.weight_decay} must be >= 0 and grad_clip={self.grad_clip} > 0")
        if self.eval_episodes < 0:
            errors.append(f"SFTConfig.eval_episodes={self.eval_episodes} must be >= 0")
        if errors:
            raise ValueError("; ".join(errors))
        if not self.version_id:
            self.version_id = make_version_id("sft", self.to_dict(with_version=False))

    def to_dict(self, with_version: bool = True) -> dict[str, Any]:
        """JSON-friendly dict of the settings."""
        return run_config_dict(self, with_version)


@dataclass
class SFTResult:
    """What a run produced."""

    folder: Path
    """Checkpoint folder."""
    version_id: str
    """Its version id."""
    train_loss: float
    """Mean training loss over the last ``eval_every`` steps."""
    val_loss: float
    """Final validation loss."""
    first_val_loss: float
    """Validation loss before the first step."""
    success: dict[str, float]
    """Success rate per family (empty if not measured)."""
    seconds: float
    """Wall time."""


class DemosMismatchError(ValueError):
    """A demonstrations file (``SFTConfig.demos_file``) that holds other families than the config asks for."""


def load_or_collect(cfg: SFTConfig, embedder: object, rng: np.random.Generator) -> DemoSet:
    """Demonstrations of ``cfg`` from ``cfg.demos_file`` if it exists, else newly collected (and cached)."""
    path = Path(cfg.demos_file) if cfg.demos_file else None
    if path is not None and path.is_file():
        demos = DemoSet.load(path)
        if demos.families != cfg.families:
            raise DemosMismatchError(f"{path} holds families {demos.families}, the config asks for {cfg.families}")
        return demos
    demos = collect(cfg.families, cfg.episodes_per_family, rng, cfg.split, embedder, cfg.policy.max_delta)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        demos.save(path)
    return demos


def build_policy(cfg: PolicyConfig, seed: int) -> CodaPolicy:
    """Return a freshly initialised policy; initialisation depends only on ``seed``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return CodaPolicy(CodaPolicyNet(cfg))


@torch.no_grad()
def validation_loss(policy: CodaPolicy, data: dict[str, torch.Tensor], batch_size: int = 4096) -> float:
    """Mean behaviour-cloning loss over a whole data set (eval mode)."""
    was_training = policy.net.training
    policy.net.eval()
    n = len(data["obs"])
    total = 0.0
    for start in range(0, n, batch_size):
        part = {k: v[start : start + batch_size] for k, v in data.items()}
        loss, _ = policy.forward(part)
        total += float(loss) * len(part["obs"])
    policy.net.train(was_training)
    return total / max(n, 1)


def sft_step(
    policy: CodaPolicy, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor], grad_clip: float
) -> dict[str, float]:
    """One behaviour-cloning update: loss, backward, clip, step. Returns the loss parts."""
    loss, info = policy.forward(batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    info["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(policy.net.parameters(), grad_clip))
    optimizer.step()
    return info


def fit_bc(
    policy: CodaPolicy,
    train: dict[str, torch.Tensor],
    val: dict[str, torch.Tensor],
    steps: int,
    lr: float,
    cfg: SFTConfig,
    log: MetricsLog,
    gen: torch.Generator,
    desc: str,
    step_offset: int = 0,
    warmup_steps: int = 0,
    focus: torch.Tensor | None = None,
    focus_share: float = 0.0,
    weights: torch.Tensor | None = None,
) -> tuple[float, float]:
    """Run ``steps`` behaviour-cloning updates on ``train`` (AdamW, cosine decay to 5% of ``lr``).

    ``focus`` (row indices into ``train``) with ``focus_share`` > 0: that share of every batch is drawn from those
    rows, the rest from all of ``train`` (so data that would be a small part of a uniform batch, such as the
    latest round's demonstrations, is not diluted by the rest). ``weights`` (one per row of ``train``, >= 0): the
    rest of the batch is drawn with these probabilities (up to normalisation) instead of uniformly.

    ``warmup_steps`` > 0 ramps the rate linearly from 0 to ``lr`` first (continuing a trained network with a fresh
    optimizer: Adam's first updates have full size whatever the gradient, which knocks a converged policy off).

    Batches are drawn with ``gen``; batch size, weight decay, clip, validation interval and progress come from
    ``cfg``; the validation loss on ``val`` is logged every ``cfg.eval_every`` steps (step numbers shifted by
    ``step_offset``). Returns the mean training loss of the last ``eval_every`` steps and the final validation loss.
    """
    policy.net.train()
    optimizer = torch.optim.AdamW(policy.net.parameters(), lr=lr, weight_decay=cfg.weight_decay)
    warm = max(0, min(warmup_steps, steps - 1))

    def rate(s: int) -> float:
        if s < warm:
            return (s + 1) / (warm + 1)
        return 0.05 + 0.95 * 0.5 * (1.0 + np.cos(np.pi * min((s - warm) / max(steps - warm, 1), 1.0)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    val_loss = float("nan")
    recent: list[float] = []
    bar = tqdm(range(1, steps + 1), desc=desc, disable=not cfg.progress, dynamic_ncols=True)
    n = len(train["obs"])
    if not 0.0 <= focus_share < 1.0:
        raise ValueError(f"focus_share={focus_share} must be in [0, 1)")
    if weights is not None and (len(weights) != n or bool((weights < 0).any()) or not float(weights.sum()) > 0):
        raise ValueError(f"weights must be {n} non-negative numbers, not all 0")
    batch = min(cfg.batch_size, n)
    n_focus = round(batch * focus_share) if focus is not None and len(focus) else 0
    for step in bar:
        if weights is None:
            idx = torch.randint(0, n, (batch - n_focus,), generator=gen)
        else:
            idx = torch.multinomial(weights, batch - n_focus, replacement=True, generator=gen)
        if n_focus:
            pick = torch.randint(0, len(focus), (n_focus,), generator=gen)  # type: ignore[arg-type]
            idx = torch.cat([idx, focus[pick]])  # type: ignore[index]
        info = sft_step(policy, optimizer, {k: v[idx] for k, v in train.items()}, cfg.grad_clip)
        schedule.step()
        recent = [*recent[-(cfg.eval_every - 1) :], info["bc_loss"]]
        if step % cfg.eval_every == 0 or step == steps:
            val_loss = validation_loss(policy, val)
            at = step_offset + step
            log.write("train", step=at, lr=schedule.get_last_lr()[0], train_loss=float(np.mean(recent)), **info)
            log.write("val", step=at, val_loss=val_loss)
            bar.set_postfix(loss=f"{np.mean(recent):.4f}", val=f"{val_loss:.4f}")
    return float(np.mean(recent)), val_loss


def prepare_run(
    cfg: SFTConfig, embedder: object | None, demos: DemoSet | None
) -> tuple[object, DemoSet, DemoSet, DemoSet, np.random.Generator]:
    """Prepare a run: torch threads, the embedder, the demonstrations and their split.

    Loads the shared embedder if none is given and loads or collects the demonstrations if none are given. Returns
    (embedder, all demonstrations, training set, validation set, evaluation generator), seeded by ``cfg.seed``.
    """
    torch.set_num_threads(cfg.num_threads)
    if embedder is None:
        from coda_policy.serving import embedder as shared_embedder

        embedder = shared_embedder()
    demo_rng, split_rng, eval_rng = (np.random.default_rng([cfg.seed, k]) for k in range(3))
    demos = demos if demos is not None else load_or_collect(cfg, embedder, demo_rng)
    train_set, val_set = demos.split(cfg.val_fraction, split_rng)
    return embedder, demos, train_set, val_set, eval_rng


def evaluate_and_save(
    policy: CodaPolicy,
    cfg: SFTConfig,
    embedder: object,
    eval_rng: np.random.Generator,
    folder: Path,
    version_id: str,
    meta: dict[str, Any],
    log: MetricsLog,
    start: float,
    **done: Any,
) -> tuple[dict[str, float], float]:
    """Finish a run: evaluate, save the checkpoint, log the end and close the log.

    Scores the policy on ``cfg.eval_episodes`` scenes per family (if any), saves it as ``version_id`` in ``folder``
    with ``meta`` plus the success rates and logs ``done`` with the end record.
    Returns (success per family, seconds since ``start``).
    """
    success: dict[str, float] = {}
    if cfg.eval_episodes:
        success = success_rates(policy.net, cfg.families, cfg.eval_episodes, eval_rng, cfg.split, embedder)
        log.write("success", split=cfg.split, episodes=cfg.eval_episodes, **success)
    policy.net.eval()
    save_checkpoint(folder, policy.net, version_id, {**meta, "success": success})
    seconds = time.time() - start
    log.write("done", seconds=seconds, **done, success=success)
    log.close()
    return success, seconds


def train_sft(cfg: SFTConfig, embedder: object | None = None, demos: DemoSet | None = None) -> SFTResult:
    """Run behaviour cloning as configured; see the module docstring."""
    start = time.time()
    embedder, _, train_set, val_set, eval_rng = prepare_run(cfg, embedder, demos)
    train, val = train_set.tensors(), val_set.tensors()
    policy = build_policy(cfg.policy, cfg.seed)
    folder = cfg.output_dir / cfg.version_id
    log = MetricsLog(folder / "metrics.jsonl")
    log.write(
        "config",
        **cfg.to_dict(),
        train_steps=len(train_set),
        val_steps=len(val_set),
        train_episodes=len(np.unique(train_set.episode)),
        val_episodes=len(np.unique(val_set.episode)),
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    first_val = validation_loss(policy, val)
    log.write("val", step=0, val_loss=first_val)
    train_loss, val_loss = fit_bc(policy, train, val, cfg.steps, cfg.lr, cfg, log, gen, f"sft {cfg.version_id}")
    meta = {
        "trainer": "sft",
        "sft": cfg.to_dict(),
        "val_loss": val_loss,
        "train_episodes": len(np.unique(train_set.episode)),
    }
    success, seconds = evaluate_and_save(
        policy, cfg, embedder, eval_rng, folder, cfg.version_id, meta, log, start, val_loss=val_loss
    )
    return SFTResult(folder, cfg.version_id, train_loss, val_loss, first_val, success, seconds)
