# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda train sft|rl|compare|residual|replay``: cloning, PPO, shaped-vs-sparse PPO, residual RL, a step again.

``replay`` trains a checkpoint again from the settings recorded in it: a loop round's PPO step
(``<run>/checkpoints/r003-rl``, e.g. at another budget or with the sparse reward) or its behaviour-cloning step
(``<run>/checkpoints/r003-bc``, e.g. with stage-balanced batches or more steps). Each prints one JSON object (the
result) on stdout; progress bars go to stderr; metrics go to ``<output-dir>/<version>/metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``sft``, ``rl``, ``compare``, ``residual`` and ``replay`` with their options."""
    sub = parser.add_subparsers(dest="stage", metavar="STAGE", required=True)
    sft = sub.add_parser("sft", help="behaviour cloning on expert demonstrations")
    sft.add_argument("--families", nargs="+", default=["reach", "pick_place", "push", "stack"])
    sft.add_argument("--episodes-per-family", type=int, default=100)
    sft.add_argument("--steps", type=int, default=12000, help="gradient steps (as SFTConfig.steps)")
    sft.add_argument("--batch-size", type=int, default=256)
    sft.add_argument("--lr", type=float, default=1e-3)
    sft.add_argument("--eval-episodes", type=int, default=20, help="success-rate episodes per family (0: skip)")
    sft.add_argument("--demos-file", default="", help=".npz cache of the demonstrations")
    sft.add_argument("--threads", type=int, default=2, help="torch threads")
    for p in (sft, sub.add_parser("rl", help="PPO fine-tuning with staged-potential shaping"),
              sub.add_parser("compare", help="PPO with shaping vs the sparse reward at equal env steps, per seed")):
        p.add_argument("--split", default="id")
        p.add_argument("--output-dir", type=Path, default=Path("runs/policy"), help="checkpoint root")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        if p is sft:
            p.add_argument("--seed", type=int, default=0)
            p.add_argument("--version-id", default="")
            continue
        p.add_argument("--family", default="reach")
        p.add_argument("--program-file", type=Path, default=None, help="staged potential program (default: family's)")
        p.add_argument("--n-envs", type=int, default=8)
        p.add_argument("--n-steps", type=int, default=64, help="control steps per env per rollout")
        p.add_argument("--total-env-steps", type=int, default=20_000)
        p.add_argument("--epochs", type=int, default=4)
        p.add_argument("--batch-size", type=int, default=128)
        p.add_argument("--lr", type=float, default=3e-4)
        p.add_argument("--init-from", default="", help="checkpoint folder to start from (e.g. an SFT version)")
        p.add_argument("--init-log-std", type=float, default=None,
                       help="action-noise log std at the start of a run from --init-from (default: -2.3)")
        p.add_argument("--kl-coef", type=float, default=None,
                       help="weight of the KL penalty to the --init-from policy (default: 1.0 with --init-from)")
        p.add_argument("--actor-lr-scale", type=float, default=None,
                       help="lr of all but the critic, relative to --lr (default: 0.1 with --init-from, else 1)")
        p.add_argument("--value-trains-encoder", type=int, choices=(0, 1), default=None,
                       help="1: the value loss also trains the shared encoder (default: 0 with --init-from, else 1)")
        p.add_argument("--bound-values", type=int, choices=(0, 1), default=None,
                       help="1: clamp values to the attainable return range (default: 1 with --init-from, else 0)")
        p.add_argument("--target-kl", type=float, default=None,
                       help="stop an update's epochs once the approximate KL exceeds 1.5x this (default: never)")
        p.add_argument("--bc-demos", default="", help="demonstrations .npz (SFT --demos-file) for a BC term in PPO")
        p.add_argument("--bc-coef", type=float, default=0.0, help="weight of the BC term (0: none)")
        p.add_argument("--value-warmup-rollouts", type=int, default=None,
                       help="first rollouts that train the value heads only (default: 4 with --init-from, else 0)")
        p.add_argument("--eval-episodes", type=int, default=0)
        p.add_argument("--keep-successes", type=int, default=0,
                       help="write the last N successful rollout episodes to <run>/successes.npz (demonstrations)")
        p.add_argument("--threads", type=int, default=1, help="torch threads")
        if p.prog.endswith("compare"):
            p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
        else:
            p.add_argument("--seed", type=int, default=0)
            p.add_argument("--version-id", default="")
            p.add_argument("--no-shaping", action="store_true", help="train on the sparse success reward only")
            p.add_argument("--no-resume", action="store_true", help="start over even if the run folder exists")
    residual = sub.add_parser("residual", help="off-policy residual RL on a frozen cloned policy, the critics "
                              "warmed up on the staged potential (coda_policy.residual_rl)")
    residual.add_argument("--init-from", required=True, help="the cloned policy's checkpoint folder (kept frozen)")
    residual.add_argument("--family", default="reach")
    residual.add_argument("--program-file", type=Path, default=None,
                          help="staged potential program (default: the family's)")
    residual.add_argument("--split", default="id")
    residual.add_argument("--no-value-init", action="store_true",
                          help="no staged value warm-up: the critics start untrained (the sparse-reward variant)")
    residual.add_argument("--shaping", action="store_true", help="also add the potential-based shaping term")
    residual.add_argument("--output-dir", type=Path, default=Path("runs/policy"), help="checkpoint root")
    residual.add_argument("--version-id", default="residual-rl")
    from coda_policy.config import ResidualRLConfig

    defaults = ResidualRLConfig.__dataclass_fields__
    for name in ("total_env_steps", "n_envs", "start_stage", "start_stage_share", "residual_hidden",
                 "residual_scale", "explore_std", "gamma", "batch_size", "updates_per_step", "learning_starts",
                 "value_warmup_updates", "critic_hidden", "lr", "tau", "policy_delay", "target_noise",
                 "residual_penalty", "eval_episodes", "seed", "num_threads"):
        default = defaults[name].default
        residual.add_argument("--" + name.replace("_", "-"), type=type(default), default=default,
                              help=f"ResidualRLConfig.{name} (default: {default})")
    replay = sub.add_parser("replay", help="train a PPO or a loop's behaviour-cloning checkpoint again from its "
                            "recorded settings")
    replay.add_argument("checkpoint", type=Path,
                        help="a PPO checkpoint folder (e.g. <run>/checkpoints/r003-rl) or a loop round's behaviour "
                        "cloning (<run>/checkpoints/r003-bc)")
    replay.add_argument("--output-dir", type=Path, required=True, help="checkpoint root of the replay")
    replay.add_argument("--version-id", default="",
                        help="version id of the replay (default: PPO: derived from settings; BC: the recorded one)")
    replay.add_argument("--init-from", default="", help="the initial policy's folder if the recorded one moved")
    replay.add_argument("--total-env-steps", type=int, default=None,
                        help="PPO: another budget (default: the recorded one)")
    replay.add_argument("--reward", default="recorded",
                        help="PPO: recorded (as trained), default-program (the family's default program, shaped) "
                        "or sparse")
    replay.add_argument("--steps", type=int, default=None, help="BC: other gradient steps (default: the recorded)")
    replay.add_argument("--lr", type=float, default=None, help="BC: another peak learning rate")
    replay.add_argument("--batches", default=None,
                        help="BC: uniform (the loop's), stage-balanced (every stage of a family's default program "
                        "the same share of the family's rows) or potential-gain (rows drawn by how much they raise "
                        "their family's staged potential; default: the recorded)")
    replay.add_argument("--programs", type=Path, default=None,
                        help="BC, potential-gain: JSON file {family: staged potential program source} (default: the "
                        "programs the step recorded, a loop round's Text2potential programs)")
    replay.add_argument("--potential-weight", type=float, default=None,
                        help="BC, potential-gain: how strongly a step's potential gain raises its share (default: "
                        "the recorded, 1.0)")
    replay.add_argument("--no-progress", action="store_true", help="no progress bar")


def _rl_config(args: argparse.Namespace, seed: int, shaping: bool, version_id: str) -> Any:
    from coda_policy.rl import RLConfig

    program = args.program_file.read_text() if args.program_file else ""
    return RLConfig(family=args.family, program=program, shaping=shaping, split=args.split, n_envs=args.n_envs,
                    n_steps=args.n_steps, total_env_steps=args.total_env_steps, epochs=args.epochs,
                    batch_size=args.batch_size, lr=args.lr, init_from=args.init_from,
                    init_log_std=args.init_log_std, value_warmup_rollouts=args.value_warmup_rollouts,
                    kl_coef=args.kl_coef, actor_lr_scale=args.actor_lr_scale,
                    value_trains_encoder=None if args.value_trains_encoder is None else bool(args.value_trains_encoder),
                    bound_values=None if args.bound_values is None else bool(args.bound_values),
                    target_kl=args.target_kl, bc_demos=args.bc_demos, bc_coef=args.bc_coef,
                    resume=not getattr(args, "no_resume", False), eval_episodes=args.eval_episodes, seed=seed,
                    output_dir=args.output_dir, version_id=version_id, num_threads=args.threads,
                    progress=not args.no_progress, keep_successes=args.keep_successes)


def _residual(args: argparse.Namespace) -> int:
    """``coda train residual``: one run; prints its result as JSON (exit 2 naming a bad setting)."""
    from coda_policy.config import ResidualRLConfig
    from coda_policy.residual_rl import train_residual

    fields = {name: getattr(args, name) for name in ResidualRLConfig.__dataclass_fields__ if hasattr(args, name)}
    try:
        cfg = ResidualRLConfig(**{**fields, "program": args.program_file.read_text() if args.program_file else "",
                                  "value_init": not args.no_value_init})
    except (ValueError, OSError) as exc:
        print(f"coda train residual: {exc}", file=sys.stderr, flush=True)
        return 2
    print(json.dumps(_jsonable(train_residual(cfg))))
    return 0


def _jsonable(result: Any) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(result).items()}


def _finetune_record(checkpoint: Path) -> dict[str, Any] | None:
    """Return the config.json of a checkpoint a loop round's behaviour cloning wrote (None: replayed as PPO)."""
    from coda_policy.checkpoint import read_config
    from coda_policy.finetune import FINETUNE_TRAINER

    try:
        config = read_config(checkpoint)
    except ValueError:
        return None  # the PPO path names what is wrong with it
    return config if (config.get("meta") or {}).get("trainer") == FINETUNE_TRAINER else None


