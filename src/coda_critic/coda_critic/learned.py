# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The learned vision-language critic: a small CNN over keyframes plus the MiniLM instruction embedding.

Inputs are those of :func:`coda_critic.dataset.episode_features` (nothing privileged): each keyframe
goes through a shared 3-layer CNN, the frame codes are concatenated in order with their relative
steps, and joined with the instruction embedding (offline all-MiniLM-L6-v2, 384-d), the family
one-hot, the keyframe count and the tool trajectory. Two heads predict the failure mode and the
failed stage (0 = none, k + 1 = stage k; stages the family does not have are masked). It is trained
on grounded labels (:func:`train`), saved as ``<root>/<version>/model.safetensors`` + ``config.json``
(the version is a hash of the weights) and reloaded with :func:`load_critic`. Pure module: no rclpy.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from coda_critic.dataset import (
    FAMILY_NAMES,
    MAX_KEYFRAMES,
    MAX_STAGES,
    Examples,
    FeatureConfig,
    episode_features,
)
from coda_critic.diagnosis import (
    MODE_SUCCESS,
    MODES,
    Diagnosis,
    EpisodeLike,
    diagnosis_id,
    scene_conditions,
    stage_names,
)
from coda_critic.grounded import Finding, describe
from coda_critic.models import EMBEDDED_MODEL
from coda_engine.sim.scene import Scene

TEXT_DIM = 384
"""Size of the MiniLM sentence embedding."""
MODEL_FILE, CONFIG_FILE = "model.safetensors", "config.json"
LEARNED_DETAIL: dict[str, str] = {
    "success": "the keyframes show the task done",
    "never_approached": "the end effector never approached the {target} in the keyframes",
    "wrong_object": "it went for another object instead of the {target}",
    "missed_grasp": "the gripper closed at the {target} but missed the grasp",
    "dropped": "it held the {target} and then dropped it on the way",
    "misplaced": "the {target} was set down in the wrong place",
    "knocked_over": "an object was knocked over or collided with",
    "timed_out": "it was still moving toward completion when it timed out",
}
"""Explanation of each predicted mode (the learned critic has no measured facts to cite)."""


@dataclass(frozen=True)
class LearnedConfig:
    """Model size and training settings of the learned critic."""

    features: FeatureConfig = field(default_factory=FeatureConfig)
    """Input shapes."""
    frame_dim: int = 64
    """Code size of one keyframe."""
    hidden: int = 192
    """Width of the joint layer."""
    epochs: int = 30
    """Passes over the training examples."""
    batch_size: int = 64
    """Examples per update."""
    lr: float = 2e-3
    """Adam learning rate."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    stage_weight: float = 1.0
    """Weight of the stage loss against the mode loss."""
    frame_diff: bool = True
    """Give each keyframe's encoder the frame and its difference to the first frame (what moved)."""
    proprio_deltas: bool = True
    """Give the trajectory encoder the per-sample displacements as well as the positions."""
    frame_pool: int = 1
    """Grid the keyframe encoder pools its last feature map to (1: global pooling, translation invariant; it
    generalises to object positions outside the training region better than a 3 x 3 grid)."""
    image_shift: int = 2
    """Training augmentation: keyframes of a minibatch are shifted by up to this many pixels (same shift per batch)."""
    proprio_shift: float = 0.05
    """Training augmentation: a uniform random shift of each trajectory's x and y in [-this, this], m
    (the critic must not tie a failure mode to where on the table it happened)."""
    seed: int = 0
    """Seed of initialisation and shuffling."""

    def __post_init__(self) -> None:
        """Check ranges."""
        if min(self.frame_dim, self.hidden, self.epochs, self.batch_size, self.frame_pool) < 1 or not 0 < self.lr < 1:
            raise ValueError(f"LearnedConfig: sizes, epochs and batch_size must be >= 1 and lr in (0, 1): {self}")
        if self.image_shift < 0 or self.proprio_shift < 0:
            raise ValueError(f"LearnedConfig: image_shift and proprio_shift must be >= 0: {self}")

    def to_json_dict(self) -> dict[str, Any]:
        """Plain dict (features nested)."""
        return asdict(self)

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> LearnedConfig:
        """Inverse of :meth:`to_json_dict`; inputs added later are off for configs saved before them."""
        return cls(**{**LEGACY_INPUTS, **data, "features": FeatureConfig(**data["features"])})


