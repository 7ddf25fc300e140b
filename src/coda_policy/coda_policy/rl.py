# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""RL fine-tuning: PPO on batched simulated rollouts with rewards shaped by the active staged potential program.

One iteration of :func:`train_rl`:

1. :meth:`Rollouts.collect` steps ``n_envs`` simulated arms for ``n_steps`` control steps with actions sampled
   from the policy. Each step's sparse reward (1 on success) is shaped with the program's potential by
   ``coda_core_cpp.shape_rewards`` (``r + gamma * phi' * (1 - terminated) - phi``; a successful, terminal state
   has potential 0). A time-limit truncation is not a termination: its reward gets ``gamma * V(final_obs)``
   added (bootstrapping). Transitions go to a ``coda_core_cpp.RolloutBuffer`` whose observation rows are the
   observation followed by the instruction embedding; the buffer's ``stages`` hold each transition's value head:
   its stage in the shaping program (``info["stage"]``). The observation's stage index, which the actor reads,
   stays that of the family's default program (:class:`coda_engine.sim.arm.SimArm`), as in the demonstrations.
2. ``RolloutBuffer.compute_gae`` gives advantages and returns; each return is the target of the value head of
   the stage its transition was in (staged value learning).
3. :func:`coda_policy.ppo.ppo_update` runs clipped-ratio PPO epochs over the buffer's seeded minibatches.