def read_programs(path: Path) -> dict[str, str]:
    """Read ``--programs``: a JSON object mapping family to program source; ValueError naming what is wrong."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--programs {path}: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError(f"--programs {path} must hold a JSON object mapping family to program source")
    return data


def _replay_finetune(args: argparse.Namespace, recorded: dict[str, Any]) -> int:
    """Replay a behaviour-cloning checkpoint (its parsed config.json: ``recorded``); exit 2 naming bad input."""
    from coda_policy.finetune import finetune, replay_finetune_config

    if args.total_env_steps is not None or args.reward != "recorded":
        print("coda train replay: --total-env-steps and --reward are PPO settings; "
              f"{args.checkpoint} is a behaviour-cloning step", file=sys.stderr, flush=True)
        return 2
    changes = {k: v for k, v in (("steps", args.steps), ("lr", args.lr), ("batches", args.batches),
                                 ("potential_weight", args.potential_weight)) if v is not None}
    meta, version = recorded["meta"], args.version_id or recorded["version_id"]
    folder = args.output_dir / version
    try:
        if folder.resolve() == args.checkpoint.resolve():
            raise ValueError(f"the replay would overwrite {args.checkpoint}: choose another --output-dir")
        if args.programs is not None:
            changes["programs"] = read_programs(args.programs)
        cfg = replay_finetune_config(args.checkpoint, init_from=args.init_from, recorded=recorded,
                                     progress=not args.no_progress, **changes)
    except ValueError as exc:
        print(f"coda train replay: {exc}", file=sys.stderr, flush=True)
        return 2
    result = finetune(cfg, folder, version, meta)  # the recorded step's own keys are dropped
    if "programs" in changes:
        changes["programs"] = sorted(changes["programs"])
    print(json.dumps({"folder": str(result.folder), "version_id": version, "val_loss": result.val_loss,
                      "demo_episodes": result.demo_episodes, "replayed": str(args.checkpoint), **changes}))
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the chosen stage and print its result as JSON; a bad setting exits 2 naming it."""
    try:
        return _run(args)
    except ConfigError as exc:
        print(f"coda train {args.stage}: {exc}", file=sys.stderr, flush=True)
        return 2


