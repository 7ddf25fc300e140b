# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The diagnose step of a round (part of :class:`coda_loop.rounds.CoevolutionLoop`).

The critic that steers (grounded, or the learned one with ``critic: learned``) diagnoses every simulated
episode; real arms' episodes, without privileged state, go to the learned critic. With memory, the most similar
earlier failures are recalled with what the generation they caused changed. With ``grounded+learned``, the
acting learned critic is scored against the grounded labels and a fine-tuned copy becomes the next version
when it agrees at least as often on held-out episodes. Pure module: no rclpy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from coda_engine.episodes import SOURCE_REAL
from coda_loop.config import LoopConfig
from coda_loop.gates import critic_kept
from coda_loop.step_results import CriticFineTune, DiagnoseResult, EpisodesResult, LearnedCriticRound, Recall


class DiagnoseStep:
    """The diagnose step; a base of :class:`~coda_loop.rounds.CoevolutionLoop`, whose state and helpers it uses."""

    config: LoopConfig
    store: Any
    run_dir: Path
    ckpt_root: Path
    demo_dir: Path
    critic_source: Any

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
        if self.critic_source is not None and self.config.critic != "learned":  # a critic node of the domain
            return self.critic_source
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
            done = self.output(k, DiagnoseResult).learned
            if done and done.next_folder:  # a version fine-tuned in this run (empty: the starting critic)
                return self.run_dir / done.next_folder
        return Path(self.config.critic_model).resolve() if self.config.critic_model else EMBEDDED_MODEL

    def _step_diagnose(self, r: int) -> DiagnoseResult:
        if not self.config.uses_critic and r > 0:
            return DiagnoseResult(skipped=f"method {self.config.method} runs without the critic", diagnosis_ids=[])
        every = self._episodes_from_memory(self.output(r, EpisodesResult).episode_ids)
        episodes = [ep for ep in every if ep.source != SOURCE_REAL]
        real = [ep for ep in every if ep.source == SOURCE_REAL and len(ep.keyframes)]
        critic = self._critic(r)
        version = self._record_critic(r, critic)
        diagnoses = critic.diagnose(episodes) if episodes else []
        found = diagnoses  # what the critic found (the learned critic's teacher), whatever steering passes on
        real_diagnoses = []
        if real:  # no privileged state on real arms: the learned critic diagnoses them, whatever steers sim
            from coda_critic.learned import load_critic

            seer = critic if hasattr(critic, "version") else load_critic(self._learned_folder(r), self.embedder)
            self._record_critic(r, seer, self._learned_folder(r))
            real_diagnoses = seer.diagnose(real)
        if self.config.spec.diagnosis == "pass_fail":  # only success or failure reaches the programs and training
            from coda_critic.diagnosis import pass_fail

            def reduce(found: list[Any], eps: list[Any]) -> list[Any]:
                return [pass_fail(d, min(ep.stage_reached, ep.num_stages - 1))
                        for d, ep in zip(found, eps, strict=True)]

            diagnoses, real_diagnoses = reduce(diagnoses, episodes), reduce(real_diagnoses, real)
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
                        recalled.append(Recall(diagnosis_id=d.diagnosis_id, similar=past.record_id,
                                               score=round(float(score), 3), effect=effect))
        out = DiagnoseResult(diagnosis_ids=ids, failures=sum(d.is_failure for d in diagnoses), modes=dict(modes),
                             critic=getattr(critic, "name", self.config.critic), critic_version=version,
                             recalled=recalled)
        if real:
            out.real_diagnosis_ids = ids[len(ids) - len(real_diagnoses):]
        if self.config.critic == "grounded+learned" and self.config.uses_critic:
            out.learned = self._learned_critic_round(r, episodes, found)
        return out

    def _learned_critic_round(self, r: int, episodes: list[Any], grounded: list[Any]) -> LearnedCriticRound:
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
        out = LearnedCriticRound(version=critic.version, agreement=agreement(learned, grounded),
                                 episode_ids=[ep.episode_id for ep in episodes],
                                 verdicts=[[d.failure_mode, d.failed_stage] for d in learned],
                                 next_version=critic.version, next_folder=self._in_run(folder))
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
        out.fine_tune = CriticFineTune(parent=critic.version, round=r, train_examples=len(train_set),
                                       held_out_examples=len(check_set), held_out_mode_accuracy_before=before,
                                       held_out_mode_accuracy_after=after, kept=critic_kept(before, after),
                                       seconds=round(history["seconds"], 1))
        if out.fine_tune.kept:
            saved = save_model(tuned, self.run_dir / "critics", out.fine_tune.to_dict())
            self.store.put_critic_version(r, version_id=saved.name, backend="learned",
                                          info={"folder": self._portable(saved), **out.fine_tune.to_dict()})
            out.next_version, out.next_folder = saved.name, self._in_run(saved)
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
        if hasattr(critic, "service"):  # a critic node (coda_loop.ros.remote.RemoteCritic)
            version, info, backend = f"{critic.backend}@{critic.service}", {"service": critic.service}, critic.backend
        elif hasattr(critic, "version"):  # a learned critic
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
        for diagnosis_id in self.output(r, DiagnoseResult).diagnosis_ids:
            record = self.store.get("diagnosis", diagnosis_id)
            out.append(Diagnosis.from_dict(record.payload))  # type: ignore[union-attr]
        return out