Fine-tuning (``init_from``, e.g. an SFT version) starts from a policy that already solves part of the
scenes with its mean action, while the reward is still rare. Without care PPO drifts such a policy away from
what it imitated before the advantages carry any signal: per-minibatch normalised advantages of an untrained
critic are noise at full scale, the value loss reshapes the encoder the actor reads, and the value head of a rarely
visited stage can diverge through the truncation bootstrap (values of -50 where returns lie in [0, 1]). Fields left
at None therefore take the :data:`FINE_TUNE` settings with ``init_from`` and the from-scratch ones otherwise: a
small action noise (the SFT policy's sampled actions still succeed), value-head warm-up, a value loss that trains
the critic MLP but not the encoder the actor reads, values clamped to the attainable return range, a smaller
learning rate for everything but the critic, and a KL penalty to the initial policy on the visited states.
The initial policy's deterministic success is measured on the same evaluation scenes as the final one
(``RLResult.eval_success_init``).
With ``keep_successes`` the last successful rollout episodes are written to the run folder as demonstrations
(``successes.npz``), for a loop to clone in its later rounds.

Everything random is seeded from ``RLConfig.seed`` (scene generation per env, action noise, minibatch order),
so a run is reproducible. A run resumes from its own folder (``trainer_state.safetensors`` + ``.json``:
optimiser, counters, noise generator; no pickle) or starts from another checkpoint (``init_from``, e.g. an SFT version).
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from coda_core_cpp import PotentialProgram, RolloutBuffer, shape_rewards
from coda_policy.checkpoint import (
    load_policy,
    load_trainer_state,
    make_version_id,
    read_config,
    run_config_dict,
    save_checkpoint,
)
from coda_policy.config import PolicyConfig
from coda_policy.data import from_steps
from coda_policy.evaluation import success_rates
from coda_policy.metrics import MetricsLog
from coda_policy.model import CodaPolicyNet
from coda_policy.ppo import ppo_update
from coda_policy.sft import build_policy


@dataclass(frozen=True)
class FineTuneDefaults:
    """What the None fields of :class:`RLConfig` become in a run from ``init_from``."""

    init_log_std: float = -2.3
    """Action-noise log std (std 0.1 of the normalised action)."""
    kl_coef: float = 1.0
    """Weight of the KL penalty to the initial policy."""
    actor_lr_scale: float = 0.1
    """Learning rate of everything but the critic MLP, relative to ``lr``."""
    value_warmup_rollouts: int = 4
    """Rollouts that train the critic alone."""
    value_trains_encoder: bool = False
    """The value loss trains the critic MLP only; the shared encoder keeps the features the actor reads."""
    bound_values: bool = True
    """Values used for GAE and bootstraps are clamped to the attainable return range."""


FINE_TUNE = FineTuneDefaults()
"""The fine-tuning defaults (see the module docstring)."""


@dataclass
class RLConfig:
    """PPO settings."""

    family: str = "reach"
    """Task family the environments generate scenes of."""
    program: str = ""
    """Source of the active staged potential program; empty uses the family's default program."""
    shaping: bool = True
    """Shape rewards with the program's potential; False trains on the sparse success reward alone."""
    split: str = "id"
    """Engine split the scenes are generated from."""
    start_stage: int = 0
    """Stage of the program at which ``start_stage_share`` of the episodes start: the family's scripted expert
    drives there from the scene's start (its steps count toward the step limit), so PPO practises that stage
    (e.g. the one a critic diagnosed as failing); 0 starts every episode at the scene's start."""
    start_stage_share: float = 0.5
    """Share of the episodes that start at ``start_stage`` (the others start at the scene's start)."""
    n_envs: int = 8
    """Simulated arms stepped together."""
    n_steps: int = 64
    """Control steps per env per rollout (the buffer holds ``n_envs * n_steps`` transitions)."""
    total_env_steps: int = 20_000
    """Stop after this many environment steps (rounded up to whole rollouts)."""
    epochs: int = 4
    """PPO epochs per rollout."""
    batch_size: int = 128
    """Transitions per minibatch."""
    lr: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount (also used for the potential shaping)."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_range: float = 0.2
    """PPO ratio clip."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""
    actor_lr_scale: float | None = None
    """Learning rate of everything but the critic MLP (actor, shared encoder, action noise) as a fraction of
    ``lr``; None: 1 from scratch, ``FINE_TUNE.actor_lr_scale`` with ``init_from``."""
    kl_coef: float | None = None
    """Weight of the mean KL divergence from the policy to the initial (``init_from``) policy on the rollout's
    states, a penalty in the PPO loss that keeps a fine-tuned policy near what it imitated unless the advantages
    say otherwise; None: ``FINE_TUNE.kl_coef`` with ``init_from``, 0 from scratch (where it must be 0)."""
    value_trains_encoder: bool | None = None
    """Let the value loss's gradient reach the shared encoder (token MLP, attention) and not only the critic MLP;
    None: True from scratch, ``FINE_TUNE.value_trains_encoder`` with ``init_from`` (so that fitting untrained value
    heads to noisy returns does not change the features the SFT actor reads)."""
    bound_values: bool | None = None
    """Clamp the critic's values used in GAE and in the truncation bootstrap to the range returns can have
    (sparse: [0, 1]; shaped: [-1, 1], potentials lie in [0, 1]), so that a value head of rarely visited stages
    cannot feed its own errors back through bootstrapping and diverge; None: False from scratch,
    ``FINE_TUNE.bound_values`` with ``init_from``."""
    target_kl: float | None = None
    """Stop an update's remaining epochs once a minibatch's approximate KL to the rollout policy exceeds
    1.5 times this (None: always run every epoch); keeps fine-tuning of a low-noise SFT policy stable."""
    init_from: str = ""
    """Checkpoint folder to start from (e.g. an SFT version); empty starts from a fresh network (``policy``)."""
    init_log_std: float | None = None
    """Log standard deviation of the action noise at the start of a run from ``init_from`` (None:
    ``FINE_TUNE.init_log_std``); a fine-tuned SFT policy explores around what it imitates with a smaller noise
    (SFT's own noise, std 0.37, makes its sampled actions fail where its mean succeeds)."""
    bc_demos: str = ""
    """Demonstrations file (a ``DemoSet`` ``.npz``, e.g. SFT's ``demos_file``) for a behaviour-cloning term in PPO."""
    bc_coef: float = 0.0
    """Weight of that term: squared error of the action mean on a minibatch of this family's demonstration steps
    (0: none). Keeps a fine-tuned SFT policy near what it imitated while the reward is still rare."""
    value_warmup_rollouts: int | None = None
    """First rollouts in which only the critic MLP learns (actor and shared encoder kept), so that a policy
    fine-tuned from SFT is not pushed around by advantages of untrained value heads; None:
    ``FINE_TUNE.value_warmup_rollouts`` with ``init_from``, 0 from scratch."""
    resume: bool = True
    """Continue from ``output_dir / version_id`` when it holds a trainer state."""
    checkpoint_every: int = 10
    """Save the checkpoint (and trainer state) every this many rollouts, and at the end."""
    eval_episodes: int = 0
    """Episodes for the final deterministic success-rate measurement (0 skips it); a fresh run from
    ``init_from`` measures the initial policy on the same scenes first."""
    seed: int = 0
    """Seeds scenes, action noise, minibatch order and a fresh network's initialisation."""
    output_dir: Path = Path("runs/policy")
    """Checkpoint root: the run's folder is ``output_dir / version_id``."""
    version_id: str = ""
    """Version id of the result; empty derives ``rl-<hash of this config>``."""
    num_threads: int = 2
    """torch intra-op threads."""
    keep_successes: int = 0
    """Keep the last this many successful rollout episodes (each step's observation and sampled action, clipped
    to the action range) and write them as demonstrations of ``family`` to ``successes.npz`` in the run folder
    (0: none; after a resume, the episodes since it). A loop feeds them to later rounds' behaviour cloning, so what
    PPO found outlives the next cloning."""
    progress: bool = True
    """Show a progress bar."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Network shape when starting fresh (ignored with ``init_from``)."""

    def __post_init__(self) -> None:
        """Check the fields; errors name the field."""
        from coda_engine.sim.families import FAMILIES

        self.output_dir = Path(self.output_dir)
        tuned = bool(self.init_from)
        if self.init_log_std is None and tuned:
            self.init_log_std = FINE_TUNE.init_log_std
        if self.kl_coef is None:
            self.kl_coef = FINE_TUNE.kl_coef if tuned else 0.0
        if self.actor_lr_scale is None:
            self.actor_lr_scale = FINE_TUNE.actor_lr_scale if tuned else 1.0
        if self.value_warmup_rollouts is None:
            self.value_warmup_rollouts = FINE_TUNE.value_warmup_rollouts if tuned else 0
        if self.value_trains_encoder is None:
            self.value_trains_encoder = FINE_TUNE.value_trains_encoder if tuned else True
        if self.bound_values is None:
            self.bound_values = FINE_TUNE.bound_values if tuned else False
        errors = []
        if self.family not in FAMILIES:
            errors.append(f"RLConfig.family={self.family!r} must be one of {sorted(FAMILIES)}")
        for name in ("n_envs", "n_steps", "total_env_steps", "epochs", "batch_size", "checkpoint_every", "num_threads"):
            if getattr(self, name) < 1:
                errors.append(f"RLConfig.{name}={getattr(self, name)} must be >= 1")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 < getattr(self, name) <= 1.0:
                errors.append(f"RLConfig.{name}={getattr(self, name)} must be in (0, 1]")
        if not 0.0 < self.lr < 1.0:
            errors.append(f"RLConfig.lr={self.lr} must be in (0, 1)")
        if self.start_stage < 0 or not 0.0 <= self.start_stage_share <= 1.0:
            errors.append(f"RLConfig.start_stage={self.start_stage} must be >= 0 and start_stage_share="
                          f"{self.start_stage_share} in [0, 1]")
        if not 0.0 < self.clip_range < 1.0:
            errors.append(f"RLConfig.clip_range={self.clip_range} must be in (0, 1)")
        if not 0.0 < self.actor_lr_scale <= 1.0:
            errors.append(f"RLConfig.actor_lr_scale={self.actor_lr_scale} must be in (0, 1]")
        if self.kl_coef and not tuned:
            errors.append(f"RLConfig.kl_coef={self.kl_coef} needs init_from (the policy the KL is measured to)")
        if self.init_log_std is not None and not -5.0 <= self.init_log_std <= 1.0:
            errors.append(f"RLConfig.init_log_std={self.init_log_std} must be in [-5, 1]")
        if self.bc_coef and not Path(self.bc_demos).is_file():
            errors.append(f"RLConfig.bc_demos={self.bc_demos!r} must be a demonstrations file when bc_coef > 0")
        for name in ("vf_coef", "ent_coef", "eval_episodes", "value_warmup_rollouts", "bc_coef", "kl_coef"):
            if getattr(self, name) < 0:
                errors.append(f"RLConfig.{name}={getattr(self, name)} must be >= 0")
        if self.target_kl is not None and self.target_kl <= 0:
            errors.append(f"RLConfig.target_kl={self.target_kl} must be > 0 (or None)")
        if self.keep_successes < 0:
            errors.append(f"RLConfig.keep_successes={self.keep_successes} must be >= 0")
        if self.max_grad_norm <= 0:
            errors.append(f"RLConfig.max_grad_norm={self.max_grad_norm} must be > 0")
        if self.init_from and not (Path(self.init_from) / "config.json").is_file():
            errors.append(f"RLConfig.init_from={self.init_from!r} is not a checkpoint folder")
        if errors:
            raise ValueError("; ".join(errors))
        if not self.version_id:
            self.version_id = make_version_id("rl", self.to_dict(with_version=False))

    def to_dict(self, with_version: bool = True) -> dict[str, Any]:
        """JSON-friendly dict of the settings (``keep_successes`` only when set, so older ids stay the same)."""
        data = run_config_dict(self, with_version)
        if not self.keep_successes:
            data.pop("keep_successes")
        return data

    @property
    def value_range(self) -> tuple[float, float]:
        """Range of the discounted return of any state: the values are clamped to it with ``bound_values``."""
        if not self.bound_values:
            return (-float("inf"), float("inf"))
        return (-1.0 if self.shaping else 0.0, 1.0)

    @property
    def program_source(self) -> str:
        """The active program's source (the family default when ``program`` is empty)."""
        if self.program:
            return self.program
        from coda_engine.sim.families import get_family

        return get_family(self.family).program


class Rollouts:
    """``n_envs`` simulated arms, their current observations, potentials and episode statistics."""

    def __init__(self, cfg: RLConfig, embedder: object, rng: np.random.Generator) -> None:
        """Create the environments and reset each with a seed drawn from ``rng``."""
        from coda_engine.sim.env import CodaSimEnv
        from coda_engine.sim.scene import SceneParams

        self.cfg, self.embedder = cfg, embedder
        self.envs = [
            CodaSimEnv(cfg.family, SceneParams(split=cfg.split), program=cfg.program or None) for _ in range(cfg.n_envs)
        ]
        n = cfg.n_envs
        self.obs = np.zeros((n, self.envs[0].observation_space.shape[0]), dtype=np.float32)
        self.instr = np.zeros((n, 384), dtype=np.float32)
        self.phi = np.zeros(n, dtype=np.float32)
        self.stage = np.zeros(n, dtype=np.int64)
        """Each env's stage of the active program (``info["stage"]``): the value head its observation uses. The
        observation's own stage index follows the family's default program (what the policy reads)."""
        self.episode_start = np.ones(n, dtype=np.float32)
        self.ep_return = np.zeros(n)
        self.ep_shaped = np.zeros(n)
        self.ep_len = np.zeros(n, dtype=np.int64)
        self.finished: list[dict[str, float]] = []
        self.instructions = [""] * n
        self.trajectories: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(n)]
        """Each env's (observation, clipped action) steps of its current episode (kept with ``keep_successes``)."""
        self.successes: deque[SuccessEpisode] = deque(maxlen=max(1, cfg.keep_successes))
        """The last ``keep_successes`` successful episodes."""
        self.rng = rng
        for i, seed in enumerate(rng.integers(0, 2**31 - 1, n)):
            self._reset(i, int(seed))

    def _reset(self, i: int, seed: int | None = None) -> None:
        cfg = self.cfg
        late = cfg.start_stage > 0 and self.rng.random() < cfg.start_stage_share
        obs, info = self.envs[i].reset(seed=seed, options={"start_stage": cfg.start_stage} if late else None)
        self.obs[i] = obs
        self.instr[i] = self.embedder.embed_one(info["instruction"])  # type: ignore[attr-defined]
        self.instructions[i] = str(info["instruction"])
        self.trajectories[i] = []
        self.phi[i], self.stage[i] = info["phi"], info["stage"]
        self.ep_return[i] = self.ep_shaped[i] = self.ep_len[i] = 0

    @torch.no_grad()
    def collect(self, net: CodaPolicyNet, buffer: RolloutBuffer, generator: torch.Generator) -> np.ndarray:
        """Fill ``buffer`` with ``n_steps`` steps of every env; return the values of the observations after them.

        The returned bootstrap values are those of the current (not yet acted on) observations; together with
        ``self.episode_start`` they are the ``last_values``/``dones`` of GAE.
        """
        cfg = self.cfg
        buffer.reset()
        std = net.log_std.exp()
        low, high = cfg.value_range
        for _ in range(cfg.n_steps):
            obs_t = torch.from_numpy(self.obs)
            mean, values = net(obs_t, torch.from_numpy(self.instr))
            actions = mean + std * torch.randn(mean.shape, generator=generator)
            log_probs = net.log_prob(mean, actions)
            heads = net.value_heads(torch.from_numpy(self.stage))
            value = net.head_value(values, heads).clamp(low, high).numpy()
            rewards = np.zeros(cfg.n_envs, dtype=np.float32)
            terminated = np.zeros(cfg.n_envs, dtype=np.float32)
            next_phi = np.zeros(cfg.n_envs, dtype=np.float32)
            next_stage = self.stage.copy()
            next_obs = self.obs.copy()
            truncated_final: list[tuple[int, np.ndarray]] = []
            for i, env in enumerate(self.envs):
                if cfg.keep_successes:
                    self.trajectories[i].append((self.obs[i].copy(), np.clip(actions[i].numpy(), -1.0, 1.0)))
                obs, reward, term, trunc, info = env.step(actions[i].numpy())
                rewards[i], terminated[i], next_phi[i], next_obs[i] = reward, term, info["phi"], obs
                next_stage[i] = info["stage"]
                if trunc and not term:
                    truncated_final.append((i, obs))
            shaped = (
                shape_rewards(rewards, self.phi, next_phi, terminated, cfg.gamma) if cfg.shaping else rewards.copy()
            )
            stored = shaped.copy()
            if truncated_final:
                idx = [i for i, _ in truncated_final]
                final = torch.from_numpy(np.stack([o for _, o in truncated_final]))
                _, final_values = net(final, torch.from_numpy(self.instr[idx]))
                final_heads = net.value_heads(torch.from_numpy(next_stage[idx]))
                stored[idx] += cfg.gamma * net.head_value(final_values, final_heads).clamp(low, high).numpy()
            buffer.add(
                np.concatenate([self.obs, self.instr], axis=1),
                actions.numpy(),
                stored,
                self.episode_start,
                value,
                log_probs.numpy(),
                heads.numpy().astype(np.int32),
            )
            self.ep_return += rewards
            self.ep_shaped += shaped
            self.ep_len += 1
            self.obs, self.phi, self.stage = next_obs, next_phi, next_stage
            done = terminated.astype(bool) | np.isin(np.arange(cfg.n_envs), [i for i, _ in truncated_final])
            self.episode_start = done.astype(np.float32)
            for i in np.flatnonzero(done):
                if cfg.keep_successes and terminated[i]:
                    steps = self.trajectories[i]
                    self.successes.append(SuccessEpisode(np.stack([o for o, _ in steps]),
                                                         np.stack([a for _, a in steps]), self.instructions[i]))
                self.finished.append(
                    {
                        "success": float(terminated[i]),
                        "return": float(self.ep_return[i]),
                        "shaped_return": float(self.ep_shaped[i]),
                        "length": int(self.ep_len[i]),
                    }
                )
                self._reset(int(i))
        _, values = net(torch.from_numpy(self.obs), torch.from_numpy(self.instr))
        return net.head_value(values, net.value_heads(torch.from_numpy(self.stage))).clamp(low, high).numpy()

    def pop_finished(self) -> list[dict[str, float]]:
        """Statistics of the episodes finished since the last call."""
        out, self.finished = self.finished, []
        return out


@dataclass(frozen=True)
class SuccessEpisode:
    """A successful rollout episode (or its part from a late start) as a demonstration."""

    observations: np.ndarray
    """(T, obs_dim) float32, the observation each action was taken in."""
    actions: np.ndarray
    """(T, 4) float32 sampled normalised actions, clipped to [-1, 1]."""
    instruction: str
    """The episode's instruction (embedded when the episodes are written)."""


SUCCESSES_FILE = "successes.npz"
"""File of a run folder holding the kept successful episodes (``RLConfig.keep_successes``)."""


@dataclass
class RLResult:
    """What a run produced."""

    folder: Path
    """Checkpoint folder."""
    version_id: str
    """Its version id."""
    env_steps: int
    """Environment steps taken in total (including before a resume)."""
    episodes: int
    """Episodes finished during this run."""
    success_rate_last: float
    """Success rate of the episodes finished in the last quarter of this run's rollouts (sampled actions)."""
    eval_success: float | None
    """Deterministic success rate on new scenes (None if not measured)."""
    eval_success_init: float | None
    """The initial (``init_from``) policy's deterministic success rate on the same scenes (None if not measured:
    no ``init_from``, no ``eval_episodes``, or a resumed run)."""
    seconds: float
    """Wall time."""
    successes: int = 0
    """Successful episodes written to ``folder / SUCCESSES_FILE`` (``keep_successes``; 0: none kept)."""


REPLAY_REWARDS = ("recorded", "default-program", "sparse")
"""Rewards of a replay (:func:`replay_config`): the recorded program and shaping, the family's default program
(shaped), or the sparse success reward."""


def replay_config(checkpoint: Path | str, output_dir: Path | str, *, version_id: str = "",
                  total_env_steps: int | None = None, reward: str = "recorded", init_from: str = "",
                  progress: bool = False) -> RLConfig:
    """Return the :class:`RLConfig` a PPO checkpoint was trained with, to train it again (e.g. a round's PPO step).

    Every setting is the recorded one (same initial policy, program, start stage, seed), so a replay on the same
    code gives the same weights; the changes asked for are applied on top: ``total_env_steps`` (the value warm-up
    keeps its share of the rollouts), ``reward`` (one of :data:`REPLAY_REWARDS`: ``default-program`` shapes with
    the family's default program instead of the recorded one, ``sparse`` trains on the success reward),
    ``init_from`` (the initial policy's folder when the recorded one has moved). The replay starts over in
    ``output_dir / version_id`` (empty: the id derived from the settings), which must not be ``checkpoint``.
    Raises ValueError naming what is wrong (not a PPO checkpoint, a missing initial policy, a bad override).
    """
    if reward not in REPLAY_REWARDS:
        raise ValueError(f"reward={reward!r} must be one of {REPLAY_REWARDS}")
    folder = Path(checkpoint)
    meta = read_config(folder).get("meta") or {}
    if meta.get("trainer") != "rl" or not isinstance(meta.get("rl"), dict):
        raise ValueError(f"{folder} was not trained by PPO (its config.json records trainer "
                         f"{meta.get('trainer')!r}); only a PPO checkpoint can be replayed")
    data = dict(meta["rl"])
    data["policy"] = PolicyConfig.from_dict(data["policy"])
    if init_from:
        data["init_from"] = init_from
    elif data.get("init_from") and not (Path(data["init_from"]) / "config.json").is_file():
        raise ValueError(f"the recorded initial policy {data['init_from']} of {folder} is gone; pass the folder it "
                         "was moved to (init_from)")
    if total_env_steps is not None:
        if total_env_steps < 1:
            raise ValueError(f"total_env_steps={total_env_steps} must be >= 1")
        per_rollout = data["n_envs"] * data["n_steps"]
        before, after = -(-data["total_env_steps"] // per_rollout), -(-total_env_steps // per_rollout)
        warmup = data.get("value_warmup_rollouts") or 0
        data["value_warmup_rollouts"] = max(1, round(warmup * after / before)) if warmup else 0
        data["total_env_steps"] = total_env_steps
    if reward != "recorded":
        data["program"], data["shaping"] = "", reward == "default-program"
    unknown = sorted(set(data) - set(RLConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{folder} records settings this code does not have ({', '.join(unknown)}): "
                         "it cannot be replayed as it was trained")
    cfg = RLConfig(**{**data, "output_dir": Path(output_dir), "version_id": version_id, "resume": False,
                      "progress": progress})
    if (cfg.output_dir / cfg.version_id).resolve() == folder.resolve():
        raise ValueError(f"the replay would overwrite {folder}: choose another output_dir or version_id")
    return cfg


def _evaluate(net: CodaPolicyNet, cfg: RLConfig, embedder: object) -> float:
    """Deterministic success rate on ``cfg.eval_episodes`` scenes that depend on ``cfg.seed`` alone."""
    rng = np.random.default_rng([cfg.seed, 99])
    return success_rates(net, (cfg.family,), cfg.eval_episodes, rng, cfg.split, embedder)[cfg.family]


def _initial_net(cfg: RLConfig, num_stages: int) -> CodaPolicyNet:
    if cfg.init_from:
        net, _ = load_policy(cfg.init_from)
        if cfg.init_log_std is not None:
            with torch.no_grad():
                net.log_std.fill_(cfg.init_log_std)
    else:
        net = build_policy(PolicyConfig.from_dict(cfg.policy.to_dict()), cfg.seed).net
    if net.cfg.num_stages != num_stages:
        net.set_num_stages(num_stages)
    return net


def train_rl(cfg: RLConfig, embedder: object | None = None) -> RLResult:
    """Run PPO as configured; see the module docstring."""
    start = time.time()
    torch.set_num_threads(cfg.num_threads)
    if embedder is None:
        from coda_policy.serving import embedder as shared_embedder

        embedder = shared_embedder()
    from coda_engine.sim.layout import LAYOUT

    num_stages = PotentialProgram.compile(cfg.program_source, LAYOUT).num_stages if not cfg.program else None
    folder = cfg.output_dir / cfg.version_id
    state = load_trainer_state(folder) if cfg.resume else None
    if state is not None:
        net, _ = load_policy(folder)
    else:
        if num_stages is None:  # a custom program may name scene objects: count its stages from a real env
            from coda_engine.sim.env import CodaSimEnv
            from coda_engine.sim.scene import SceneParams

            probe = CodaSimEnv(cfg.family, SceneParams(split=cfg.split), program=cfg.program)
            probe.reset(seed=cfg.seed)
            num_stages = int(probe.arm.program.num_stages)
        net = _initial_net(cfg, num_stages)
    reference = None
    if cfg.init_from:  # the initial policy, frozen: the KL penalty's anchor (also after a resume)
        reference = _initial_net(cfg, net.cfg.num_stages).eval().requires_grad_(False)
    eval_init = None
    if reference is not None and state is None and cfg.eval_episodes:
        eval_init = _evaluate(reference, cfg, embedder)
    net.train()
    critic = [p for p in net.critic.parameters()]
    critic_ids = {id(p) for p in critic}
    rest = [p for p in net.parameters() if id(p) not in critic_ids]
    optimizer = torch.optim.Adam(
        [{"params": critic, "lr": cfg.lr}, {"params": rest, "lr": cfg.lr * cfg.actor_lr_scale}], eps=1e-5
    )
    generator = torch.Generator().manual_seed(cfg.seed)
    env_steps, update = 0, 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        env_steps, update = int(state["env_steps"]), int(state["update"])
    demos = _family_demos(cfg) if cfg.bc_coef > 0 else None
    rollouts = Rollouts(cfg, embedder, np.random.default_rng([cfg.seed, update]))
    obs_dim = net.cfg.obs_dim + net.cfg.instruction_dim
    buffer = RolloutBuffer(cfg.n_steps, cfg.n_envs, obs_dim, net.cfg.action_dim)
    log = MetricsLog(folder / "metrics.jsonl", append=state is not None)
    log.write("config", **cfg.to_dict(), num_stages=net.cfg.num_stages, resumed_at=env_steps)
    if eval_init is not None:
        log.write("success_init", split=cfg.split, episodes=cfg.eval_episodes, **{cfg.family: eval_init})
    per_rollout = cfg.n_steps * cfg.n_envs
    total_updates = -(-cfg.total_env_steps // per_rollout)
    history: list[list[dict[str, float]]] = []
    bar = tqdm(
        range(update, total_updates),
        desc=f"rl {cfg.version_id}",
        disable=not cfg.progress,
        dynamic_ncols=True,
        initial=update,
        total=total_updates,
    )
    for update in bar:
        last_values = rollouts.collect(net, buffer, generator)
        buffer.compute_gae(last_values, rollouts.episode_start, cfg.gamma, cfg.gae_lambda)
        advantage_std = float(buffer.advantages.std())
        losses = ppo_update(
            net,
            optimizer,
            buffer,
            cfg,
            cfg.seed * 100_003 + update,
            value_only=update < cfg.value_warmup_rollouts,
            demos=demos,
            reference=reference,
        )
        env_steps += per_rollout
        finished = rollouts.pop_finished()
        history.append(finished)
        row = {
            "update": update + 1,
            "env_steps": env_steps,
            "episodes": len(finished),
            "success_rate": float(np.mean([f["success"] for f in finished])) if finished else None,
            "return": float(np.mean([f["return"] for f in finished])) if finished else None,
            "shaped_return": float(np.mean([f["shaped_return"] for f in finished])) if finished else None,
            "reward_mean": float(buffer.rewards.mean()),
            "advantage_std": advantage_std,
            "std": float(net.log_std.detach().exp().mean()),
            **losses,
        }
        log.write("rollout", **row)
        bar.set_postfix(
            succ="-" if row["success_rate"] is None else f"{row['success_rate']:.2f}",
            vloss=f"{losses['value_loss']:.3f}",
            kl=f"{losses['approx_kl']:.3f}",
            kl0=f"{losses['kl_init']:.3f}",
        )
        if (update + 1) % cfg.checkpoint_every == 0 or update + 1 == total_updates:
            _save(folder, net, cfg, optimizer, generator, env_steps, update + 1)
    eval_success = None
    if cfg.eval_episodes:
        eval_success = _evaluate(net, cfg, embedder)
        log.write("success", split=cfg.split, episodes=cfg.eval_episodes, **{cfg.family: eval_success})
        _save(folder, net, cfg, optimizer, generator, env_steps, total_updates, eval_success)
    kept = list(rollouts.successes) if cfg.keep_successes else []
    if kept:
        tmp = folder / f"{SUCCESSES_FILE}.tmp.npz"
        from_steps([e.observations for e in kept], [e.actions for e in kept], [cfg.family] * len(kept),
                   [e.instruction for e in kept], (cfg.family,), embedder).save(tmp)
        os.replace(tmp, folder / SUCCESSES_FILE)
    tail = [f for fs in history[-max(1, len(history) // 4) :] for f in fs]
    result = RLResult(
        folder,
        cfg.version_id,
        env_steps,
        sum(len(h) for h in history),
        float(np.mean([f["success"] for f in tail])) if tail else 0.0,
        eval_success,
        eval_init,
        time.time() - start,
        len(kept),
    )
    log.write(
        "done",
        env_steps=env_steps,
        success_rate_last=result.success_rate_last,
        eval_success=eval_success,
        eval_success_init=eval_init,
        seconds=result.seconds,
        successes=len(kept),
    )
    log.close()
    return result


def _family_demos(cfg: RLConfig) -> dict[str, torch.Tensor]:
    """Return the demonstration steps of ``cfg.family`` in ``cfg.bc_demos`` as tensors (ValueError if none)."""
    from coda_policy.data import DemoSet

    demos = DemoSet.load(cfg.bc_demos)
    if cfg.family not in demos.families:
        raise ValueError(f"RLConfig.bc_demos={cfg.bc_demos!r} holds {list(demos.families)}, not {cfg.family!r}")
    steps = demos.family == demos.families.index(cfg.family)
    return {k: v[torch.from_numpy(steps)] for k, v in demos.tensors().items() if k in ("obs", "instr", "action")}


def _save(
    folder: Path,
    net: CodaPolicyNet,
    cfg: RLConfig,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    env_steps: int,
    update: int,
    eval_success: float | None = None,
) -> None:
    meta = {
        "trainer": "rl",
        "rl": cfg.to_dict(),
        "env_steps": env_steps,
        "parent": cfg.init_from or None,
        "eval_success": eval_success,
    }
    state = {
        "optimizer": optimizer.state_dict(),
        "generator": generator.get_state(),
        "env_steps": env_steps,
        "update": update,
    }
    was_training = net.training
    net.eval()
    save_checkpoint(folder, net, cfg.version_id, meta, state)
    net.train(was_training)