class ConfigError(ValueError):
    """A setting of the command line a training config refused."""


def _checked(make: Any, *args: Any, **kwargs: Any) -> Any:
    """Return ``make(*args, **kwargs)`` (a config); its ValueError becomes a :class:`ConfigError`."""
    try:
        return make(*args, **kwargs)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def _run(args: argparse.Namespace) -> int:
    if args.stage == "sft":
        from coda_policy.sft import DemosMismatchError, SFTConfig, train_sft

        cfg = _checked(SFTConfig, families=tuple(args.families), episodes_per_family=args.episodes_per_family,
                        split=args.split, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                        eval_episodes=args.eval_episodes, seed=args.seed, output_dir=args.output_dir,
                        version_id=args.version_id, demos_file=args.demos_file, num_threads=args.threads,
                        progress=not args.no_progress)
        try:
            result = train_sft(cfg)
        except DemosMismatchError as exc:
            raise ConfigError(f"{exc} (--families)") from exc
        print(json.dumps(_jsonable(result)))
        return 0
    if args.stage == "residual":
        return _residual(args)
    recorded = _finetune_record(args.checkpoint) if args.stage == "replay" else None
    if recorded is not None:
        return _replay_finetune(args, recorded)
    from coda_policy.rl import replay_config, train_rl

    if args.stage == "replay":
        if any(v is not None for v in (args.steps, args.lr, args.batches, args.programs, args.potential_weight)):
            print("coda train replay: --steps, --lr, --batches, --programs and --potential-weight are "
                  "behaviour-cloning settings; "
                  f"{args.checkpoint} is replayed as PPO", file=sys.stderr, flush=True)
            return 2
        try:
            cfg = replay_config(args.checkpoint, args.output_dir, version_id=args.version_id,
                                total_env_steps=args.total_env_steps, reward=args.reward, init_from=args.init_from,
                                progress=not args.no_progress)
        except ValueError as exc:
            print(f"coda train replay: {exc}", file=sys.stderr, flush=True)
            return 2
        print(json.dumps({**_jsonable(train_rl(cfg)), "replayed": str(args.checkpoint),
                          "total_env_steps": cfg.total_env_steps, "shaping": cfg.shaping}))
        return 0
    if args.stage == "rl":
        cfg = _checked(_rl_config, args, args.seed, not args.no_shaping, args.version_id)
        print(json.dumps(_jsonable(train_rl(cfg))))
        return 0
    runs: dict[str, list[dict[str, Any]]] = {"shaped": [], "sparse": []}
    configs = [(name, _checked(_rl_config, args, seed, name == "shaped", "")) for seed in args.seeds for name in runs]
    for name, cfg in configs:
        runs[name].append(_jsonable(train_rl(cfg)))
    summary = {name: {"success_rate_last_mean": float(np.mean([r["success_rate_last"] for r in rs])),
                      **{f"{key}_mean": (float(np.mean([r[key] for r in rs]))
                                         if all(r[key] is not None for r in rs) else None)
                         for key in ("eval_success", "eval_success_init")},
                      "runs": rs} for name, rs in runs.items()}
    print(json.dumps({"family": args.family, "total_env_steps": args.total_env_steps, "seeds": args.seeds,
                      **summary}))
    return 0