LEGACY_INPUTS: dict[str, Any] = {"frame_diff": False, "proprio_deltas": False, "proprio_shift": 0.0, "frame_pool": 3,
                                  "image_shift": 0}
"""Values of later :class:`LearnedConfig` fields that reproduce critics saved before those fields existed."""


ARCHITECTURE_FIELDS = ("features", "frame_dim", "hidden", "frame_diff", "proprio_deltas", "frame_pool")
""":class:`LearnedConfig` fields that shape the network (the rest are training settings)."""


class CriticNet(nn.Module):
    """The network (see the module docstring)."""

    def __init__(self, config: LearnedConfig) -> None:
        """Build the layers."""
        super().__init__()
        fc = config.features
        self.config = config
        self.frame = nn.Sequential(
            nn.Conv2d(6 if config.frame_diff else 3, 16, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(config.frame_pool), nn.Flatten(),
            nn.Linear(32 * config.frame_pool**2, config.frame_dim), nn.ReLU())
        self.text = nn.Sequential(nn.Linear(TEXT_DIM, 64), nn.ReLU())
        self.proprio = nn.Sequential(nn.Linear(fc.proprio_points * (8 if config.proprio_deltas else 4), 64), nn.ReLU())
        joint = fc.num_frames * (config.frame_dim + 1) + 64 + 64 + len(FAMILY_NAMES) + MAX_KEYFRAMES
        self.trunk = nn.Sequential(nn.Linear(joint, config.hidden), nn.ReLU(), nn.Linear(config.hidden, config.hidden),
                                   nn.ReLU())
        self.mode_head = nn.Linear(config.hidden, len(MODES))
        self.stage_head = nn.Linear(config.hidden, MAX_STAGES + 1)

    def forward(self, frames: torch.Tensor, steps: torch.Tensor, count: torch.Tensor, proprio: torch.Tensor,
                family: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (mode logits (B, 8), stage logits (B, 5)) with stages the family lacks masked out."""
        b, f = frames.shape[:2]
        images = frames.float() / 255.0
        if self.config.frame_diff:
            images = torch.cat([images, images - images[:, :1]], dim=2)
        codes = self.frame(images.reshape(b * f, *images.shape[2:])).reshape(b, f, -1)
        if self.config.proprio_deltas:
            proprio = torch.cat([proprio, torch.diff(proprio, dim=1, prepend=proprio[:, :1])], dim=-1)
        parts = [torch.cat([codes, steps.unsqueeze(-1)], dim=-1).reshape(b, -1), self.text(text),
                 self.proprio(proprio.reshape(b, -1)), nn.functional.one_hot(family, len(FAMILY_NAMES)).float(),
                 nn.functional.one_hot((count - 1).clamp(0, MAX_KEYFRAMES - 1), MAX_KEYFRAMES).float()]
        h = self.trunk(torch.cat(parts, dim=-1))
        return self.mode_head(h), self.stage_head(h) + _stage_mask(family)


def _stage_mask(family: torch.Tensor) -> torch.Tensor:
    limits = torch.tensor([len(stage_names(f)) for f in FAMILY_NAMES], device=family.device)
    allowed = torch.arange(MAX_STAGES + 1, device=family.device)[None, :] <= limits[family][:, None]
    return torch.where(allowed, 0.0, -1e9)


def _tensors(examples: Examples, text: np.ndarray, index: np.ndarray) -> list[torch.Tensor]:
    return [torch.from_numpy(examples.frames[index]), torch.from_numpy(examples.frame_steps[index]),
            torch.from_numpy(examples.keyframe_count[index]), torch.from_numpy(examples.proprio[index]),
            torch.from_numpy(examples.family[index]), torch.from_numpy(text[index])]


def embed_instructions(instructions: Sequence[str], embedder: Any | None = None) -> np.ndarray:
    """(N, 384) MiniLM embeddings (``coda_engine.text_embedding.TextEmbedder`` unless one is given)."""
    if embedder is None:
        from coda_engine.text_embedding import TextEmbedder

        embedder = TextEmbedder()
    return np.asarray(embedder.embed(list(instructions)), dtype=np.float32)


def train(examples: Examples, text: np.ndarray, config: LearnedConfig | None = None,
          log: Callable[[str], None] | None = None, init: CriticNet | None = None) -> tuple[CriticNet, dict[str, Any]]:
    """Fit a :class:`CriticNet` on labelled examples; return it and the training history.

    ``init`` continues from a trained network (a copy; its architecture and input shapes are kept, ``config``
    then only sets the training settings: epochs, batch size, learning rate, augmentation, seed).
    """
    cfg = config or LearnedConfig()
    if init is not None:
        cfg = replace(cfg, **{name: getattr(init.config, name) for name in ARCHITECTURE_FIELDS})
    if len(examples) == 0 or len(examples.mode) != len(examples):
        raise ValueError(f"train: need labelled examples, got {len(examples)} examples and {len(examples.mode)} labels")
    if text.shape != (len(examples), TEXT_DIM):
        raise ValueError(f"train: text embeddings have shape {text.shape}, expected ({len(examples)}, {TEXT_DIM})")
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = CriticNet(cfg)
    if init is not None:
        model.load_state_dict(init.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(cfg.epochs, 1))
    mode_y, stage_y = torch.from_numpy(examples.mode), torch.from_numpy(examples.stage)
    history: dict[str, Any] = {"loss": [], "seconds": 0.0}
    start = time.perf_counter()
    model.train()
    for epoch in range(cfg.epochs):
        order = rng.permutation(len(examples))
        total = 0.0
        for i in range(0, len(order), cfg.batch_size):
            idx = order[i:i + cfg.batch_size]
            inputs = _tensors(examples, text, idx)
            if cfg.proprio_shift > 0:  # same xy shift for every sample of a trajectory
                shift = rng.uniform(-cfg.proprio_shift, cfg.proprio_shift, (len(idx), 1, 2)).astype(np.float32)
                inputs[3] = inputs[3].clone()
                inputs[3][:, :, :2] += torch.from_numpy(shift)
            if cfg.image_shift > 0:
                dy, dx = (int(v) for v in rng.integers(-cfg.image_shift, cfg.image_shift + 1, 2))
                inputs[0] = torch.roll(inputs[0], shifts=(dy, dx), dims=(3, 4))
            mode_logits, stage_logits = model(*inputs)
            loss = (nn.functional.cross_entropy(mode_logits, mode_y[idx])
                    + cfg.stage_weight * nn.functional.cross_entropy(stage_logits, stage_y[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        sched.step()
        history["loss"].append(total / len(examples))
        if log is not None:
            log(f"epoch {epoch + 1}/{cfg.epochs} loss {history['loss'][-1]:.4f}")
    history["seconds"] = time.perf_counter() - start
    model.eval()
    return model, history


@torch.no_grad()
def predict(model: CriticNet, examples: Examples, text: np.ndarray, batch_size: int = 256
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mode index, stage class, mode probability) per example; success forces stage class 0."""
    model.eval()
    modes, stages, probs = [], [], []
    for i in range(0, len(examples), batch_size):
        idx = np.arange(i, min(i + batch_size, len(examples)))
        mode_logits, stage_logits = model(*_tensors(examples, text, idx))
        p = torch.softmax(mode_logits, dim=-1)
        mode = p.argmax(dim=-1)
        stage_logits[:, 0] = -1e9  # a failure has a failed stage
        stage = torch.where(mode == MODES.index(MODE_SUCCESS), 0, stage_logits.argmax(dim=-1))
        modes.append(mode.numpy())
        stages.append(stage.numpy())
        probs.append(p.max(dim=-1).values.numpy())
    return np.concatenate(modes), np.concatenate(stages), np.concatenate(probs)


def model_version(model: CriticNet) -> str:
    """``lc-`` + 10 hex digits of the sha256 of the weights (in parameter order)."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return "lc-" + digest.hexdigest()[:10]


def save_model(model: CriticNet, root: Path | str, metrics: dict[str, Any] | None = None) -> Path:
    """Write ``<root>/<version>/{model.safetensors, config.json}``; return the folder."""
    version = model_version(model)
    folder = Path(root) / version
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / MODEL_FILE))
    meta = {"version": version, "config": model.config.to_json_dict(), "modes": list(MODES),
            "families": list(FAMILY_NAMES), "metrics": metrics or {}}
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))
    return folder


class LearnedCritic:
    """Diagnoses from keyframes, instruction and tool trajectory (no privileged state)."""

    name = "learned"

    def __init__(self, model: CriticNet, version: str, embedder: Any | None = None) -> None:
        """Wrap a trained network; ``embedder`` defaults to the offline MiniLM embedder."""
        self.model = model
        self.version = version
        self.embedder = embedder

    def diagnose(self, episodes: Sequence[EpisodeLike]) -> list[Diagnosis]:
        """One diagnosis per episode; :class:`CriticInputError` for empty or malformed keyframes."""
        examples = episode_features(episodes, self.model.config.features)
        if self.embedder is None:  # one embedder (and its per-string cache) for the critic's lifetime
            from coda_engine.text_embedding import TextEmbedder

            self.embedder = TextEmbedder()
        text = embed_instructions(examples.instructions, self.embedder)
        modes, stages, probs = predict(self.model, examples, text)
        return [self.compose(ep.scene, ep.episode_id, int(m), int(s), float(p))
                for ep, m, s, p in zip(episodes, modes, stages, probs, strict=True)]

    def compose(self, scene: Scene, episode_id: str, mode_index: int, stage_class: int, probability: float
                ) -> Diagnosis:
        """Build the diagnosis of one prediction (mode index, stage class, mode probability)."""
        names = stage_names(scene.family)
        mode = MODES[mode_index]
        stage = min(stage_class - 1, len(names) - 1) if mode != MODE_SUCCESS else -1
        stage_name = names[stage] if stage >= 0 else ""
        conditions = scene_conditions(scene)
        detail = LEARNED_DETAIL[mode].format(target=scene.target_object)
        text = describe(scene, Finding(mode, detail), stage, stage_name, len(names), 0, conditions)
        return Diagnosis(diagnosis_id=diagnosis_id(self.name, [episode_id], self.version), episode_ids=[episode_id],
                         scene_id=scene.scene_id, family=scene.family, failure_mode=mode, failed_stage=stage,
                         failed_stage_name=stage_name, target_object=scene.target_object, conditions=conditions,
                         text=text, confidence=float(np.clip(probability, 0.0, 1.0)), critic_backend=self.name,
                         critic_version=self.version)


def agreement(learned: Sequence[Diagnosis], grounded: Sequence[Diagnosis]) -> dict[str, float]:
    """How often ``learned`` diagnoses agree with ``grounded`` ones of the same episodes (same order).

    Keys: ``episodes``, ``failure_mode`` (same mode), ``stage`` (same failed stage, -1 for success) and
    ``failure`` (same success / failure verdict), each a fraction.
    """
    pairs = list(zip(learned, grounded, strict=True))
    bad = [a.episode_ids for a, b in pairs if a.episode_ids != b.episode_ids]
    if bad:
        raise ValueError(f"agreement: diagnoses are not about the same episodes (first mismatch: {bad[0]})")
    n = len(pairs)
    if n == 0:
        return {"episodes": 0, "failure_mode": float("nan"), "stage": float("nan"), "failure": float("nan")}
    return {"episodes": n,
            "failure_mode": sum(a.failure_mode == b.failure_mode for a, b in pairs) / n,
            "stage": sum(a.failed_stage == b.failed_stage for a, b in pairs) / n,
            "failure": sum(a.is_failure == b.is_failure for a, b in pairs) / n}


def load_critic(folder: Path | str = EMBEDDED_MODEL, embedder: Any | None = None) -> LearnedCritic:
    """Load a saved critic (default: the embedded one); ValueError when files are missing or weights mismatch."""
    folder = Path(folder)
    for name in (MODEL_FILE, CONFIG_FILE):
        if not (folder / name).is_file():
            raise ValueError(f"load_critic: {folder / name} is missing")
    meta = json.loads((folder / CONFIG_FILE).read_text())
    if meta.get("modes") != list(MODES) or meta.get("families") != list(FAMILY_NAMES):
        raise ValueError(f"load_critic: {folder} was trained for modes {meta.get('modes')} / families "
                         f"{meta.get('families')}, not {list(MODES)} / {list(FAMILY_NAMES)}")
    model = CriticNet(LearnedConfig.from_json_dict(meta["config"]))
    model.load_state_dict(load_file(str(folder / MODEL_FILE)))
    model.eval()
    version = model_version(model)
    if version != meta["version"]:
        raise ValueError(f"load_critic: weights in {folder} hash to {version}, config.json says {meta['version']}")
    return LearnedCritic(model, version, embedder)
