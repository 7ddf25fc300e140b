# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""One behaviour-cloning update of a trained policy on recorded demonstration files, recorded so it can be replayed.

A loop round fine-tunes the policy it starts from on every demonstration so far (``coda_loop.training``); that
step is a :class:`FinetuneConfig` run by :func:`finetune`, and the config goes into the checkpoint's
``config.json`` (``meta.finetune``). :func:`replay_finetune_config` reads it back, so ``coda train replay
<run>/checkpoints/r003-bc`` trains the same step again: on the same code, the same weights; with
``batches="stage-balanced"`` or other ``steps`` / ``lr``, the same step changed in one thing (a paired test of a
change to behaviour cloning with no drift between runs).

Pure module: no rclpy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda_policy.checkpoint import load_policy, read_config, save_checkpoint
from coda_policy.data import DemoSet, concat
from coda_policy.metrics import MetricsLog
from coda_policy.model import CodaPolicy, CodaPolicyNet
from coda_policy.sft import SFTConfig, fit_bc

BATCHES = ("uniform", "stage-balanced", "potential-gain")
"""How :func:`finetune` draws its minibatches (see :attr:`FinetuneConfig.batches`)."""
FINETUNE_TRAINER = "loop-bc"
"""``meta.trainer`` of a checkpoint :func:`finetune` wrote (a loop round's behaviour cloning)."""


@dataclass
class FinetuneConfig:
    """One behaviour-cloning update: initial policy, demonstration files, schedule, seeds."""

    init_from: str
    """Checkpoint folder of the policy the update starts from."""
    demos: tuple[str, ...]
    """Demonstration ``.npz`` files (``DemoSet.save``), concatenated in this order."""
    steps: int
    """Gradient steps (0: none, the checkpoint holds the initial weights)."""
    lr: float
    """Peak learning rate (AdamW, linear warm-up, cosine decay to 5% of it)."""
    warmup_steps: int
    """Steps over which the rate ramps up from 0 (the optimizer starts fresh)."""
    split_seed: tuple[int, ...]
    """Entropy of the ``np.random.Generator`` that holds out validation episodes."""
    batch_seed: int
    """Seed of the ``torch.Generator`` that draws the minibatches."""
    families: tuple[str, ...] = SFTConfig.families
    """Task families of the demonstration files."""
    val_fraction: float = SFTConfig.val_fraction
    """Share of each family's episodes held out for the validation loss (whole episodes)."""
    batch_size: int = SFTConfig.batch_size
    """Steps per minibatch."""
    weight_decay: float = SFTConfig.weight_decay
    """AdamW weight decay."""
    grad_clip: float = SFTConfig.grad_clip
    """Gradient norm clip."""
    eval_every: int = SFTConfig.eval_every
    """Validation loss every this many steps (and at the end)."""
    focus_from_episode: int | None = None
    """First episode (index into the concatenated files) of the rows ``focus_share`` of every batch is drawn from
    (a round's own demonstrations); None: no focus."""
    focus_share: float = 0.0
    """Share of every batch drawn from the focus rows (0: uniform over all)."""
    batches: str = "uniform"
    """``uniform``: rows drawn uniformly (the loop's setting). ``stage-balanced``: within each family every stage of
    the family's default program (the observation's stage index) gets the same share of the family's draws; the
    families keep their shares of the data. ``potential-gain``: a row is drawn in proportion to ``1 +
    potential_weight * gain / mean gain`` of its family, where gain is how much the step raises the potential of
    the family's program in ``programs`` (:func:`potential_gain_weights`); the families keep their shares."""
    programs: dict[str, str] = field(default_factory=dict)
    """Staged potential program source per family for ``potential-gain`` batches (a round's Text2potential
    programs); a family without one, or whose program names scene objects, uses its default program."""
    potential_weight: float = 1.0
    """``potential-gain`` batches: how strongly a step's potential gain raises its share (0: uniform)."""
    torch_threads: int = 2
    """torch intra-op threads (the result can depend on it)."""
    progress: bool = False
    """Show a progress bar (not recorded)."""

    def __post_init__(self) -> None:
        """Check the fields; errors name the field."""
        self.demos = tuple(str(p) for p in self.demos)
        self.families = tuple(self.families)
        self.split_seed = tuple(int(s) for s in self.split_seed)
        errors = []
        if not self.demos:
            errors.append("FinetuneConfig.demos is empty")
        if self.steps < 0 or self.warmup_steps < 0:
            errors.append(f"FinetuneConfig.steps={self.steps} and warmup_steps={self.warmup_steps} must be >= 0")
        if not 0.0 < self.lr < 1.0:
            errors.append(f"FinetuneConfig.lr={self.lr} must be in (0, 1)")
        if not 0.0 <= self.focus_share < 1.0:
            errors.append(f"FinetuneConfig.focus_share={self.focus_share} must be in [0, 1)")
        if self.batches not in BATCHES:
            errors.append(f"FinetuneConfig.batches={self.batches!r} must be one of {BATCHES}")
        if not 0.0 <= self.potential_weight <= 100.0:
            errors.append(f"FinetuneConfig.potential_weight={self.potential_weight} must be in [0, 100]")
        bad = sorted(set(self.programs) - set(self.families))
        if bad:
            errors.append(f"FinetuneConfig.programs names families {bad} not in {self.families}")
        if self.torch_threads < 1:
            errors.append(f"FinetuneConfig.torch_threads={self.torch_threads} must be >= 1")
        if errors:
            raise ValueError("; ".join(errors))

    def to_dict(self) -> dict[str, Any]:
        """Return the recorded settings (JSON-friendly; without ``progress``)."""
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        data.pop("progress")
        return data


