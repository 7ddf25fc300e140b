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
   per split and family goes to memory, and every episode's outcome to the step's result (paired comparisons).

Every step returns a typed result (:mod:`coda_loop.step_results`), written to memory when the step finishes;
files a step writes are complete before that (atomic replace), so a run killed at any moment resumes at the
first unfinished step.
Scenes come from a scene source and the steering diagnoses from a critic, in this process or from the
``scene_generator`` and ``critic`` nodes (:mod:`coda_loop.sources`); episodes run on an
:class:`~coda_loop.workers.EpisodeRunner`'s local processes and ``sim_bridge`` workers.
Pure module: no rclpy.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from coda_engine.episodes import SOURCE_REAL
from coda_engine.sim.scene import Scene, SceneParams
from coda_loop.config import RUN_CONFIG, LoopConfig, run_config
from coda_loop.diagnosing import DiagnoseStep
from coda_loop.evaluating import EvaluateStep
from coda_loop.files import atomic_json
from coda_loop.fleet import Fleet
from coda_loop.sources import Critic, InProcessScenes, SceneSource
from coda_loop.step_results import (
    STEP_RESULTS,
    AllocationSummary,
    DiagnoseResult,
    EpisodesResult,
    EvaluateResult,
    GenerateResult,
    ProgramsResult,
    RealArmsRound,
    StepResult,
    TrainResult,
)
from coda_loop.training import TrainStep
from coda_loop.workers import EpisodeRunner, run_local

ROUND0_STEPS = ("train", "generate", "episodes", "diagnose", "programs", "evaluate")
ROUND_STEPS = ("generate", "episodes", "diagnose", "programs", "train", "evaluate")
S = TypeVar("S", bound=StepResult)
MATCH_ATTEMPTS = 40
"""Scenes drawn for one allocation line before a scene that does not meet its conditions is accepted."""
EDIT_TRIES = 3
"""Edited variants of one kind a replayed scene gets before the next kind is tried (each must be solved by the
expert)."""
MAY_CHANGE_ON_RESUME = ("rounds", "progress")
"""LoopConfig fields a started run may be given anew (more rounds; progress bars on or off); the rest must match."""


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


def write_run_summary(run_dir: Path | str, summary: dict[str, Any], seconds: float,
                      report: bool = True) -> dict[str, Any]:
    """Write what a finished run keeps beside its memory, however it was started (``coda run`` or ``coda_loop``).

    ``summary.json``: ``summary`` (:meth:`CoevolutionLoop.run`'s) with ``seconds``, the wall time of this start;
    with ``report`` first ``report.html`` (``coda report``), whose path the summary names under ``report``. Returns
    the summary as written.
    """
    summary = {**summary, "seconds": round(seconds, 1)}
    if report:
        from coda_loop.report.html import write_report

        summary["report"] = str(write_report(Path(run_dir)))
    atomic_json(Path(run_dir) / "summary.json", summary)
    return summary


def real_arms_summary(episodes: list[Any], unfinished: list[Any]) -> RealArmsRound:
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
    return RealArmsRound(by_source={k: {"episodes": len(v), "success": float(np.mean(v)) if v else None}
                                    for k, v in by_source.items()},
                         by_robot=by_robot)


