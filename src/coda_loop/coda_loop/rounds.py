# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The co-evolution loop: rounds of generate -> episodes -> diagnose -> programs -> train -> evaluate.

:class:`CoevolutionLoop` drives one run folder ``runs/<id>/``:

``config.json``           the :class:`~coda_loop.config.LoopConfig`
``memory.db`` + blobs/    the shared memory (every record below, and which steps finished)
``checkpoints/<version>`` policy versions (``r000-sft``, ``r001-bc``, ``r001-rl`` ...)
``demos/*.npz``           demonstrations: the round-0 set and one file per round

Round 0 trains the SFT policy on expert demonstrations, then runs it on ``budget`` scenes of the
broad training distribution (the same scenes for every method), diagnoses them and plans round 1.
Round r >= 1:

1. **generate**: ``budget`` scenes as the method decides (see :mod:`coda_loop.config`); for
   CoDA the generation program the critic's diagnoses produced in round r - 1, each allocation drawn
   until the scene meets its conditions (or, for a scene replay, the stored scene played again); plus the
   fixed probe scenes.
2. **episodes**: the current policy on all of them, on local worker processes and ROS workers.
3. **diagnose**: the critic turns every episode into a diagnosis (methods with a critic).
4. **programs**: the training program (Text2potential staged potentials of the most frequent failure
   per family) and the generation program of round r + 1 (with memory: earlier diagnoses, so fixed
   conditions are replayed, and every scene's record, so failed scenes are played again by priority).
5. **train**: one demonstration per generated scene: by the expert from the scene's start, or, with
   corrective demonstrations, for a scene the policy failed, by the state-based expert taking over where the
   critic says the failure began (:mod:`coda_policy.corrective`); behaviour cloning continues on every
   demonstration so far (``focus_share`` of each batch from this round's; with ``bc_gate_episodes``, kept only
   if it scores no more than ``bc_gate_tolerance`` below the policy it started from on new scenes); then PPO on
   the family with the most failures, shaped by its potential (sparse reward without Text2potential), with
   ``rl_stage_share`` of its episodes starting at the diagnosed stage (methods with the critic), kept only if
   it does better than before on new scenes.
6. **evaluate**: held-out suites of every split (and the validation suites with ``validation``); success
   per split and family goes to memory, and every episode's outcome to the step's outputs (paired comparisons).

Every step's outputs are written to memory when the step finishes; files a step writes are complete
before that (atomic replace), so a run killed at any moment resumes at the first unfinished step.
Pure module: no rclpy (ROS workers come in through :class:`~coda_loop.workers.EpisodeRunner`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from coda_engine.episodes import SOURCE_REAL
from coda_engine.sim.scene import Scene, SceneParams
from coda_loop.config import OOD_SPLITS, LoopConfig
from coda_loop.fleet import Fleet
from coda_loop.workers import EpisodeRunner, run_local

ROUND0_STEPS = ("train", "generate", "episodes", "diagnose", "programs", "evaluate")
ROUND_STEPS = ("generate", "episodes", "diagnose", "programs", "train", "evaluate")
MATCH_ATTEMPTS = 40
"""Scenes drawn for one allocation line before a scene that does not meet its conditions is accepted."""


def steps_of(round_index: int) -> tuple[str, ...]:
    """Return the steps of a round, in order."""
    return ROUND0_STEPS if round_index == 0 else ROUND_STEPS


def new_run_dir(root: Path | str, method: str) -> Path:
    """Create and return a fresh ``root/<date>-<time>-<method>`` folder (a suffix keeps it unique)."""
    root = Path(root)
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{method}"
    for k in range(1000):
        path = root / (stem if k == 0 else f"{stem}-{k}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a run folder under {root}")


def real_arms_summary(episodes: list[Any], unfinished: list[Any]) -> dict[str, Any]:
    """Success by source (simulation vs real arms) and per robot of one batch of episodes."""
    by_source: dict[str, list[int]] = {"sim": [], "real": []}
    by_robot: dict[str, dict[str, Any]] = {}
    for ep in episodes:
        by_source["real" if ep.source == SOURCE_REAL else "sim"].append(int(ep.success))
        if ep.source == SOURCE_REAL:
            row = by_robot.setdefault(ep.robot_id, {"episodes": 0, "successes": 0, "unfinished": 0, "seconds": 0.0})
            row["episodes"] += 1
            row["successes"] += int(ep.success)
            row["seconds"] += ep.steps / max(ep.control_rate_hz, 1e-6)
    for ep in unfinished:
        row = by_robot.setdefault(ep.robot_id, {"episodes": 0, "successes": 0, "unfinished": 0, "seconds": 0.0})
        row["unfinished"] += 1
        row["seconds"] += ep.steps / max(ep.control_rate_hz, 1e-6)
    for row in by_robot.values():
        row["success"] = row["successes"] / row["episodes"] if row["episodes"] else None
    return {"by_source": {k: {"episodes": len(v), "success": float(np.mean(v)) if v else None}
                          for k, v in by_source.items()},
            "by_robot": by_robot}


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


class CoevolutionLoop:
    """One run of the loop in a run folder (see the module docstring)."""

    def __init__(self, run_dir: Path | str, config: LoopConfig | None = None, *, node: Any | None = None,
                 on_event: Callable[[int, str, dict[str, Any] | None], None] | None = None,
                 fleet: Fleet | None = None) -> None:
        """Open (or create) the run folder; ``config`` None reads the folder's ``config.json`` (a resume).

        ``node``: an rclpy node through which ``sim_bridge`` workers on the domain are used. ``on_event`` is
        called with (round, step, None) before a step runs and with (round, step, outputs) once it has finished.
        ``fleet``: simulation workers and real arms (``coda run --arms``); each round gives every available arm
        its episode budget, the arms' episodes are diagnosed by the learned critic.
        """
        from coda_loop.memory import MemoryStore

        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config_file = self.run_dir / "config.json"
        if config is None:
            if not config_file.is_file():
                raise ValueError(f"{self.run_dir} is not a run folder (no config.json)")
            config = LoopConfig.from_dict(json.loads(config_file.read_text()))
        elif config_file.is_file():
            saved = LoopConfig.from_dict(json.loads(config_file.read_text()))
            if {**saved.to_dict(), "rounds": 0} != {**config.to_dict(), "rounds": 0}:
                raise ValueError(f"{self.run_dir} holds a run with another config; resume it without a config "
                                 "(only --rounds may change)")
        self.config = config
        _atomic_json(config_file, config.to_dict())
        self.ckpt_root = self.run_dir / "checkpoints"
        self.demo_dir = self.run_dir / "demos"
        self.ckpt_root.mkdir(exist_ok=True)
        self.demo_dir.mkdir(exist_ok=True)
        self.store = MemoryStore(self.run_dir / "memory.db")
        self.node = node
        self.on_event = on_event
        self.fleet = fleet or Fleet()
        self._runner: EpisodeRunner | None = None
        self._embedder: Any = None
        self.outputs: dict[tuple[int, str], dict[str, Any]] = {}

    # ------------------------------------------------------------------ driving
    def close(self) -> None:
        """Stop worker processes and close the memory."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self.store.close()

    def run(self) -> dict[str, Any]:
        """Run (or finish) every round; return :meth:`summary`.

        A start that has rounds left to run is recorded in memory with the code it runs (``provenance``).
        """
        from coda_loop.provenance import code_provenance

        finished = set(self.store.finished_steps())
        first = next((r for r in range(self.config.rounds + 1)
                      if any((r, step) not in finished for step in steps_of(r))), None)
        if first is not None:
            self.store.record_start(first, code_provenance())
        for r in range(self.config.rounds + 1):
            self.run_round(r)
        return self.summary()

    def run_round(self, r: int) -> None:
        """Run the unfinished steps of round ``r``."""
        import torch

        for step in steps_of(r):
            done = self.store.finished_step(r, step)
            if done is None:
                if self.on_event is not None:
                    self.on_event(r, step, None)
                # Every step computes with the configured thread count, whatever ran before in this process (a
                # text embedding at 2 threads differs from one at 1 in the last bits, and a run would then depend on
                # whether it was resumed or shared its process with another run).
                torch.set_num_threads(self.config.torch_threads)
                done = getattr(self, f"_step_{step}")(r)
                self.store.finish_step(r, step, done)
            self.outputs[(r, step)] = done
            if self.on_event is not None:
                self.on_event(r, step, done)

    def output(self, r: int, step: str) -> dict[str, Any]:
        """Return the outputs of a finished step (from this process or, after a resume, from memory)."""
        if (r, step) not in self.outputs:
            done = self.store.finished_step(r, step)
            if done is None:
                raise RuntimeError(f"round {r} step {step!r} has not finished")
            self.outputs[(r, step)] = done
        return self.outputs[(r, step)]

    def summary(self) -> dict[str, Any]:
        """Success per round and split of every finished evaluate step."""
        rows = []
        for r in range(self.config.rounds + 1):
            done = self.store.finished_step(r, "evaluate")
            if done is not None:
                row = {"round": r, "version": done["version"], "per_split": done["per_split"], "ood": done["ood"],
                       "episodes_per_family": done.get("episodes_per_family")}
                if "validation" in done:
                    row["validation"] = {"per_split": done["validation"]["per_split"],
                                         "ood": done["validation"]["ood"]}
                learned = (self.store.finished_step(r, "diagnose") or {}).get("learned")
                if learned:
                    row["learned_critic"] = {"version": learned["version"], "agreement": learned["agreement"]}
                rows.append(row)
        arms = []
        for r in range(self.config.rounds + 1):
            done = self.store.finished_step(r, "episodes")
            if done is not None and "by_source" in done:
                arms.append({"round": r, **{k: done[k] for k in ("by_source", "by_robot", "arm_notes")}})
        from coda_loop.provenance import code_label

        out = {"run_dir": str(self.run_dir), "method": self.config.method, "rounds": rows,
               "code": list(dict.fromkeys(code_label(start) for start in self.store.starts()))}
        if arms:
            out["arms"] = arms
        return out

    # ------------------------------------------------------------------ helpers
    @property
    def runner(self) -> EpisodeRunner:
        """The episode runner (worker processes start on first use)."""
        if self._runner is None:
            workers = self.config.workers if self.fleet.sim_workers is None else self.fleet.sim_workers
            self._runner = EpisodeRunner(workers, self.ckpt_root,
                                         self.node if self.config.remote_workers or self.fleet.arms else None,
                                         arms=self.fleet.arms)
        return self._runner

    @property
    def embedder(self) -> Any:
        """The shared instruction embedder."""
        if self._embedder is None:
            from coda_policy.serving import embedder

            self._embedder = embedder()
        return self._embedder

    def current_version(self, r: int) -> str:
        """Policy version acting in round ``r``: round 0's SFT policy in round 0, else what round r - 1 trained."""
        return str(self.output(max(r - 1, 0), "train")["version"])

    def _rng(self, *keys: int) -> np.random.Generator:
        return np.random.default_rng([self.config.seed, *keys])

    def _scenes(self, ids: list[str]) -> list[Scene]:
        scenes = []
        for scene_id in ids:
            record = self.store.get("scene", scene_id)
            if record is None:
                raise RuntimeError(f"scene {scene_id} is not in memory")
            scenes.append(Scene.from_dict(record.payload))
        return scenes

    def _local_episodes(self, scenes: list[Scene], version: str, prefix: str) -> list[Any]:
        """Episodes that must run here (the expert's demonstrations keep observations and actions)."""
        jobs = [(s, f"{prefix}-{i:04d}") for i, s in enumerate(scenes)]
        if self.config.workers == 0:
            return [run_local(s, version, str(self.ckpt_root), e, "local_0", keyframes=False) for s, e in jobs]
        futures = [self.runner.pool.submit(run_local, s, version, str(self.ckpt_root), e,  # type: ignore[union-attr]
                                           f"local_{i % self.config.workers}", keyframes=False)
                   for i, (s, e) in enumerate(jobs)]
        return [f.result() for f in futures]

    # ------------------------------------------------------------------ steps
    def _step_train(self, r: int) -> dict[str, Any]:
        return self._train_base() if r == 0 else self._train_round(r)

    def _train_base(self) -> dict[str, Any]:
        from coda_policy.data import DemoSet, collect
        from coda_policy.model import PolicyConfig
        from coda_policy.sft import SFTConfig, train_sft

        cfg = self.config
        version = "r000-sft"
        demo_file = self.demo_dir / "r000.npz"
        if cfg.base_from:
            base = Path(cfg.base_from)
            shutil.copytree(base / "checkpoints" / version, self.ckpt_root / version, dirs_exist_ok=True)
            shutil.copy2(base / "demos" / "r000.npz", demo_file)
            seconds = 0.0
        else:
            demos = collect(cfg.families, cfg.base_demos_per_family, self._rng(0, 0), "id", self.embedder,
                            PolicyConfig().max_delta)
            tmp = self.demo_dir / "r000.tmp.npz"
            demos.save(tmp)
            os.replace(tmp, demo_file)
            sft = SFTConfig(families=cfg.families, episodes_per_family=cfg.base_demos_per_family,
                            steps=cfg.base_sft_steps, eval_episodes=0, seed=cfg.seed, output_dir=self.ckpt_root,
                            version_id=version, num_threads=cfg.torch_threads, progress=False)
            result = train_sft(sft, self.embedder, DemoSet.load(demo_file))
            seconds = result.seconds
        self.store.put_policy_version(0, version_id=version, checkpoint_dir=self.ckpt_root / version, parent="",
                                      metrics={"trainer": "sft", "steps": cfg.base_sft_steps, "seconds": seconds})
        return {"version": version, "demos": [demo_file.name], "new_demos": cfg.base_demos_per_family * len(
            cfg.families), "seconds": round(seconds, 1)}

    def _generation_program(self, r: int) -> dict[str, Any]:
        """Return the program of round ``r``: a stored CoDA program, or one the baseline decides now.

        The closed loop plans like CoDA's planner from the last round's outcomes (success flags and scene
        conditions, no critic, no memory): its targeted scenes follow the families and conditions that failed most.
        """
        from coda_critic.generation import GenerationPlanner, Outcome

        cfg = self.config
        planner = GenerationPlanner(families=cfg.families)
        if r > 0 and cfg.uses_critic:
            program_id = self.output(r - 1, "programs")["generation_program_id"]
            record = self.store.get("generation_program", program_id)
            if record is None:
                raise RuntimeError(f"generation program {program_id} is not in memory")
            return record.payload
        if r > 0 and cfg.spec.generation == "failure_rate":
            outcomes = []
            for episode_id in self.output(r - 1, "episodes")["episode_ids"]:
                result = self.store.get("episode", episode_id).payload  # type: ignore[union-attr]
                scene = self._scenes([result["scene_id"]])[0]
                outcomes.append(Outcome.of(episode_id, scene, bool(result["success"])))
            program = planner.plan(outcomes, cfg.budget, r)
        else:  # round 0 of every method, and open loop: the broad training distribution, families evenly
            program = planner.plan([], cfg.budget, r)
        data = program.to_dict()
        self.store.put_program(r, "generation_program", data, record_id=program.program_id)
        return data

    def _step_generate(self, r: int) -> dict[str, Any]:
        from coda_critic.generation import BudgetAllocation, matches, replayed_scene, scene_params
        from coda_engine.sim.generator import generate

        cfg = self.config
        program = self._generation_program(r)
        rng = self._rng(r, 1)
        scene_ids, unmet, families, replayed = [], 0, Counter(), 0
        for line in program["allocations"]:
            allocation = BudgetAllocation.from_dict(line)
            again = replayed_scene(allocation)
            if again:  # the stored scene, played again
                self._scenes([again])
                scene_ids.append(again)
                families[allocation.family] += 1
                replayed += 1
                continue
            params = scene_params(allocation, cfg.scene_params())
            for _ in range(allocation.count):
                scene = generate(allocation.family, rng, params)
                attempts = 1
                while not matches(scene, allocation.conditions) and attempts < MATCH_ATTEMPTS:
                    scene = generate(allocation.family, rng, params)
                    attempts += 1
                unmet += not matches(scene, allocation.conditions)
                record = self.store.put_scene(r, scene.to_dict(), origin="generated", program_id=program["program_id"])
                scene_ids.append(record.record_id)
                families[scene.family] += 1
        probe_ids = []
        for f, family in enumerate(cfg.families):
            for k in range(cfg.probe_per_family):
                scene = generate(family, self._rng(10_000, f, k), SceneParams(split="id"))
                probe_ids.append(self.store.put_scene(r, scene.to_dict(), origin="probe").record_id)
        return {"program_id": program["program_id"], "scene_ids": scene_ids, "probe_ids": probe_ids, "unmet": unmet,
                "families": dict(families), "replayed_scenes": replayed}

    def _step_episodes(self, r: int) -> dict[str, Any]:
        gen = self.output(r, "generate")
        version = self.current_version(r)
        ids = gen["scene_ids"] + gen["probe_ids"]
        scenes = self._scenes(ids)
        probes = set(gen["probe_ids"])
        jobs = [(s, f"r{r:03d}-e{i:04d}") for i, s in enumerate(scenes)]
        before = dict(self.runner.remote_used)
        real = self._real_allocation(r)
        episodes = self.runner.run(jobs, version, real=real)
        remote = {ns: n - before.get(ns, 0) for ns, n in self.runner.remote_used.items() if n > before.get(ns, 0)}
        by_family: dict[str, list[int]] = {}
        for ep in [*episodes, *self.runner.unfinished]:
            purpose = "probe" if ep.scene.scene_id in probes else "train"
            self.store.put_episode(r, ep.to_result_dict(), ep.keyframes, purpose=purpose)  # its scene is stored
        for ep in episodes:
            by_family.setdefault(ep.scene.family, []).append(int(ep.success))
        interventions = self._store_interventions(r)
        out = {"version": version, "episode_ids": [ep.episode_id for ep in episodes],
               "success": float(np.mean([ep.success for ep in episodes])) if episodes else 0.0,
               "by_family": {f: float(np.mean(v)) for f, v in sorted(by_family.items())},
               "remote": remote}
        if self.fleet.arms:
            out.update(real_arms_summary(episodes, self.runner.unfinished))
            out.update({"real_allocation": real, "arm_notes": dict(self.runner.arm_notes),
                        "unfinished_ids": [ep.episode_id for ep in self.runner.unfinished],
                        "intervention_ids": interventions})
        return out

    def _real_allocation(self, r: int) -> dict[str, int]:
        """Episodes each arm of the fleet runs in round ``r`` (its budget, hours and what it ran before)."""
        import datetime as dt

        used: dict[str, list[float]] = {}
        for k in range(r):
            done = self.store.finished_step(k, "episodes") or {}
            for robot, row in done.get("by_robot", {}).items():
                total = used.setdefault(robot, [0.0, 0.0])
                total[0] += row["episodes"] + row.get("unfinished", 0)
                total[1] += row.get("seconds", 0.0)
        now = dt.datetime.now()
        allocation = {}
        for arm in self.fleet.arms:
            episodes, seconds = used.get(arm.robot_id, [0.0, 0.0])
            allocation[arm.ns] = arm.remaining(int(episodes), seconds) if arm.available(now) else 0
        return allocation

    def _store_interventions(self, r: int) -> list[str]:
        """Store the safety interventions the arms announced (once each); return the ids stored now."""
        stored = []
        for key, event in sorted(self.runner.safety_events.items()):
            if self.store.get("intervention", key) is None:
                self.store.put_intervention(r, intervention_id=key, info=event)
                stored.append(key)
        return stored

    def _episodes_from_memory(self, ids: list[str]) -> list[Any]:
        from coda_critic.episode_input import SceneBook, episode_from_result

        book = SceneBook()
        episodes = []
        for i, episode_id in enumerate(ids):
            record = self.store.get("episode", episode_id)
            if record is None:
                raise RuntimeError(f"episode {episode_id} is not in memory")
            result = dict(record.payload)
            scene_record = self.store.get("scene", result["scene_id"])
            book.add(scene_record.payload)  # type: ignore[union-attr]
            result["keyframes"] = self.store.load_keyframes(record)
            episodes.append(episode_from_result(result, book, i))
        return episodes

    def _critic(self, r: int) -> Any:
        """Return the critic whose diagnoses steer round ``r`` (grounded; the learned one with ``critic: learned``)."""
        if self.config.critic == "learned":
            from coda_critic.learned import load_critic

            return load_critic(self._learned_folder(r), self.embedder)
        from coda_critic.grounded import GroundedCritic

        return GroundedCritic()

    def _learned_folder(self, r: int) -> Path:
        """Return the learned critic acting in round ``r``: the last version a round kept, else the starting one.

        The starting critic is ``critic_model``, or the embedded one.
        """
        from coda_critic.models import EMBEDDED_MODEL

        for k in range(r - 1, -1, -1):
            done = self.output(k, "diagnose").get("learned")
            if done and done["next_folder"]:  # a version fine-tuned in this run (empty: the starting critic)
                return self.run_dir / done["next_folder"]
        return Path(self.config.critic_model).resolve() if self.config.critic_model else EMBEDDED_MODEL

    def _step_diagnose(self, r: int) -> dict[str, Any]:
        if not self.config.uses_critic and r > 0:
            return {"skipped": f"method {self.config.method} runs without the critic", "diagnosis_ids": []}
        every = self._episodes_from_memory(self.output(r, "episodes")["episode_ids"])
        episodes = [ep for ep in every if ep.source != SOURCE_REAL]
        real = [ep for ep in every if ep.source == SOURCE_REAL and len(ep.keyframes)]
        critic = self._critic(r)
        version = self._record_critic(r, critic)
        diagnoses = critic.diagnose(episodes) if episodes else []
        real_diagnoses = []
        if real:  # no privileged state on real arms: the learned critic diagnoses them, whatever steers sim
            from coda_critic.learned import load_critic

            seer = critic if hasattr(critic, "version") else load_critic(self._learned_folder(r), self.embedder)
            self._record_critic(r, seer, self._learned_folder(r))
            real_diagnoses = seer.diagnose(real)
        ids = []
        for d in [*diagnoses, *real_diagnoses]:
            ids.append(self.store.put_diagnosis(r, d.to_dict()).record_id)
        diagnoses = [*diagnoses, *real_diagnoses]
        modes = Counter(d.failure_mode for d in diagnoses)
        recalled = []
        if self.config.uses_memory and r > 0:  # retrieval: what did the most similar earlier failures lead to?
            for d in [d for d in diagnoses if d.is_failure][:4]:
                for past, score in self.store.similar_diagnoses(d.text, limit=1):
                    if past.round < r:
                        effect = self.store.generation_effect(past.record_id)
                        recalled.append({"diagnosis_id": d.diagnosis_id, "similar": past.record_id,
                                         "score": round(float(score), 3), "effect": effect})
        out = {"diagnosis_ids": ids, "failures": sum(d.is_failure for d in diagnoses), "modes": dict(modes),
               "critic": getattr(critic, "name", self.config.critic), "critic_version": version, "recalled": recalled}
        if real:
            out["real_diagnosis_ids"] = ids[len(ids) - len(real_diagnoses):]
        if self.config.critic == "grounded+learned" and self.config.uses_critic:
            out["learned"] = self._learned_critic_round(r, episodes, diagnoses[:len(episodes)])
        return out

    def _learned_critic_round(self, r: int, episodes: list[Any], grounded: list[Any]) -> dict[str, Any]:
        """Run the learned critic's part of a ``grounded+learned`` diagnose step.

        The acting version diagnoses the round's episodes (which it has never seen) and its agreement with the
        grounded diagnoses is measured; then a copy is fine-tuned on the grounded labels of every round so far,
        except one episode in five of each round, held out: the copy becomes the next version only if it agrees
        with the grounded critic on those at least as often as the acting version does.
        """
        import torch

        from coda_critic.dataset import Examples, episode_features, label
        from coda_critic.learned import LearnedConfig, agreement, embed_instructions, load_critic, predict, save_model
        from coda_critic.learned import train as train_critic

        cfg = self.config
        folder = self._learned_folder(r)
        critic = load_critic(folder, self.embedder)
        self._record_critic(r, critic, folder)
        seen = [i for i, ep in enumerate(episodes) if len(ep.keyframes)]  # it needs images: skip camera-less ones
        episodes, grounded = [episodes[i] for i in seen], [grounded[i] for i in seen]
        learned = critic.diagnose(episodes) if episodes else []
        out: dict[str, Any] = {"version": critic.version, "agreement": agreement(learned, grounded),
                               "episode_ids": [ep.episode_id for ep in episodes],
                               "verdicts": [[d.failure_mode, d.failed_stage] for d in learned],
                               "next_version": critic.version, "next_folder": self._in_run(folder)}
        if cfg.critic_epochs == 0 or not episodes:
            return out
        data_dir = self.run_dir / "critics" / "examples"
        data_dir.mkdir(parents=True, exist_ok=True)
        examples = label(episode_features(episodes, critic.model.config.features), grounded, ["loop"] * len(grounded))
        tmp = data_dir / f"r{r:03d}.tmp.npz"
        examples.save(tmp)
        os.replace(tmp, data_dir / f"r{r:03d}.npz")
        sets = [Examples.load(p) for p in sorted(data_dir.glob("r[0-9][0-9][0-9].npz")) if int(p.stem[1:]) <= r]
        held = [np.arange(len(s)) % 5 == 0 for s in sets]
        train_set = Examples.concat([s.subset(np.flatnonzero(~h)) for s, h in zip(sets, held, strict=True)])
        check_set = Examples.concat([s.subset(np.flatnonzero(h)) for s, h in zip(sets, held, strict=True)])
        torch.set_num_threads(cfg.torch_threads)
        settings = LearnedConfig(epochs=cfg.critic_epochs, lr=cfg.critic_lr, batch_size=32, seed=cfg.seed * 1000 + r)
        tuned, history = train_critic(train_set, embed_instructions(train_set.instructions, self.embedder), settings,
                                      init=critic.model)
        check_text = embed_instructions(check_set.instructions, self.embedder)
        before = float(np.mean(predict(critic.model, check_set, check_text)[0] == check_set.mode))
        after = float(np.mean(predict(tuned, check_set, check_text)[0] == check_set.mode))
        fine_tune = {"parent": critic.version, "round": r, "train_examples": len(train_set),
                     "held_out_examples": len(check_set), "held_out_mode_accuracy_before": before,
                     "held_out_mode_accuracy_after": after, "kept": after >= before,
                     "seconds": round(history["seconds"], 1)}
        out["fine_tune"] = fine_tune
        if after >= before:
            saved = save_model(tuned, self.run_dir / "critics", fine_tune)
            self.store.put_critic_version(r, version_id=saved.name, backend="learned",
                                          info={"folder": self._portable(saved), **fine_tune})
            out.update({"next_version": saved.name, "next_folder": self._in_run(saved)})
        return out

    def _portable(self, folder: Path) -> str:
        """``folder`` relative to the run folder when inside it (run folders can move), else absolute."""
        return self._in_run(folder) or str(Path(folder).resolve())

    def _in_run(self, folder: Path) -> str:
        """``folder`` relative to the run folder, or "" when it is outside (the starting critic)."""
        folder = Path(folder).resolve()
        return str(folder.relative_to(self.run_dir)) if folder.is_relative_to(self.run_dir) else ""

    def _record_critic(self, r: int, critic: Any, folder: Path | None = None) -> str:
        """Write the critic's version to memory (once per version) and return its id."""
        if hasattr(critic, "version"):  # a learned critic
            version, info = str(critic.version), {"folder": self._portable(folder or self._learned_folder(r))}
            backend = "learned"
        else:
            settings = dataclasses.asdict(critic.config)
            digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
            version, info, backend = f"grounded-{digest}", {"thresholds": settings}, "grounded"
        if self.store.get("critic_version", version) is None:
            self.store.put_critic_version(r, version_id=version, backend=backend, info=info)
        return version

    def _diagnoses(self, r: int) -> list[Any]:
        from coda_critic.diagnosis import Diagnosis

        out = []
        for diagnosis_id in self.output(r, "diagnose")["diagnosis_ids"]:
            record = self.store.get("diagnosis", diagnosis_id)
            out.append(Diagnosis.from_dict(record.payload))  # type: ignore[union-attr]
        return out

    def _step_programs(self, r: int) -> dict[str, Any]:
        from coda_critic.generation import GenerationPlanner, replay_candidates
        from coda_critic.text2potential import training_plan

        cfg = self.config
        episodes = self.output(r, "episodes")
        failure_rate = {f: 1.0 - s for f, s in episodes["by_family"].items()}
        out: dict[str, Any] = {"failure_rate": failure_rate}
        if not cfg.uses_critic:
            out["rl_family"] = max(sorted(failure_rate), key=lambda f: failure_rate[f]) if failure_rate else ""
            return out
        diagnoses = self._diagnoses(r)
        history: list[Any] = []
        replay: list[Any] = []
        if cfg.uses_memory:  # earlier rounds' diagnoses (condition replay) and every generated scene's record
            played = [(r, d) for d in diagnoses]
            for k in range(r):
                earlier = self._diagnoses(k)
                history += earlier
                played += [(k, d) for d in earlier]
            probes = {sid for k in range(r + 1) for sid in self.output(k, "generate")["probe_ids"]}
            replay = replay_candidates([(k, d) for k, d in played if d.scene_id not in probes])
        program = GenerationPlanner(families=cfg.families).plan(diagnoses, cfg.budget, r + 1, history=history,
                                                                replay=replay)
        causes = sorted({i for a in program.allocations for i in a.cause_diagnosis_ids})
        self.store.put_program(r, "generation_program", program.to_dict(), record_id=program.program_id,
                               diagnosis_ids=causes)
        plan = training_plan(diagnoses, r, sft_epochs=1, rl_env_steps=cfg.rl_env_steps)
        self.store.put_program(r, "training_program", plan.to_dict(), record_id=plan.program_id,
                               diagnosis_ids=plan.cause_diagnosis_ids)
        potentials = {}
        for spec in plan.potentials:
            self.store.put_program(r, "potential_program", spec.to_dict(), record_id=spec.program_id,
                                   diagnosis_ids=[spec.source_diagnosis_id] if spec.source_diagnosis_id else [])
            potentials[spec.family] = spec.program_id
        failures = Counter(d.family for d in diagnoses if d.is_failure)
        rl_family = failures.most_common(1)[0][0] if failures else ""
        # RL practises the stage this family fails in most often (ties: the earlier stage)
        stages = Counter(d.failed_stage for d in diagnoses if d.is_failure and d.family == rl_family)
        out.update({"generation_program_id": program.program_id, "training_program_id": plan.program_id,
                    "potentials": potentials, "rejects": len(plan.rejects),
                    "rl_stage": min(stages, key=lambda k: (-stages[k], k)) if stages else 0,
                    "rl_family": rl_family,
                    "allocations": [(a.kind, a.family, [f"{c.key}={c.value}" for c in a.conditions[1:]], a.count)
                                    for a in program.allocations]})
        return out

    def _train_round(self, r: int) -> dict[str, Any]:
        import torch

        from coda_policy.checkpoint import load_policy, save_checkpoint
        from coda_policy.data import DemoSet, concat, from_episodes
        from coda_policy.metrics import MetricsLog
        from coda_policy.model import CodaPolicy
        from coda_policy.sft import SFTConfig, fit_bc

        cfg = self.config
        start = time.time()
        parent = self.current_version(r)
        gen = self.output(r, "generate")
        net, _ = load_policy(self.ckpt_root / parent)
        scenes = self._scenes(gen["scene_ids"])
        if cfg.max_new_demos:
            scenes = scenes[:cfg.max_new_demos]
        demo_file = self.demo_dir / f"r{r:03d}.npz"
        corrective_file = self.demo_dir / f"r{r:03d}.corrective.json"
        if not demo_file.is_file():
            demos, corrective = self._demonstrations(r, scenes, parent)
            new = from_episodes(demos, cfg.families, self.embedder, net.cfg.max_delta)
            if corrective is not None:
                _atomic_json(corrective_file, corrective)
            if new is not None:
                tmp = self.demo_dir / f"r{r:03d}.tmp.npz"
                new.save(tmp)
                os.replace(tmp, demo_file)
        files = sorted(p for p in self.demo_dir.glob("r[0-9][0-9][0-9].npz") if int(p.stem[1:]) <= r)
        sets = [DemoSet.load(p) for p in files]
        new_demos = sets[-1].num_episodes if files and files[-1] == demo_file else 0
        train_set, val_set = concat(sets).split(0.1, self._rng(r, 2))
        version = f"r{r:03d}-bc"
        policy = CodaPolicy(net)
        torch.set_num_threads(cfg.torch_threads)
        sft = SFTConfig(families=cfg.families, steps=max(cfg.finetune_steps, 1), progress=False,
                        seed=cfg.seed, output_dir=self.ckpt_root, version_id=version)
        folder = self.ckpt_root / version
        log = MetricsLog(folder / "metrics.jsonl")
        bc_loss = None
        focus = None
        if new_demos and cfg.spec.focus_share:  # the latest round's demonstrations: the last episodes of the set
            first_new = sum(s.num_episodes for s in sets[:-1])
            focus = torch.from_numpy(np.flatnonzero(train_set.episode >= first_new))
        if cfg.finetune_steps:
            _, bc_loss = fit_bc(policy, train_set.tensors(), val_set.tensors(), cfg.finetune_steps, cfg.finetune_lr,
                                sft, log, torch.Generator().manual_seed(cfg.seed * 1000 + r), f"round {r} bc",
                                warmup_steps=cfg.finetune_warmup, focus=focus,
                                focus_share=cfg.spec.focus_share if focus is not None else 0.0)
        log.close()
        policy.net.eval()
        save_checkpoint(folder, policy.net, version, {"trainer": "loop-bc", "round": r, "parent": parent})
        out: dict[str, Any] = {"bc_version": version, "version": version, "new_demos": new_demos,
                               "demo_episodes": sum(s.num_episodes for s in sets), "bc_val_loss": bc_loss,
                               "new_demo_steps": len(focus) if focus is not None else None,
                               "focus_share": cfg.spec.focus_share if focus is not None else 0.0}
        if corrective_file.is_file():
            out["corrective"] = json.loads(corrective_file.read_text())
        if cfg.bc_gate_episodes and cfg.finetune_steps:
            out["bc_gate"] = gate = self._bc_gate(r, parent, version)
            if not gate["kept"]:
                out["version"], folder = parent, self.ckpt_root / parent
        if out["version"] == version:
            self.store.put_policy_version(r, version_id=version, checkpoint_dir=folder, parent=parent,
                                          metrics={"trainer": "bc", "steps": cfg.finetune_steps, "val_loss": bc_loss,
                                                   "demo_episodes": out["demo_episodes"],
                                                   **({"bc_gate": out["bc_gate"]} if "bc_gate" in out else {})})
        family = self.output(r, "programs").get("rl_family", "")
        if cfg.rl_env_steps and family:
            out["rl"] = rl = self._rl(r, family, folder)
            if rl["kept"]:
                out["version"] = rl["version"]
        out["seconds"] = round(time.time() - start, 1)
        return out

    def _demonstrations(self, r: int, scenes: list[Scene], version: str) -> tuple[list[Any], dict[str, Any] | None]:
        """Return one demonstration per scene (episodes with observations and actions) and corrective statistics.

        Without corrective demonstrations every scene is demonstrated by the expert from its start. With them, a
        scene the policy ``version`` failed, with a diagnosed failed stage, is demonstrated by the state-based
        expert taking over from the policy at that stage; where it does not finish the task, the expert
        demonstrates the scene from its start instead (one demonstration per scene either way).
        """
        cfg = self.config
        if not cfg.spec.corrective:
            return self._local_episodes(scenes, "expert", f"r{r:03d}-demo"), None
        takeovers = self._takeovers(r)
        jobs = [(i, s, takeovers[s.scene_id]) for i, s in enumerate(scenes) if s.scene_id in takeovers]
        results = self._corrective_episodes([(s, t) for _, s, t in jobs], version)
        demos: dict[int, Any] = {}
        modes: Counter[str] = Counter()
        for (i, _, (_, mode)), result in zip(jobs, results, strict=True):
            modes[f"{mode}:{'recovered' if result.success else 'not_recovered'}"] += 1
            if result.success and len(result.actions):
                demos[i] = result
        rest = [i for i in range(len(scenes)) if i not in demos]
        for i, ep in zip(rest, self._local_episodes([scenes[i] for i in rest], "expert", f"r{r:03d}-demo"),
                         strict=True):
            demos[i] = ep
        recovered = [d for d in demos.values() if hasattr(d, "takeover")]
        stats = {"failed_scenes": len(jobs), "recovered": len(recovered),
                 "expert_from_start": len(rest), "by_mode": dict(sorted(modes.items())),
                 "takeover_steps": [int(d.takeover) for d in recovered],
                 "corrective_steps": int(sum(len(d.actions) for d in recovered)),
                 "margin": cfg.corrective_margin, "relabel": cfg.corrective_relabel}
        return [demos[i] for i in range(len(scenes))], stats

    def _takeovers(self, r: int) -> dict[str, tuple[int, str]]:
        """Return scene id -> (takeover step, failure mode) of every failed simulated episode of round ``r``.

        The takeover is where its failure began when the critic could tell, else where it entered the failed stage.
        """
        from coda_policy.corrective import takeover_step

        out: dict[str, tuple[int, str]] = {}
        for d in self._diagnoses(r):
            if not d.is_failure or d.failed_stage < 0 or d.scene_id in out:
                continue
            record = self.store.get("episode", d.episode_ids[0])
            if record is None or record.payload.get("source", 0) == SOURCE_REAL:
                continue
            samples = record.payload.get("samples") or []
            step = takeover_step([int(x["step"]) for x in samples], [int(x["stage"]) for x in samples],
                                 d.failed_stage, self.config.corrective_margin, d.failure_step)
            out[d.scene_id] = (step, d.failure_mode)
        return out

    def _corrective_episodes(self, jobs: list[tuple[Scene, tuple[int, str]]], version: str) -> list[Any]:
        """Run the corrective demonstrations (scene, (takeover, mode)) on the local workers."""
        from coda_loop.workers import run_corrective_local

        relabel = self.config.corrective_relabel
        if self.config.workers == 0:
            return [run_corrective_local(s, version, str(self.ckpt_root), t, relabel) for s, (t, _) in jobs]
        futures = [self.runner.pool.submit(run_corrective_local, s, version, str(self.ckpt_root), t,  # type: ignore[union-attr]
                                           relabel) for s, (t, _) in jobs]
        return [f.result() for f in futures]

    def _bc_gate(self, r: int, parent: str, version: str) -> dict[str, Any]:
        """Score the round's BC update and the policy it started from on the same new ``id`` scenes, per family."""
        from coda_engine.sim.generator import generate
        from coda_engine.sim.scene import SceneParams

        cfg = self.config
        rng = self._rng(r, 7)
        scenes = [generate(family, rng, SceneParams(split="id")) for family in cfg.families
                  for _ in range(cfg.bc_gate_episodes)]
        rates = {}
        for name in (parent, version):
            episodes = self._local_episodes(scenes, name, f"r{r:03d}-gate-{name}")
            rates[name] = {family: float(np.mean([e.success for s, e in zip(scenes, episodes, strict=True)
                                                  if s.family == family])) for family in cfg.families}
        before, after = (float(np.mean(list(rates[n].values()))) for n in (parent, version))
        return {"before": before, "after": after, "kept": after >= before - cfg.bc_gate_tolerance,
                "per_family_before": rates[parent], "per_family_after": rates[version],
                "episodes_per_family": cfg.bc_gate_episodes}

    def _rl(self, r: int, family: str, init_from: Path) -> dict[str, Any]:
        from coda_policy.rl import RLConfig, train_rl

        cfg = self.config
        program = ""
        programs = self.output(r, "programs").get("potentials", {})
        if cfg.uses_potentials and family in programs:
            program = self.store.get("potential_program", programs[family]).payload["source"]  # type: ignore[union-attr]
        version = f"r{r:03d}-rl"
        n_envs, n_steps = 8, 32
        rollouts = max(1, -(-cfg.rl_env_steps // (n_envs * n_steps)))
        stage = int(self.output(r, "programs").get("rl_stage", 0)) if cfg.rl_stage_share > 0 else 0
        rl_cfg = RLConfig(family=family, program=program, shaping=cfg.uses_potentials, n_envs=n_envs, n_steps=n_steps,
                          start_stage=stage, start_stage_share=cfg.rl_stage_share,
                          total_env_steps=cfg.rl_env_steps, init_from=str(init_from),
                          value_warmup_rollouts=max(1, rollouts // 4), eval_episodes=cfg.rl_eval_episodes,
                          seed=cfg.seed * 1000 + r, output_dir=self.ckpt_root, version_id=version,
                          num_threads=cfg.torch_threads, progress=False, resume=False)
        result = train_rl(rl_cfg, self.embedder)
        before = result.eval_success_init if result.eval_success_init is not None else 0.0
        after = result.eval_success if result.eval_success is not None else 0.0
        kept = cfg.rl_eval_episodes == 0 or after > before  # PPO changes the shared network: keep it only for a gain
        if kept:
            self.store.put_policy_version(r, version_id=version, checkpoint_dir=result.folder, parent=init_from.name,
                                          metrics={"trainer": "ppo", "family": family, "shaped": cfg.uses_potentials,
                                                   "env_steps": result.env_steps, "success_before": before,
                                                   "success_after": after})
        return {"version": version, "family": family, "shaped": bool(program) or cfg.uses_potentials,
                "start_stage": stage,
                "program": program.splitlines()[0] if program else "", "success_before": before,
                "success_after": after, "kept": kept, "seconds": round(result.seconds, 1)}

    def _step_evaluate(self, r: int) -> dict[str, Any]:
        cfg = self.config
        version = str(self.output(r, "train")["version"])
        per_family = cfg.final_eval_per_family if r in (0, cfg.rounds) else cfg.eval_per_family
        done = None
        if r == 0 and cfg.base_from:  # the same policy on the same suites: reuse the base run's scores
            from coda_loop.memory import MemoryStore

            with MemoryStore(Path(cfg.base_from) / "memory.db") as base:
                done = base.finished_step(0, "evaluate")
            wanted = self._suites("test", per_family)[1]
            if done is not None and done.get("episodes_per_family") == wanted and "outcomes" in done and (
                    not cfg.validation or "validation" in done):
                done = {**done, "reused_from": cfg.base_from}
            else:
                done = None
        if done is None:
            done = {"version": version, **self._score(version, "test", per_family)}
            if cfg.validation:
                done["validation"] = self._score(version, "validation", per_family)
        episodes = done["episodes_per_family"]
        folder = self.ckpt_root / version
        if folder.is_dir():  # what the sim-first gate of real arms reads
            _atomic_json(folder / "evaluation.json", {"version": version, "round": r, "per_split": done["per_split"],
                                                      "ood": done["ood"], "episodes_per_family": episodes})
        for split, rates in done["rates"].items():
            for family, rate in rates.items():
                self.store.put_progress(r, family=family, split=split, success=float(rate),
                                        episodes=episodes[split], policy_version=version)
        return done

    def _suites(self, kind: str, per_family: int) -> tuple[list[Any], dict[str, int]]:
        """Return the suites of ``kind`` restricted to the run's families, and the episodes per family and split."""
        from coda_policy.suite import default_suites

        cfg = self.config
        suites = [dataclasses.replace(suite, entries=[e for e in suite.entries if e["family"] in cfg.families])
                  for suite in default_suites(cfg.eval_splits, kind).values()]
        episodes = {s.split: len(s.select(per_family)) // max(len({e["family"] for e in s.entries}), 1)
                    for s in suites}
        return suites, episodes

    def _score(self, version: str, kind: str, per_family: int) -> dict[str, Any]:
        """Return the success of ``version`` on the suites of ``kind``.

        Per split and family, the OOD mean, and every episode's outcome by split and scene id (what paired
        comparisons between methods resample).
        """
        from coda_policy.evaluation import evaluate_suites

        cfg = self.config
        suites, episodes = self._suites(kind, per_family)
        result = evaluate_suites(self.ckpt_root / version, suites, per_family=per_family,
                                 workers=max(cfg.workers, 1), embedder=self.embedder)
        per_split = {s: float(v) for s, v in result.per_split.items()}
        ood = [per_split[s] for s in OOD_SPLITS if s in per_split]
        return {"rates": result.rates, "per_split": per_split, "ood": float(np.mean(ood)) if ood else float("nan"),
                "episodes_per_family": episodes,
                "outcomes": {split: {row["scene_id"]: int(row["success"]) for row in result.episodes
                                     if row["split"] == split} for split in per_split}}