@dataclass
class FinetuneResult:
    """What :func:`finetune` produced."""

    net: CodaPolicyNet
    """The trained network (eval mode), also saved in the checkpoint folder."""
    folder: Path
    """Checkpoint folder."""
    val_loss: float | None
    """Final validation loss (None without steps)."""
    demo_episodes: int
    """Episodes in the demonstration files."""
    focus_rows: int | None
    """Training rows the focus share was drawn from (None without focus)."""


def stage_balanced_weights(family: np.ndarray, stage: np.ndarray) -> np.ndarray:
    """Return a sampling weight per row that gives each stage of a family the same share of the family's draws.

    ``family`` and ``stage`` are the rows' family and stage indices; the weights of a family's rows sum to its
    number of rows (families keep their shares of the data).
    """
    weights = np.zeros(len(family), dtype=np.float64)
    for f in np.unique(family):
        rows = family == f
        stages, counts = np.unique(stage[rows], return_counts=True)
        per_stage = rows.sum() / len(stages)
        for s, c in zip(stages, counts, strict=True):
            weights[rows & (stage == s)] = per_stage / c
    return weights


def episode_potential_gains(obs: np.ndarray, episode: np.ndarray, program: Any) -> np.ndarray:
    """Return each row's potential gain ``phi(next row) - phi(row)`` under a compiled staged ``program``.

    Rows are one or more episodes' steps in time order (``episode`` their episode index); the program's stage
    starts at 0 on each episode's first row and latches forward as it does in the simulator. The last row of an
    episode gains 0.
    """
    phi = np.zeros(len(obs), dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    ends = np.r_[starts[1:], len(obs)]
    states = np.ascontiguousarray(obs, dtype=np.float32)
    for start, end in zip(starts, ends, strict=True):
        stage = 0
        for t in range(start, end):
            value, stage = program.evaluate(states[t], stage)
            phi[t] = value
    gain = np.zeros(len(obs), dtype=np.float64)
    same = episode[1:] == episode[:-1]
    gain[:-1] = np.where(same, phi[1:] - phi[:-1], 0.0)
    return gain


def potential_gain_weights(obs: np.ndarray, episode: np.ndarray, family: np.ndarray, families: tuple[str, ...],
                           programs: dict[str, str], strength: float) -> tuple[np.ndarray, dict[str, str]]:
    """Return a sampling weight per row that favours steps raising their family's staged potential.

    Within a family the weight is ``1 + strength * max(gain, 0) / mean(max(gain, 0))``, rescaled so the family's
    weights sum to its number of rows (families keep their shares). ``programs`` maps family to program source;
    a family without one, or whose program does not compile against the observation layout (it names scene
    objects), uses its default program. Also returns which program each family used (``round`` or ``default``).
    """
    from coda_core_cpp import PotentialError
    from coda_engine.sim.families import get_family
    from coda_engine.sim.layout import LAYOUT
    from coda_engine.sim.stages import compile_program

    weights = np.ones(len(obs), dtype=np.float64)
    used: dict[str, str] = {}
    for f in np.unique(family):
        name = families[int(f)]
        rows = family == f
        program, used[name] = None, "default"
        if programs.get(name):
            try:
                program, used[name] = compile_program(programs[name], LAYOUT), "round"
            except PotentialError:
                program = None
        if program is None:
            program = compile_program(get_family(name).program, LAYOUT)
        gain = np.maximum(episode_potential_gains(obs[rows], episode[rows], program), 0.0)
        mean = gain.mean()
        w = 1.0 + strength * gain / mean if mean > 0 else np.ones(len(gain))
        weights[rows] = w * rows.sum() / w.sum()
    return weights, used


def finetune(cfg: FinetuneConfig, folder: Path | str, version_id: str, meta: dict[str, Any] | None = None,
             sets: list[DemoSet] | None = None) -> FinetuneResult:
    """Fine-tune ``cfg.init_from`` on ``cfg.demos`` and save the checkpoint ``folder`` (``version_id``).

    ``meta`` goes into the checkpoint's ``config.json`` together with ``finetune`` (``cfg.to_dict()``), so
    :func:`replay_finetune_config` can train the same step again; with ``potential-gain`` batches the meta also
    names, per family, whether its given program or its default weighted the rows (``finetune_programs_used``).
    Those keys and ``trainer`` are this step's own: the same keys in ``meta`` (a recorded step's meta handed to its
    replay) are dropped, not written over this step's record (:func:`carried_meta`).
    Metrics go to ``folder / metrics.jsonl``.
    ``sets``: the files of ``cfg.demos`` already loaded, in order (a caller that read them need not read them twice).
    """
    from coda_engine.sim.layout import LAYOUT

    folder = Path(folder)
    if sets is not None and len(sets) != len(cfg.demos):
        raise ValueError(f"finetune: {len(sets)} loaded sets for {len(cfg.demos)} demonstration files")
    net, _ = load_policy(cfg.init_from)
    data = concat(sets if sets is not None else [DemoSet.load(p) for p in cfg.demos])
    train, val = data.split(cfg.val_fraction, np.random.default_rng(list(cfg.split_seed)))
    focus = None
    if cfg.focus_from_episode is not None and cfg.focus_share:
        focus = torch.from_numpy(np.flatnonzero(train.episode >= cfg.focus_from_episode))
    weights = None
    extra: dict[str, Any] = {}  # more of the step's record in the checkpoint's meta
    if cfg.batches == "stage-balanced":
        stage = np.rint(train.obs[:, LAYOUT["stage_index"][0]]).astype(np.int64)
        weights = torch.from_numpy(stage_balanced_weights(train.family, stage))
    elif cfg.batches == "potential-gain":
        row_weights, used = potential_gain_weights(train.obs, train.episode, train.family, train.families,
                                                   cfg.programs, cfg.potential_weight)
        weights = torch.from_numpy(row_weights)
        extra["finetune_programs_used"] = used  # per family: the given program ("round") or its default
    policy = CodaPolicy(net)
    torch.set_num_threads(cfg.torch_threads)
    sft = SFTConfig(families=cfg.families, steps=max(cfg.steps, 1), batch_size=cfg.batch_size,
                    weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip, eval_every=cfg.eval_every,
                    progress=cfg.progress, output_dir=folder.parent, version_id=version_id)
    log = MetricsLog(folder / "metrics.jsonl")
    val_loss = None
    if cfg.steps:
        _, val_loss = fit_bc(policy, train.tensors(), val.tensors(), cfg.steps, cfg.lr, sft, log,
                             torch.Generator().manual_seed(cfg.batch_seed), f"{version_id} bc",
                             warmup_steps=cfg.warmup_steps, focus=focus,
                             focus_share=cfg.focus_share if focus is not None else 0.0, weights=weights)
    log.close()
    policy.net.eval()
    record = {"trainer": FINETUNE_TRAINER, **carried_meta(meta or {}), **extra, "finetune": cfg.to_dict()}
    save_checkpoint(folder, policy.net, version_id, record)
    return FinetuneResult(net=policy.net, folder=folder, val_loss=val_loss, demo_episodes=data.num_episodes,
                          focus_rows=len(focus) if focus is not None else None)


def carried_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """Return the part of a recorded step's checkpoint meta that a replay of it keeps (parent, round, ...).

    What :func:`finetune` writes itself (``trainer``, ``finetune``, ``finetune_programs_used``) is left out: the
    replay records its own (:func:`finetune` applies this to the meta it is given).
    """
    return {k: v for k, v in meta.items() if k not in ("trainer", "finetune", "finetune_programs_used")}


def replay_finetune_config(checkpoint: Path | str, *, init_from: str = "", recorded: dict[str, Any] | None = None,
                           **changes: Any) -> FinetuneConfig:
    """Return the :class:`FinetuneConfig` a checkpoint written by :func:`finetune` was trained with.

    ``changes`` replace recorded fields (e.g. ``batches="stage-balanced"``, ``steps=5000``); ``init_from`` names
    the initial policy's folder when the recorded one has moved (a run folder moved whole is found without it).
    ``recorded``: the checkpoint's config.json already parsed (a caller that read it need not read it again).
    Raises ValueError naming what is wrong (not a recorded behaviour-cloning step, a missing initial policy or
    demonstration file, an unknown or bad field).
    """
    folder = Path(checkpoint)
    meta = (recorded if recorded is not None else read_config(folder)).get("meta") or {}
    if not isinstance(meta.get("finetune"), dict):
        what = meta.get("trainer")
        raise ValueError(f"{folder} records no behaviour-cloning step to replay (trainer {what!r}"
                         + (", written before steps were recorded" if what == FINETUNE_TRAINER else "") + ")")
    data = dict(meta["finetune"])
    unknown = sorted(set(data) - set(FinetuneConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{folder} records settings this code does not have ({', '.join(unknown)})")
    bad = sorted(set(changes) - set(FinetuneConfig.__dataclass_fields__))
    if bad:
        raise ValueError(f"no such setting to change: {', '.join(bad)}")
    data.update(changes)
    # A run folder copied elsewhere keeps its layout (<run>/checkpoints/<version>, <run>/demos/<file>): recorded
    # paths that are gone are looked up there before giving up.
    if init_from:
        if not (Path(init_from) / "config.json").is_file():
            raise ValueError(f"init_from={init_from!r} is not a checkpoint folder")
        data["init_from"] = init_from
    elif not (Path(data["init_from"]) / "config.json").is_file():
        sibling = folder.parent / Path(data["init_from"]).name
        if not (sibling / "config.json").is_file():
            raise ValueError(f"the recorded initial policy {data['init_from']} of {folder} is gone; pass the folder "
                             "it was moved to (init_from)")
        data["init_from"] = str(sibling)
    demos = []
    for path in data["demos"]:
        moved = folder.parent.parent / "demos" / Path(path).name
        if not Path(path).is_file() and not moved.is_file():
            raise ValueError(f"the demonstration file {path} of {folder} is gone")
        demos.append(path if Path(path).is_file() else str(moved))
    data["demos"] = demos
    return FinetuneConfig(**data)