class CoevolutionLoop(TrainStep, DiagnoseStep, EvaluateStep):
    """One run of the loop in a run folder (see the module docstring).

    The generate, episodes and programs steps are here; train, diagnose and evaluate are in
    :mod:`coda_loop.training`, :mod:`coda_loop.diagnosing` and :mod:`coda_loop.evaluating`.
    """

    def __init__(self, run_dir: Path | str, config: LoopConfig | None = None, *, node: Any | None = None,
                 on_event: Callable[[int, str, StepResult | None], None] | None = None,
                 fleet: Fleet | None = None) -> None:
        """Open (or create) the run folder; ``config`` None reads the folder's ``config.json`` (a resume).

        ``node``: an rclpy node through which ``sim_bridge`` workers on the domain are used. ``on_event`` is
        called with (round, step, None) before a step runs and with (round, step, result) once it has finished
        (:mod:`coda_loop.step_results`).
        ``fleet``: simulation workers and real arms (``coda run --arms``); each round gives every available arm
        its episode budget, the arms' episodes are diagnosed by the learned critic. ``scene_source`` and
        ``critic_source``: where scenes are generated and the steering diagnoses are made (:mod:`coda_loop.sources`:
        in this process unless :func:`coda_loop.ros.remote.use_nodes` points them at nodes of the domain). The learned
        critic of ``critic: learned`` and of ``grounded+learned`` always runs here, since the run fine-tunes it.
        """
        from coda_loop.memory import MemoryStore

        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        held = run_config(self.run_dir)
        if config is None:
            if held is None:
                raise ValueError(f"{self.run_dir} is not a run folder (no {RUN_CONFIG})")
            config = held
        elif held is not None:
            saved = held.pinned().to_dict()
            given = config.pinned().to_dict()
            differ = sorted(k for k in given if k not in MAY_CHANGE_ON_RESUME and given[k] != saved.get(k))
            if differ:
                raise ValueError(f"{self.run_dir} holds a run with another config ({', '.join(differ)} differ); "
                                 f"resume it without a config (only {', '.join(MAY_CHANGE_ON_RESUME)} may change)")
        # written out (LoopConfig.pinned): a later change of a method's defaults does not change this run
        self.config = config.pinned()
        atomic_json(self.run_dir / RUN_CONFIG, self.config.to_dict())
        self.ckpt_root = self.run_dir / "checkpoints"
        self.demo_dir = self.run_dir / "demos"
        self.ckpt_root.mkdir(exist_ok=True)
        self.demo_dir.mkdir(exist_ok=True)
        self.store = MemoryStore(self.run_dir / "memory.db")
        self.node = node
        self.on_event = on_event
        self.fleet = fleet or Fleet()
        self.scene_source: SceneSource = InProcessScenes()
        self.critic_source: Critic | None = None
        self._runner: EpisodeRunner | None = None
        self._embedder: Any = None
        self._edit_arm: Any = None
        self.results: dict[tuple[int, str], StepResult] = {}

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
            done = self.store.finished_step(r, STEP_RESULTS[step])
            if done is None:
                if self.on_event is not None:
                    self.on_event(r, step, None)
                # Every step computes with the configured thread count, whatever ran before in this process (a
                # text embedding at 2 threads differs from one at 1 in the last bits, and a run would then depend on
                # whether it was resumed or shared its process with another run).
                torch.set_num_threads(self.config.torch_threads)
                done = getattr(self, f"_step_{step}")(r)
                self.store.finish_step(r, done)
            self.results[(r, step)] = done
            if self.on_event is not None:
                self.on_event(r, step, done)

    def output(self, r: int, kind: type[S]) -> S:
        """Return the result of round ``r``'s step ``kind.STEP`` (from this process or, after a resume, from memory)."""
        done = self.results.get((r, kind.STEP))
        if done is None:
            done = self.store.finished_step(r, kind)
            if done is None:
                raise RuntimeError(f"round {r} step {kind.STEP!r} has not finished")
            self.results[(r, kind.STEP)] = done
        if not isinstance(done, kind):
            raise TypeError(f"round {r} step {kind.STEP!r} holds a {type(done).__name__}, not a {kind.__name__}")
        return done

    def summary(self) -> dict[str, Any]:
        """Success per round and split of every finished evaluate step."""
        rows = []
        for r in range(self.config.rounds + 1):
            done = self.store.finished_step(r, EvaluateResult)
            if done is not None:
                row = {"round": r, "version": done.version, "per_split": done.per_split, "ood": done.ood,
                       "episodes_per_family": done.episodes_per_family}
                if done.validation is not None:
                    row["validation"] = {"per_split": done.validation.per_split, "ood": done.validation.ood}
                diagnosed = self.store.finished_step(r, DiagnoseResult)
                if diagnosed is not None and diagnosed.learned is not None:
                    row["learned_critic"] = {"version": diagnosed.learned.version,
                                             "agreement": diagnosed.learned.agreement}
                rows.append(row)
        arms = []
        for r in range(self.config.rounds + 1):
            ran = self.store.finished_step(r, EpisodesResult)
            if ran is not None and ran.real_arms is not None:
                arms.append({"round": r, "by_source": ran.real_arms.by_source, "by_robot": ran.real_arms.by_robot,
                             "arm_notes": ran.real_arms.arm_notes})
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
        return self.output(max(r - 1, 0), TrainResult).version

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
    def _generation_program(self, r: int) -> dict[str, Any]:
        """Return the program of round ``r``: a stored CoDA program, or one the baseline decides now.

        The closed loop plans like CoDA's planner from the last round's outcomes (success flags and scene
        conditions, no critic, no memory): its targeted scenes follow the families and conditions that failed most.
        """
        from coda_critic.generation import GenerationPlanner, Outcome

        cfg = self.config
        planner = GenerationPlanner(cfg.generation_config(), families=cfg.families)
        if r > 0 and cfg.uses_critic:
            program_id = self.output(r - 1, ProgramsResult).generation_program_id
            record = self.store.get("generation_program", program_id)
            if record is None:
                raise RuntimeError(f"generation program {program_id} is not in memory")
            return record.payload
        if r > 0 and cfg.spec.generation == "failure_rate":
            outcomes = []
            for episode_id in self.output(r - 1, EpisodesResult).episode_ids:
                result = self.store.get("episode", episode_id).payload  # type: ignore[union-attr]
                scene = self._scenes([result["scene_id"]])[0]
                outcomes.append(Outcome.of(episode_id, scene, bool(result["success"])))
            program = planner.plan(outcomes, cfg.budget, r)
        else:  # round 0 of every method, and open loop: the broad training distribution, families evenly
            program = planner.plan([], cfg.budget, r)
        data = program.to_dict()
        self.store.put_program(r, "generation_program", data, record_id=program.program_id)
        return data

    def _step_generate(self, r: int) -> GenerateResult:
        from coda_critic.generation import BudgetAllocation, matches, replayed_scene, scene_edits, scene_params
        from coda_engine.sim.generator import draw_seed

        cfg = self.config
        source = self.scene_source
        program = self._generation_program(r)
        rng = self._rng(r, 1)
        edit_rng = self._rng(r, 3)  # its own stream: an edit leaves every other draw of the round as it was
        scene_ids, unmet, families, replayed, edited, unedited = [], 0, Counter(), 0, Counter(), 0
        for line in program["allocations"]:
            allocation = BudgetAllocation.from_dict(line)
            again = replayed_scene(allocation)
            if again:  # the stored scene, played again: exactly, or edited along its diagnosed failure
                (scene,) = self._scenes([again])
                done = self._edited(r, scene, scene_edits(allocation), edit_rng, program["program_id"],
                                    sum(edited.values()))
                if done is not None:
                    again = done[0]
                    edited[done[1]] += 1
                elif scene_edits(allocation):
                    unedited += 1
                scene_ids.append(again)
                families[allocation.family] += 1
                replayed += 1
                continue
            params = scene_params(allocation, cfg.scene_params())
            for _ in range(allocation.count):
                (scene,) = source.generate(allocation.family, [draw_seed(rng)], params, r)
                attempts = 1
                while not matches(scene, allocation.conditions) and attempts < MATCH_ATTEMPTS:
                    (scene,) = source.generate(allocation.family, [draw_seed(rng)], params, r)
                    attempts += 1
                unmet += not matches(scene, allocation.conditions)
                record = self.store.put_scene(r, scene.to_dict(), origin="generated", program_id=program["program_id"])
                scene_ids.append(record.record_id)
                families[scene.family] += 1
        probe_ids = []
        for f, family in enumerate(cfg.families):
            for k in range(cfg.probe_per_family):
                (scene,) = source.generate(family, [draw_seed(self._rng(10_000, f, k))], SceneParams(split="id"), r)
                probe_ids.append(self.store.put_scene(r, scene.to_dict(), origin="probe").record_id)
        return GenerateResult(program_id=program["program_id"], scene_ids=scene_ids, probe_ids=probe_ids, unmet=unmet,
                              families=dict(families), replayed_scenes=replayed, generator=source.where,
                              edited_scenes=dict(sorted(edited.items())), unedited_replays=unedited)

    def _edited(self, r: int, scene: Scene, edits: tuple[str, ...], rng: np.random.Generator, program_id: str,
                k: int) -> tuple[str, str] | None:
        """Store ``scene`` edited by the first of ``edits`` that gives a scene the expert solves; return (its id, edit).

        Each edit gets ``EDIT_TRIES`` variants; a variant counts only if the run's demonstrator solves it (an edit
        must not drift toward scenes nobody can do). None when no edit was asked for or none gives such a scene:
        the scene is then played exactly. Edits run here, in the loop's process, whichever source generates scenes.
        """
        from coda_engine.sim.edits import EditError, edit_scene
        from coda_engine.sim.expert import run_expert

        for operator in edits:
            for _ in range(EDIT_TRIES):
                try:
                    new = edit_scene(scene, operator, rng, self.config.scene_params(),
                                     scene_id=f"r{r:03d}-edit-{k:04d}", round_index=r)
                except EditError:
                    break
                if self._edit_arm is None:
                    from coda_engine.sim.arm import SimArm

                    self._edit_arm = SimArm()
                if run_expert(self._edit_arm, new, self.config.demonstrator).success:
                    self.store.put_scene(r, new.to_dict(), origin="edited", program_id=program_id)
                    return new.scene_id, operator
        return None

    def _step_episodes(self, r: int) -> EpisodesResult:
        gen = self.output(r, GenerateResult)
        version = self.current_version(r)
        scenes = self._scenes(gen.scene_ids + gen.probe_ids)
        probes = set(gen.probe_ids)
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
        out = EpisodesResult(version=version, episode_ids=[ep.episode_id for ep in episodes],
                             success=float(np.mean([ep.success for ep in episodes])) if episodes else 0.0,
                             by_family={f: float(np.mean(v)) for f, v in sorted(by_family.items())}, remote=remote)
        if self.fleet.arms:
            out.real_arms = real_arms_summary(episodes, self.runner.unfinished)
            out.real_arms.real_allocation = real
            out.real_arms.arm_notes = dict(self.runner.arm_notes)
            out.real_arms.unfinished_ids = [ep.episode_id for ep in self.runner.unfinished]
            out.real_arms.intervention_ids = interventions
        return out

    def _real_allocation(self, r: int) -> dict[str, int]:
        """Episodes each arm of the fleet runs in round ``r`` (its budget, hours and what it ran before)."""
        import datetime as dt

        used: dict[str, list[float]] = {}
        for k in range(r):
            done = self.store.finished_step(k, EpisodesResult)
            for robot, row in (done.real_arms.by_robot if done is not None and done.real_arms else {}).items():
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

    def _step_programs(self, r: int) -> ProgramsResult:
        from coda_critic.generation import replay_candidates
        from coda_critic.programs import plan_programs

        cfg = self.config
        episodes = self.output(r, EpisodesResult)
        failure_rate = {f: 1.0 - s for f, s in episodes.by_family.items()}
        if not cfg.uses_critic:
            return ProgramsResult(failure_rate=failure_rate, rl_family=max(sorted(failure_rate),
                                                                           key=lambda f: failure_rate[f])
                                  if failure_rate else "")
        diagnoses = self._diagnoses(r)
        history: list[Any] = []
        replay: list[Any] = []
        recent: list[Any] = []
        generation = cfg.generation_config()
        if cfg.uses_memory:  # earlier rounds' diagnoses (condition replay, rates), every generated scene's record
            played = [(r, d) for d in diagnoses]
            for k in range(r):
                earlier = self._diagnoses(k)
                history += earlier
                played += [(k, d) for d in earlier]
                if k > r - generation.rate_rounds:
                    recent += earlier
            probes = {sid for k in range(r + 1) for sid in self.output(k, GenerateResult).probe_ids}
            replay = replay_candidates([(k, d) for k, d in played if d.scene_id not in probes])
        planned = plan_programs(diagnoses, r, cfg.budget, generation, families=cfg.families, history=history,
                                replay=replay, recent=recent, sft_epochs=1, rl_env_steps=cfg.rl_env_steps,
                                content=cfg.spec.diagnosis == "full")
        program, plan = planned.generation, planned.training
        self.store.put_program(r, "generation_program", program.to_dict(), record_id=program.program_id,
                               diagnosis_ids=planned.cause_diagnosis_ids)
        self.store.put_program(r, "training_program", plan.to_dict(), record_id=plan.program_id,
                               diagnosis_ids=plan.cause_diagnosis_ids)
        potentials = {}
        for spec in plan.potentials:
            self.store.put_program(r, "potential_program", spec.to_dict(), record_id=spec.program_id,
                                   diagnosis_ids=[spec.source_diagnosis_id] if spec.source_diagnosis_id else [])
            potentials[spec.family] = spec.program_id
        return ProgramsResult(
            failure_rate=failure_rate, generation_program_id=program.program_id, training_program_id=plan.program_id,
            potentials=potentials, rejects=len(plan.rejects), rl_stage=planned.rl_stage, rl_family=planned.rl_family,
            allocations=[AllocationSummary(kind=a.kind, family=a.family, count=a.count,
                                           conditions=[f"{c.key}={c.value}" for c in a.conditions[1:]])
                         for a in program.allocations])
