# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Configuration of the policy network, and the observation layout it reads.

The layout is stored in the config (and so in every checkpoint's ``config.json``), so a checkpoint can
be loaded and run without the engine: the network finds the end effector, the object slots and the
stage index through it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SLOT_FIELDS: tuple[tuple[str, int], ...] = (("pos", 3), ("rgb", 3), ("shape", 1), ("size", 3), ("present", 1))
"""Fields of one object slot in the observation, in order, with their lengths."""


def default_layout(max_objects: int = 7) -> dict[str, tuple[int, int]]:
    """Return the engine's flat observation layout ``{name: (offset, length)}`` for ``max_objects`` slots.

    Same order as ``coda_engine.sim.layout.LAYOUT`` (checked by the tests): ``ee_pos``, ``ee_vel``,
    ``gripper``, the object slots ``obj{i}_{pos,rgb,shape,size,present}``, ``stage_index``.
    """
    layout: dict[str, tuple[int, int]] = {}
    offset = 0
    for name, length in (("ee_pos", 3), ("ee_vel", 3), ("gripper", 1)):
        layout[name] = (offset, length)
        offset += length
    for i in range(max_objects):
        for name, length in SLOT_FIELDS:
            layout[f"obj{i}_{name}"] = (offset, length)
            offset += length
    layout["stage_index"] = (offset, 1)
    return layout


@dataclass
class PolicyConfig:
    """Shape of the language-conditioned policy network (see :class:`coda_policy.model.CodaPolicyNet`)."""

    max_objects: int = 7
    """Object slots in the observation (the engine's ``MAX_OBJECTS``)."""
    layout: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Observation layout ``{name: (offset, length)}``; empty means :func:`default_layout` of ``max_objects``."""
    instruction_dim: int = 384
    """Length of the instruction embedding (MiniLM: 384)."""
    num_shapes: int = 5
    """Number of object shape codes (one-hot encoded: box, cylinder, sphere, bin, region)."""
    d_model: int = 64
    """Width of object tokens and attention."""
    num_heads: int = 4
    """Attention heads; must divide ``d_model``."""
    num_queries: int = 2
    """Instruction-conditioned queries that pool the object tokens (e.g. one finds the target, one the goal)."""
    self_attention_layers: int = 1
    """Self-attention layers over the object tokens (relations such as "left of"); 0 disables."""
    hidden_dim: int = 128
    """Width of the actor and critic MLPs."""
    num_stages: int = 4
    """Value heads: one per stage of the active potential program (a stage index past the last uses the last)."""
    max_stages: int = 8
    """Stage indices given to the network as input: one-hot of ``min(stage, max_stages)``."""
    action_dim: int = 4
    """Action length: (dx, dy, dz) normalised to [-1, 1] and the gripper command in [-1, 1]."""
    max_delta: float = 0.05
    """Metres of end-effector displacement per control step for a normalised action of 1."""
    init_log_std: float = -1.0
    """Initial log standard deviation of the Gaussian action noise (RL exploration)."""
    residual_hidden: int = 0
    """Width of the residual action head added by off-policy RL (:mod:`coda_policy.residual_rl`); 0: none. With
    one, the action is the cloned actor's plus a bounded correction computed from the same features."""
    residual_scale: float = 0.2
    """Largest size of the residual correction, per action dimension, in the normalised action range [-1, 1]."""

    def __post_init__(self) -> None:
        """Fill the default layout and check every field; errors name the field."""
        if not self.layout:
            self.layout = default_layout(self.max_objects)
        self.layout = {str(k): (int(v[0]), int(v[1])) for k, v in self.layout.items()}
        errors = []
        positive = ("max_objects", "instruction_dim", "num_shapes", "d_model", "num_heads", "num_queries",
                    "hidden_dim", "num_stages", "max_stages", "action_dim")
        errors += [f"PolicyConfig.{n}={getattr(self, n)} must be >= 1" for n in positive if getattr(self, n) < 1]
        if self.self_attention_layers < 0:
            errors.append(f"PolicyConfig.self_attention_layers={self.self_attention_layers} must be >= 0")
        if self.num_heads >= 1 and self.d_model % self.num_heads:
            errors.append(f"PolicyConfig.num_heads={self.num_heads} must divide d_model={self.d_model}")
        if self.action_dim != 4:
            errors.append(f"PolicyConfig.action_dim={self.action_dim} must be 4 (dx, dy, dz, gripper)")
        if self.num_stages > self.max_stages:
            errors.append(f"PolicyConfig.num_stages={self.num_stages} must be <= max_stages={self.max_stages}")
        if not 0.0 < self.max_delta <= 0.2:
            errors.append(f"PolicyConfig.max_delta={self.max_delta} must be in (0, 0.2] m")
        if self.residual_hidden < 0:
            errors.append(f"PolicyConfig.residual_hidden={self.residual_hidden} must be >= 0 (0: no residual head)")
        if not 0.0 < self.residual_scale <= 1.0:
            errors.append(f"PolicyConfig.residual_scale={self.residual_scale} must be in (0, 1]")
        if not -5.0 <= self.init_log_std <= 1.0:
            errors.append(f"PolicyConfig.init_log_std={self.init_log_std} must be in [-5, 1]")
        needed = ["ee_pos", "ee_vel", "gripper", "stage_index"] + [
            f"obj{i}_{n}" for i in range(max(self.max_objects, 0)) for n, _ in SLOT_FIELDS]
        missing = [n for n in needed if n not in self.layout]
        if missing:
            errors.append(f"PolicyConfig.layout lacks {missing[:4]}{'...' if len(missing) > 4 else ''}")
        if errors:
            raise ValueError("; ".join(errors))

    @property
    def obs_dim(self) -> int:
        """Length of the observation vector the layout describes."""
        return max(o + n for o, n in self.layout.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (layout entries as lists)."""
        data = asdict(self)
        data["layout"] = {k: list(v) for k, v in self.layout.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error naming them."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"PolicyConfig: unknown fields {unknown}")
        values = dict(data)
        if "layout" in values:
            values["layout"] = {k: (int(v[0]), int(v[1])) for k, v in values["layout"].items()}
        return cls(**values)


@dataclass
class ResidualRLConfig:
    """Settings of :func:`train_residual` (module docstring); all are recorded in the checkpoint."""

    init_from: str
    """The cloned policy's checkpoint folder (frozen; the residual is added to it)."""
    family: str = "reach"
    """Task family the arms practise (the family the round's diagnoses chose)."""
    program: str = ""
    """Staged potential program (source text) whose potential warms the critic up and, with ``shaping``, shapes
    the reward; empty: the family's default program."""
    value_init: bool = True
    """Fit the critics to the program's potential before any return is seen (staged value learning)."""
    shaping: bool = False
    """Add the potential-based shaping term ``gamma * phi' - phi`` to each reward."""
    total_env_steps: int = 4096
    """Environment steps, all arms together."""
    n_envs: int = 4
    """Simulated arms stepped side by side."""
    split: str = "id"
    """Scene split the arms practise on and the evaluation uses."""
    start_stage: int = 0
    """Stage episodes may start at (the diagnosed failed stage); 0: every episode starts at the beginning."""
    start_stage_share: float = 0.0
    """Share of episodes that start at ``start_stage``."""
    residual_hidden: int = 64
    """Width of the residual head."""
    residual_scale: float = 0.2
    """Largest correction per action dimension, in the normalised action range."""
    explore_std: float = 0.1
    """Standard deviation of the exploration noise added to the action while collecting."""
    gamma: float = 0.97
    """Discount factor."""
    batch_size: int = 256
    """Transitions per gradient update."""
    updates_per_step: float = 0.5
    """Gradient updates per environment step (each arm's step counts)."""
    learning_starts: int = 512
    """Environment steps collected (cloned policy plus noise) before the first update."""
    value_warmup_updates: int = 300
    """Updates of the staged value warm-up (``value_init``)."""
    critic_hidden: int = 256
    """Width of the critics' LayerNorm MLPs."""
    lr: float = 3e-4
    """Adam learning rate of the critics and the residual head."""
    tau: float = 0.01
    """Target networks' share of the online weights per update."""
    policy_delay: int = 2
    """Critic updates per residual head update."""
    target_noise: float = 0.1
    """Standard deviation of the smoothing noise on the target action (clipped to twice that)."""
    residual_penalty: float = 0.1
    """Weight of the mean squared residual correction in the residual head's loss."""
    eval_episodes: int = 20
    """Evaluation scenes for the success before and after (0: none)."""
    seed: int = 0
    """Seed of everything random."""
    output_dir: Path = Path("runs/policy")
    """Checkpoint root: the result goes to ``output_dir / version_id``."""
    version_id: str = "residual-rl"
    """Name of the result's folder."""
    num_threads: int = 1
    """Torch threads."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything the caller wants recorded with the settings (e.g. the loop's round)."""

    def __post_init__(self) -> None:
        """Check every field; the error names the field."""
        self.output_dir = Path(self.output_dir)
        errors = []
        if not self.init_from or not (Path(self.init_from) / "config.json").is_file():
            errors.append(f"ResidualRLConfig.init_from={self.init_from!r} is not a checkpoint folder")
        for name in ("total_env_steps", "n_envs", "residual_hidden", "batch_size", "critic_hidden", "policy_delay"):
            if getattr(self, name) < 1:
                errors.append(f"ResidualRLConfig.{name}={getattr(self, name)} must be >= 1")
        for name in ("learning_starts", "value_warmup_updates", "eval_episodes", "start_stage"):
            if getattr(self, name) < 0:
                errors.append(f"ResidualRLConfig.{name}={getattr(self, name)} must be >= 0")
        for name, low, high in (("residual_scale", 0.0, 1.0), ("gamma", 0.0, 1.0), ("tau", 0.0, 1.0)):
            if not low < getattr(self, name) <= high:
                errors.append(f"ResidualRLConfig.{name}={getattr(self, name)} must be in ({low}, {high}]")
        for name in ("explore_std", "target_noise", "residual_penalty", "updates_per_step"):
            if getattr(self, name) < 0:
                errors.append(f"ResidualRLConfig.{name}={getattr(self, name)} must be >= 0")
        if not 0.0 <= self.start_stage_share <= 1.0:
            errors.append(f"ResidualRLConfig.start_stage_share={self.start_stage_share} must be in [0, 1]")
        if errors:
            raise ValueError("; ".join(errors))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly settings."""
        data = asdict(self)
        data["output_dir"] = str(self.output_dir)
        return data
