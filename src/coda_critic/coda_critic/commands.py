# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda critic train|eval``: train the learned critic on grounded labels, and measure the critics.

``train`` generates labelled episodes of the training split (fault actors on real MuJoCo, grounded
labels), fits the learned critic and saves it under ``--out/<version>/``. ``eval`` generates held-out
episodes per split (new seeds), and reports per backend and split the accuracy against the grounded
labels (failure mode and failed stage), per-mode precision/recall of the learned critic, diagnosis
latency per episode, and the Text2potential compile rate over every diagnosis' text.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_ROOT = Path("runs/critic")
SPLITS = ("id", "position", "instruction", "object", "distractor")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``train`` and ``eval`` with their options."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    train = sub.add_parser("train", help="train the learned critic on grounded labels of generated episodes")
    train.add_argument("--episodes", type=int, default=1000, help="training episodes (split id)")
    train.add_argument("--epochs", type=int, default=30, help="training epochs")
    train.add_argument("--seed", type=int, default=1, help="seed of scene generation and training")
    train.add_argument("--workers", type=int, default=2, help="processes generating episodes")
    train.add_argument("--data", type=Path, default=None, help="reuse/write the generated examples (.npz)")
    train.add_argument("--out", type=Path, default=DEFAULT_ROOT, help="folder of saved critic versions")
    train.add_argument("--json", action="store_true", help="print one JSON object")
    ev = sub.add_parser("eval", help="accuracy, latency and Text2potential compile rate on held-out episodes")
    ev.add_argument("--model", type=Path, default=None, help="critic folder (default: newest under runs/critic)")
    ev.add_argument("--episodes", type=int, default=500, help="held-out episodes per split")
    ev.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS, help="splits to evaluate")
    ev.add_argument("--seed", type=int, default=1001, help="seed of the held-out scenes (differs from training)")
    ev.add_argument("--workers", type=int, default=2, help="processes generating episodes")
    ev.add_argument("--data-dir", type=Path, default=None,
                    help="reuse/write the held-out episodes per split (eval_<split>.npz + .json) in this folder")
    ev.add_argument("--latency-episodes", type=int, default=20, help="episodes timed one by one per backend")
    ev.add_argument("--vlm-model", type=Path, default=None,
                    help="local vision-language checkpoint: also measure the vlm backend (on the latency episodes)")
    ev.add_argument("--vlm-decoding", default="constrained", choices=("free", "constrained"),
                    help="how the vlm backend answers (see coda_critic.vlm)")
    ev.add_argument("--threads", type=int, default=1,
                    help="torch threads of this process (1 avoids thread hand-off stalls on a busy 2-core machine)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    """Dispatch to train or eval."""
    result = _train(args) if args.action == "train" else _eval(args)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _train(args: argparse.Namespace) -> dict[str, Any]:
    from coda_critic.dataset import Examples, generate_examples
    from coda_critic.learned import LearnedConfig, embed_instructions, predict, save_model, train

    start = time.perf_counter()
    if args.data is not None and Path(args.data).exists():
        examples = Examples.load(args.data)
        _log(f"loaded {len(examples)} examples from {args.data}")
    else:
        _log(f"generating {args.episodes} labelled episodes (split id) ...")
        examples, _, _ = generate_examples("id", args.episodes, args.seed, workers=args.workers, prefix="train")
        if args.data is not None:
            examples.save(args.data)
    generated = time.perf_counter() - start
    text = embed_instructions(examples.instructions)
    config = LearnedConfig(epochs=args.epochs, seed=args.seed)
    model, history = train(examples, text, config, log=_log)
    modes, stages, _ = predict(model, examples, text)
    train_accuracy = {"failure_mode": float(np.mean(modes == examples.mode)),
                      "stage": float(np.mean(stages == examples.stage))}
    metrics = {"train_examples": len(examples), "train_accuracy": train_accuracy,
               "final_loss": history["loss"][-1], "train_seconds": history["seconds"],
               "generation_seconds": generated}
    folder = save_model(model, args.out, metrics)
    return {"version": folder.name, "folder": str(folder), **metrics}


def _newest(root: Path) -> Path:
    from coda_critic.episode_input import LearnedModelError, resolve_learned_model

    try:
        return resolve_learned_model("", root)
    except LearnedModelError as exc:
        raise SystemExit(f"coda critic eval: {exc}") from None


def per_mode(truth: np.ndarray, pred: np.ndarray) -> dict[str, dict[str, float]]:
    """Precision, recall and support of every mode."""
    from coda_critic.diagnosis import MODES

    out = {}
    for i, mode in enumerate(MODES):
        tp = int(np.sum((pred == i) & (truth == i)))
        predicted, actual = int(np.sum(pred == i)), int(np.sum(truth == i))
        out[mode] = {"precision": tp / predicted if predicted else 0.0, "recall": tp / actual if actual else 0.0,
                     "support": actual}
    return out


def _held_out(args: argparse.Namespace, split: str, seed: int, features: Any) -> tuple[Any, list[Any], list[Any]]:
    """Generate the held-out episodes of ``split``, or load them from ``--data-dir`` if written before.

    The cache is keyed by split, count, seed and input shapes, so a changed setting regenerates.
    """
    from coda_critic.dataset import Examples, generate_examples
    from coda_critic.diagnosis import Diagnosis
    from coda_engine.sim.scene import Scene

    shape = f"f{features.num_frames}x{features.frame_size}p{features.proprio_points}"
    stem = f"eval_{split}_n{args.episodes}_s{seed}_{shape}"
    if args.data_dir is not None and (args.data_dir / f"{stem}.npz").exists():
        _log(f"loading held-out episodes of split {split} from {args.data_dir / stem}.npz")
        meta = json.loads((args.data_dir / f"{stem}.json").read_text())
        return (Examples.load(args.data_dir / f"{stem}.npz"), [Diagnosis.from_dict(d) for d in meta["diagnoses"]],
                [Scene.from_dict(s) for s in meta["scenes"]])
    _log(f"generating {args.episodes} held-out episodes of split {split} ...")
    examples, grounded, scenes = generate_examples(split, args.episodes, seed, features, workers=args.workers,
                                                   prefix=f"eval-{split}")
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        (args.data_dir / f"{stem}.json").write_text(json.dumps(
            {"diagnoses": [d.to_dict() for d in grounded], "scenes": [s.to_dict() for s in scenes]}))
        examples.save(args.data_dir / f"{stem}.npz")
    return examples, grounded, scenes


def _eval(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from coda_critic.actors import applicable_actors, make_actor
    from coda_critic.grounded import GroundedCritic
    from coda_critic.learned import embed_instructions, load_critic, predict
    from coda_critic.text2potential import ProgramSpec, Text2Potential
    from coda_engine.episodes import RecordingConfig, run_recorded_episode
    from coda_engine.sim.arm import SimArm
    from coda_engine.sim.generator import generate
    from coda_engine.sim.scene import SceneParams

    torch.set_num_threads(max(1, args.threads))
    folder = args.model or _newest(DEFAULT_ROOT)
    critic = load_critic(folder)
    features = critic.model.config.features
    accuracy: dict[str, dict[str, dict[str, float]]] = {"grounded": {}, "learned": {}}
    precision_recall: dict[str, Any] = {}
    counts: dict[str, int] = {}
    translator = Text2Potential()
    compiled = attempted = 0
    for i, split in enumerate(args.splits):
        examples, grounded, scenes = _held_out(args, split, args.seed + 17 * i, features)
        text = embed_instructions(examples.instructions)
        modes, stages, probs = predict(critic.model, examples, text)
        accuracy["grounded"][split] = {"failure_mode": 1.0, "stage": 1.0}  # the yardstick itself
        accuracy["learned"][split] = {"failure_mode": float(np.mean(modes == examples.mode)),
                                      "stage": float(np.mean(stages == examples.stage))}
        counts[split] = len(examples)
        precision_recall[split] = per_mode(examples.mode, modes)
        learned = [critic.compose(scene, eid, int(m), int(s), float(p))
                   for scene, eid, m, s, p in zip(scenes, examples.episode_ids, modes, stages, probs, strict=True)]
        for d in [*grounded, *learned]:
            if d.is_failure:
                attempted += 1
                compiled += isinstance(translator.translate(d), ProgramSpec)
    # Latency: episodes diagnosed one at a time by each backend.
    arm, rng = SimArm(), np.random.default_rng(args.seed + 999)
    episodes = []
    for j in range(args.latency_episodes):
        scene = generate(("reach", "pick_place", "push", "stack")[j % 4], rng, SceneParams())
        kinds = applicable_actors(scene)
        act = make_actor(kinds[int(rng.integers(len(kinds)))], scene, rng)
        episodes.append(run_recorded_episode(arm, scene, act, episode_id=f"lat-{j}", policy_version="actor",
                                             robot_id="sim_eval", config=RecordingConfig(
                                                 keyframe_size=features.frame_size)))
    backends: list[Any] = [GroundedCritic(), critic]
    extra: dict[str, Any] = {}
    if args.vlm_model is not None:
        from coda_critic.vlm import VlmConfig, VlmCritic

        backends.append(VlmCritic(VlmConfig(model_path=str(args.vlm_model), decoding=args.vlm_decoding, threads=1),
                                  fallback=critic))
    latency, verdicts = {}, {}
    for backend in backends:
        backend.diagnose(episodes[:1])  # warm-up (model and text embedder load)
        start = time.perf_counter()
        verdicts[backend.name] = [backend.diagnose([ep])[0] for ep in episodes]
        latency[backend.name] = 1000 * (time.perf_counter() - start) / max(len(episodes), 1)
    if args.vlm_model is not None:  # the vlm is slow: it is scored on the latency episodes (split id) only
        pairs = list(zip(verdicts["vlm"], verdicts["grounded"], strict=True))
        accuracy["vlm"] = {"id": {"failure_mode": float(np.mean([a.failure_mode == t.failure_mode for a, t in pairs])),
                                  "stage": float(np.mean([a.failed_stage == t.failed_stage for a, t in pairs]))}}
        extra["vlm"] = {"episodes": len(episodes), "fallback_rate": backends[-1].fallback_rate,
                        "decoding": args.vlm_decoding}
    return {"model": str(folder), "critic_version": critic.version, "accuracy": accuracy,
            "per_mode": {"learned": precision_recall}, "latency_ms": latency, **extra,
            "text2potential_compile_rate": compiled / attempted if attempted else 1.0,
            "text2potential_attempts": attempted, "episodes": counts}
