# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The train step of a round (part of :class:`coda_loop.rounds.CoevolutionLoop`).

Round 0: expert demonstrations and the SFT policy (or both reused from ``base_from``). Round r >= 1: one
demonstration per generated scene (from the scene's start, or corrective: the state-based expert taking over
where the critic says the policy's failure began), behaviour cloning on every demonstration so far (optionally
focused on the round's own, optionally gated against its parent), then PPO on the family with the most failures
(optionally starting at the diagnosed stage, shaped by the round's potential with Text2potential), kept only if
it does better on new scenes. Pure module: no rclpy.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from coda_engine.episodes import SOURCE_REAL
from coda_engine.sim.scene import Scene
from coda_loop.config import LoopConfig
from coda_loop.files import atomic_json
from coda_loop.gates import bc_kept, ppo_kept
from coda_loop.step_results import (
    BCGate,
    CorrectiveStats,
    EpisodesResult,
    GenerateResult,
    ProgramsResult,
    RLResult,
    TrainResult,
)

NEVER = 1 << 30
"""A takeover step no episode reaches: the policy acts to the end."""
RELABELLED_SUCCESS = "relabelled_success"
"""The takeover mode of a successful episode kept with the expert's labels (``relabel_successes``)."""
TRACE_FAILURE = "failed"
"""The takeover mode of a failed episode taken over by its progress trace alone (no critic: no failure mode)."""


class TrainStep:
    """The train step; a base of :class:`~coda_loop.rounds.CoevolutionLoop`, whose state and helpers it uses."""

    config: LoopConfig
    store: Any
    run_dir: Path
    ckpt_root: Path
    demo_dir: Path
    scene_source: Any

    def _step_train(self, r: int) -> TrainResult:
        return self._train_base() if r == 0 else self._train_round(r)

    def _train_base(self) -> TrainResult:
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
                            PolicyConfig().max_delta, cfg.demonstrator)
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
        return TrainResult(version=version, demos=[demo_file.name],
                           new_demos=cfg.base_demos_per_family * len(cfg.families), seconds=round(seconds, 1))

    def _train_round(self, r: int) -> TrainResult:
        from coda_policy.checkpoint import load_policy
        from coda_policy.data import DemoSet, from_episodes
        from coda_policy.finetune import FinetuneConfig, finetune

        cfg = self.config
        start = time.time()
        parent = self.current_version(r)
        gen = self.output(r, GenerateResult)
        net, _ = load_policy(self.ckpt_root / parent)
        scenes = self._scenes(gen.scene_ids)
        if cfg.max_new_demos:
            scenes = scenes[:cfg.max_new_demos]
        demo_file = self.demo_dir / f"r{r:03d}.npz"
        corrective_file = self.demo_dir / f"r{r:03d}.corrective.json"
        if not demo_file.is_file():
            demos, corrective = self._demonstrations(r, scenes, parent)
            new = from_episodes(demos, cfg.families, self.embedder, net.cfg.max_delta)
            if corrective is not None:
                atomic_json(corrective_file, corrective.to_dict())
            if new is not None:
                tmp = self.demo_dir / f"r{r:03d}.tmp.npz"
                new.save(tmp)
                os.replace(tmp, demo_file)
        # Earlier rounds' PPO successes (rl_success_demos) first, then every expert/corrective set, this round's last.
        files = sorted(p for p in self.demo_dir.glob("r[0-9][0-9][0-9].ppo.npz") if int(p.name[1:4]) < r)
        files += sorted(p for p in self.demo_dir.glob("r[0-9][0-9][0-9].npz") if int(p.stem[1:]) <= r)
        sets = [DemoSet.load(p) for p in files]
        counts = [s.num_episodes for s in sets]
        new_demos = counts[-1] if files and files[-1] == demo_file else 0
        version = f"r{r:03d}-bc"
        # The round's Text2potential programs go into the step's record (a replay with potential-gain batches reads
        # them), and weight its rows with bc_potential_weight.
        programs = self._round_programs(r) if cfg.uses_potentials else {}
        # Every demonstration so far; the split and the batches are seeded by run seed and round. The step is
        # recorded in the checkpoint (coda train replay <run>/checkpoints/r00k-bc trains it again).
        step = FinetuneConfig(
            init_from=str((self.ckpt_root / parent).resolve()), demos=tuple(str(p.resolve()) for p in files),
            steps=cfg.finetune_steps, lr=cfg.finetune_lr, warmup_steps=cfg.finetune_warmup,
            split_seed=(cfg.seed, r, 2), batch_seed=cfg.seed * 1000 + r, families=cfg.families,
            focus_from_episode=sum(counts[:-1]) if new_demos and cfg.spec.focus_share else None,
            focus_share=cfg.spec.focus_share if new_demos else 0.0, torch_threads=cfg.torch_threads,
            batches="potential-gain" if programs and cfg.bc_potential_weight else "uniform", programs=programs,
            potential_weight=cfg.bc_potential_weight or 1.0)
        folder = self.ckpt_root / version
        bc = finetune(step, folder, version, {"round": r, "parent": parent}, sets)
        bc_loss = bc.val_loss
        out = TrainResult(bc_version=version, version=version, new_demos=new_demos,
                          new_steps=len(sets[-1]) if new_demos else 0,
                          demo_episodes=bc.demo_episodes, bc_val_loss=bc_loss, new_demo_steps=bc.focus_rows,
                          focus_share=cfg.spec.focus_share if bc.focus_rows is not None else 0.0)
        if corrective_file.is_file():
            out.corrective = CorrectiveStats.from_dict(json.loads(corrective_file.read_text()), str(corrective_file),
                                                       strict=False)
        if cfg.bc_gate_episodes and cfg.finetune_steps:
            out.bc_gate = self._bc_gate(r, parent, version)
            if not out.bc_gate.kept:
                out.version, folder = parent, self.ckpt_root / parent
        if out.version == version:
            self.store.put_policy_version(r, version_id=version, checkpoint_dir=folder, parent=parent,
                                          metrics={"trainer": "bc", "steps": cfg.finetune_steps, "val_loss": bc_loss,
                                                   "demo_episodes": out.demo_episodes,
                                                   **({"bc_gate": out.bc_gate.to_dict()} if out.bc_gate else {})})
        family = self.output(r, ProgramsResult).rl_family
        if cfg.rl_env_steps and family:
            out.rl = self._rl(r, family, folder)
            if out.rl.kept:
                out.version = out.rl.version
        out.seconds = round(time.time() - start, 1)
        return out

    def _demonstrations(self, r: int, scenes: list[Scene], version: str) -> tuple[list[Any], CorrectiveStats | None]:
        """Return one demonstration per scene (episodes with observations and actions) and corrective statistics.

        Without corrective demonstrations every scene is demonstrated by the expert from its start. With them, a
        scene the policy ``version`` failed, with a diagnosed failed stage, is demonstrated by the state-based
        expert taking over from the policy at that stage; where it does not finish the task, the expert
        demonstrates the scene from its start instead (one demonstration per scene). With
        ``corrective_beside_start`` every scene also keeps the expert's demonstration from its start, and with
        ``relabel_successes`` the policy's successful episodes are kept with every step labelled by the expert.
        """
        cfg = self.config
        if not cfg.spec.corrective:
            return self._local_episodes(scenes, cfg.demonstrator, f"r{r:03d}-demo"), None
        takeovers = self._takeovers(r)
        jobs = [(i, s, takeovers[s.scene_id]) for i, s in enumerate(scenes) if s.scene_id in takeovers]
        results = self._corrective_episodes([(s, t) for _, s, t in jobs], version)
        demos: dict[int, Any] = {}
        modes: Counter[str] = Counter()
        for (i, _, (_, mode)), result in zip(jobs, results, strict=True):
            modes[f"{mode}:{'recovered' if result.success else 'not_recovered'}"] += 1
            if result.success and len(result.actions):
                demos[i] = result
        rest = [i for i in range(len(scenes)) if cfg.corrective_beside_start or i not in demos]
        from_start = dict(zip(rest, self._local_episodes([scenes[i] for i in rest], cfg.demonstrator, f"r{r:03d}-demo"),
                              strict=True))
        recovered = [d for i, d in demos.items() if takeovers[scenes[i].scene_id][1] != RELABELLED_SUCCESS]
        relabelled = [d for i, d in demos.items() if takeovers[scenes[i].scene_id][1] == RELABELLED_SUCCESS]
        stats = CorrectiveStats(failed_scenes=sum(mode != RELABELLED_SUCCESS for _, _, (_, mode) in jobs),
                                recovered=len(recovered), relabelled_successes=len(relabelled),
                                expert_from_start=len(rest), by_mode=dict(sorted(modes.items())),
                                takeover_steps=[int(d.takeover) for d in recovered],
                                corrective_steps=int(sum(len(d.actions) for d in recovered)),
                                relabelled_steps=int(sum(len(d.actions) for d in relabelled)),
                                margin=cfg.corrective_margin, relabel=cfg.corrective_relabel,
                                beside_start=cfg.corrective_beside_start)
        out = []
        for i in range(len(scenes)):  # scene order; a scene's demonstration from the start first
            out += [d for d in (from_start.get(i), demos.get(i)) if d is not None]
        return out, stats

    def _takeovers(self, r: int) -> dict[str, tuple[int, str]]:
        """Return scene id -> (takeover step, failure mode) of every failed simulated episode of round ``r``.

        ``MethodSpec.takeover`` decides where: ``diagnosis``, where the critic says the failure began, else where
        the episode entered the diagnosed failed stage; ``progress_trace`` (no critic content), the last step of the
        episode's highest recorded progress (its mode is then ``failed``). With ``relabel_successes``
        the successful simulated episodes are included as (``NEVER``, ``RELABELLED_SUCCESS``).
        """
        from coda_policy.corrective import takeover_step, trace_takeover

        cfg = self.config
        rows: list[tuple[Any, Any]] = []  # (episode record, its diagnosis or None), each record read once
        if cfg.spec.takeover == "diagnosis":
            rows = [(self.store.get("episode", d.episode_ids[0]), d) for d in self._diagnoses(r)]
        else:
            rows = [(self.store.get("episode", e), None) for e in self.output(r, EpisodesResult).episode_ids]
        out: dict[str, tuple[int, str]] = {}
        for record, d in rows:
            if record is None or record.payload.get("source", 0) == SOURCE_REAL:
                continue
            scene_id = d.scene_id if d is not None else str(record.payload["scene_id"])
            family = d.family if d is not None else self._scenes([scene_id])[0].family
            if family in cfg.corrective_skip_families or scene_id in out:
                continue
            success = bool(record.payload.get("success")) if d is None else not d.is_failure
            if success and cfg.relabel_successes:  # the policy acts to the end; every step keeps the expert's label
                out[scene_id] = (NEVER, RELABELLED_SUCCESS)
                continue
            if success or (d is not None and d.failed_stage < 0):
                continue
            samples = record.payload.get("trajectory") or []
            steps = [int(x["step"]) for x in samples]
            if d is not None:
                out[scene_id] = (takeover_step(steps, [int(x["stage"]) for x in samples], d.failed_stage,
                                               cfg.corrective_margin, d.failure_step), d.failure_mode)
            else:
                out[scene_id] = (trace_takeover(steps, [float(x["potential"]) for x in samples],
                                                cfg.corrective_margin), TRACE_FAILURE)
        return out

    def _corrective_episodes(self, jobs: list[tuple[Scene, tuple[int, str]]], version: str) -> list[Any]:
        """Run the corrective demonstrations (scene, (takeover, mode)) on the local workers."""
        from coda_loop.workers import run_corrective_local

        def relabel(mode: str) -> int:
            return NEVER if mode == RELABELLED_SUCCESS else self.config.corrective_relabel

        realign = self.config.corrective_push_realign
        if self.config.workers == 0:
            return [run_corrective_local(s, version, str(self.ckpt_root), t, relabel(m), realign) for s, (t, m) in jobs]
        futures = [self.runner.pool.submit(run_corrective_local, s, version, str(self.ckpt_root), t,  # type: ignore[union-attr]
                                           relabel(m), realign) for s, (t, m) in jobs]
        return [f.result() for f in futures]

    def _bc_gate(self, r: int, parent: str, version: str) -> BCGate:
        """Score the round's BC update and the policy it started from on the same new ``id`` scenes, per family.

        The scenes come from the run's scene source, like the generate step's.
        """
        from coda_engine.sim.generator import draw_seed
        from coda_engine.sim.scene import SceneParams

        cfg = self.config
        rng = self._rng(r, 7)
        scenes = [scene for family in cfg.families for scene in self.scene_source.generate(
            family, [draw_seed(rng) for _ in range(cfg.bc_gate_episodes)], SceneParams(split="id"), r)]
        rates = {}
        for name in (parent, version):
            episodes = self._local_episodes(scenes, name, f"r{r:03d}-gate-{name}")
            rates[name] = {family: float(np.mean([e.success for s, e in zip(scenes, episodes, strict=True)
                                                  if s.family == family])) for family in cfg.families}
        before, after = (float(np.mean(list(rates[n].values()))) for n in (parent, version))
        return BCGate(before=before, after=after, kept=bc_kept(before, after, cfg.bc_gate_tolerance),
                      per_family_before=rates[parent], per_family_after=rates[version],
                      episodes_per_family=cfg.bc_gate_episodes)

    def _round_programs(self, r: int) -> dict[str, str]:
        """Return the source of round ``r``'s staged potential program of each family that has one."""
        return self.store.potential_sources(self.output(r, ProgramsResult).potentials)

    def _rl(self, r: int, family: str, init_from: Path) -> RLResult:
        if self.config.rl_learner == "residual":
            return self._residual_rl(r, family, init_from)
        from coda_policy.rl import RLConfig, train_rl

        cfg = self.config
        planned = self.output(r, ProgramsResult)
        program = self._round_programs(r).get(family, "") if cfg.uses_potentials else ""
        version = f"r{r:03d}-rl"
        n_envs, n_steps = 8, 32
        rollouts = max(1, -(-cfg.rl_env_steps // (n_envs * n_steps)))
        stage = planned.rl_stage if cfg.rl_stage_share > 0 else 0
        rl_cfg = RLConfig(family=family, program=program, shaping=cfg.uses_potentials, n_envs=n_envs, n_steps=n_steps,
                          start_stage=stage, start_stage_share=cfg.rl_stage_share,
                          total_env_steps=cfg.rl_env_steps, init_from=str(init_from),
                          value_warmup_rollouts=max(1, rollouts // 4), eval_episodes=cfg.rl_eval_episodes,
                          seed=cfg.seed * 1000 + r, output_dir=self.ckpt_root, version_id=version,
                          num_threads=cfg.torch_threads, progress=False, resume=False,
                          keep_successes=cfg.rl_success_demos)
        result = train_rl(rl_cfg, self.embedder)
        if result.successes:  # demonstrations of the later rounds, whether or not the gate keeps the update
            from coda_policy.data import DemoSet
            from coda_policy.rl import SUCCESSES_FILE

            tmp = self.demo_dir / f"r{r:03d}.ppo.tmp.npz"
            DemoSet.load(result.folder / SUCCESSES_FILE).with_families(cfg.families).save(tmp)
            os.replace(tmp, self.demo_dir / f"r{r:03d}.ppo.npz")
        before = result.eval_success_init if result.eval_success_init is not None else 0.0
        after = result.eval_success if result.eval_success is not None else 0.0
        kept = ppo_kept(before, after, cfg.rl_eval_episodes)
        if kept:
            self.store.put_policy_version(r, version_id=version, checkpoint_dir=result.folder, parent=init_from.name,
                                          metrics={"trainer": "ppo", "family": family, "shaped": cfg.uses_potentials,
                                                   "env_steps": result.env_steps, "success_before": before,
                                                   "success_after": after})
        return RLResult(version=version, family=family, shaped=bool(program) or cfg.uses_potentials,
                        start_stage=stage, program=program.splitlines()[0] if program else "",
                        success_before=before, success_after=after, kept=kept, seconds=round(result.seconds, 1),
                        success_demos=result.successes, env_steps=int(result.env_steps),
                        eval_episodes=cfg.rl_eval_episodes)

    def _residual_rl(self, r: int, family: str, init_from: Path) -> RLResult:
        """Run the round's RL with ``rl_learner: residual``: PPO's budget, start stage and gate."""
        from coda_policy.config import ResidualRLConfig
        from coda_policy.residual_rl import train_residual

        cfg = self.config
        planned = self.output(r, ProgramsResult)
        program = self._round_programs(r).get(family, "") if cfg.uses_potentials else ""
        version = f"r{r:03d}-rl"
        stage = planned.rl_stage if cfg.rl_stage_share > 0 else 0
        result = train_residual(ResidualRLConfig(
            init_from=str(init_from), family=family, program=program, value_init=cfg.uses_potentials,
            total_env_steps=cfg.rl_env_steps, learning_starts=min(512, cfg.rl_env_steps // 4),
            start_stage=stage, start_stage_share=cfg.rl_stage_share,
            eval_episodes=cfg.rl_eval_episodes, seed=cfg.seed * 1000 + r, output_dir=self.ckpt_root,
            version_id=version, num_threads=cfg.torch_threads, extra={"round": r}), self.embedder)
        before = result.eval_success_init if result.eval_success_init is not None else 0.0
        after = result.eval_success if result.eval_success is not None else 0.0
        kept = ppo_kept(before, after, cfg.rl_eval_episodes)
        if kept:
            self.store.put_policy_version(r, version_id=version, checkpoint_dir=result.folder, parent=init_from.name,
                                          metrics={"trainer": "residual_rl", "family": family,
                                                   "value_init": cfg.uses_potentials, "env_steps": result.env_steps,
                                                   "success_before": before, "success_after": after})
        return RLResult(version=version, family=family, shaped=cfg.uses_potentials, start_stage=stage,
                        program=program.splitlines()[0] if program else "", success_before=before,
                        success_after=after, kept=kept, seconds=round(result.seconds, 1),
                        env_steps=int(result.env_steps), eval_episodes=cfg.rl_eval_episodes, learner="residual")
