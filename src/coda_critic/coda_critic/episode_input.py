# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What the critic node reads: ``EpisodeResult`` dicts -> episodes, the scenes they ran in, and the backend.

An ``EpisodeResult`` names its scene by ``scene_id`` only, so the scenes come separately
(``SceneSpec`` dicts) and are kept in a :class:`SceneBook`. :func:`episode_from_result` turns one
result dict (the message as ``coda_engine.ros.convert.msg_to_dict`` gives it, or
``RecordedEpisode.to_result_dict()``, with ``keyframes`` holding decoded (H, W, 3) uint8 RGB arrays)
into a ``coda_engine.episodes.RecordedEpisode`` that every critic reads. :func:`choose_backends`
picks the backend of each episode (``auto``: grounded when the episode carries privileged object
states, else learned), :func:`check_for_backends` runs the input checks each backend needs with the
episode's index in the whole batch, and :func:`diagnose_with` runs the critics and keeps the order.
:func:`resolve_learned_model` finds the learned critic folder (the newest under a root by default).
Every problem is a :class:`~coda_critic.diagnosis.CriticInputError` naming the episode and the field.
Pure module: no rclpy.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from coda_critic.diagnosis import Critic, CriticInputError, Diagnosis, check_episodes, stage_names
from coda_engine.episodes import STATUS_ABORTED, STATUS_COMPLETED, STATUS_REJECTED, RecordedEpisode
from coda_engine.sim.scene import Scene

BACKEND_CHOICES: tuple[str, ...] = ("grounded", "learned", "auto")
"""Backends the critic node serves; ``auto`` picks grounded or learned per episode."""
MAX_EPISODES = 256
"""Most episodes in one ``DiagnoseEpisodes`` request."""
STATUS_NAMES = {STATUS_COMPLETED: "COMPLETED", STATUS_ABORTED: "ABORTED", STATUS_REJECTED: "REJECTED"}


class LearnedModelError(ValueError):
    """No usable learned critic folder; the message says where it looked."""


class SceneBook:
    """The scenes episodes may refer to, by ``scene_id`` (newest ``capacity`` kept), and why others were refused."""

    def __init__(self, capacity: int = 5000) -> None:
        """Keep at most ``capacity`` scenes (and as many refusal reasons)."""
        if capacity < 1:
            raise ValueError(f"SceneBook capacity={capacity} must be >= 1")
        self.capacity = capacity
        self._scenes: OrderedDict[str, Scene] = OrderedDict()
        self._refused: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        """Return the number of scenes kept."""
        return len(self._scenes)

    def __contains__(self, scene_id: object) -> bool:
        """Tell whether a scene with this id is kept."""
        return scene_id in self._scenes

    def add(self, data: Mapping[str, Any]) -> Scene:
        """Parse a ``SceneSpec`` dict and keep it (MJCF text dropped: critics do not read it).

        A spec that does not parse is remembered as refused, and :class:`CriticInputError` names the problem.
        """
        scene_id = str(data.get("scene_id", ""))
        try:
            if not scene_id:
                raise ValueError("empty scene_id")
            scene = Scene.from_dict({**data, "mjcf": ""})
        except (ValueError, KeyError, TypeError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if scene_id:
                self._remember(self._refused, scene_id, reason)
                self._scenes.pop(scene_id, None)
            raise CriticInputError(f"scene {scene_id!r} does not parse: {reason}") from exc
        self._refused.pop(scene_id, None)
        self._remember(self._scenes, scene_id, scene)
        return scene

    def get(self, scene_id: str) -> Scene:
        """Return the scene; :class:`CriticInputError` when it never arrived or did not parse."""
        if scene_id in self._scenes:
            return self._scenes[scene_id]
        if scene_id in self._refused:
            raise CriticInputError(f"scene {scene_id!r} did not parse when it arrived ({self._refused[scene_id]})")
        raise CriticInputError(
            f"unknown scene_id {scene_id!r}: no SceneSpec with that id has arrived ({len(self._scenes)} scenes known)"
        )

    def _remember(self, store: OrderedDict, key: str, value: Any) -> None:
        store[key] = value
        store.move_to_end(key)
        while len(store) > self.capacity:
            store.popitem(last=False)


def episode_from_result(result: Mapping[str, Any], scenes: SceneBook, index: int = 0) -> RecordedEpisode:
    """Turn one ``EpisodeResult`` dict (keyframes decoded to arrays) into the episode a critic reads.

    Checks what a critic relies on and :func:`check_episodes` does not: the episode ran (not REJECTED),
    its scene is known, the trajectory ends at ``length``, keyframes are (H, W, 3) uint8 with one step each
    inside the episode, and ``num_stages`` is that of the family's stage library.
    """
    episode_id = str(result.get("episode_id", ""))
    where = f"episode {index} ({episode_id!r})"
    if not episode_id:
        raise CriticInputError(f"{where}: empty episode_id")
    status = int(result.get("status", STATUS_COMPLETED))
    if status not in STATUS_NAMES:
        raise CriticInputError(f"{where}: unknown status {status}")
    if status == STATUS_REJECTED:
        raise CriticInputError(
            f"{where}: status REJECTED, the episode never ran ({result.get('status_detail', '') or 'no detail'})"
        )
    try:
        scene = scenes.get(str(result.get("scene_id", "")))
    except CriticInputError as exc:
        raise CriticInputError(f"{where}: {exc}") from exc
    samples = [dict(s) for s in result.get("trajectory", [])]
    if not samples:
        raise CriticInputError(f"{where}: empty trajectory")
    length = int(result.get("length", 0))
    if int(samples[-1]["step"]) != length:
        raise CriticInputError(
            f"{where}: the trajectory ends at step {samples[-1]['step']} but length is {length} "
            "(the last step must be included)"
        )
    keyframes = list(result.get("keyframes", []))
    keyframe_steps = [int(s) for s in result.get("keyframe_steps", [])]
    if len(keyframes) != len(keyframe_steps):
        raise CriticInputError(
            f"{where}: {len(keyframes)} keyframes but {len(keyframe_steps)} keyframe_steps (mismatched)"
        )
    for k, (frame, step) in enumerate(zip(keyframes, keyframe_steps, strict=True)):
        if not (isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3):
            got = f"{frame.dtype} {frame.shape}" if isinstance(frame, np.ndarray) else type(frame).__name__
            raise CriticInputError(f"{where}: keyframe {k} must be an (H, W, 3) uint8 RGB array, got {got}")
        if not 0 <= step <= length:
            raise CriticInputError(f"{where}: keyframe_steps[{k}]={step} is outside the episode (0..{length})")
    num_stages = int(result.get("num_stages", 0))
    expected = len(stage_names(scene.family))
    if num_stages != expected:
        raise CriticInputError(
            f"{where}: num_stages={num_stages} but the {scene.family} stage library has {expected} stages"
        )
    return RecordedEpisode(
        episode_id=episode_id,
        scene=scene,
        policy_version=str(result.get("policy_version", "")),
        robot_id=str(result.get("robot_id", "")),
        success=bool(result.get("success", False)),
        steps=length,
        stage_reached=int(result.get("stage_reached", 0)),
        num_stages=num_stages,
        control_rate_hz=float(result.get("control_rate_hz", 0.0)),
        samples=samples,
        keyframes=keyframes,
        keyframe_steps=keyframe_steps,
        status=status,
        status_detail=str(result.get("status_detail", "")),
        source=int(result.get("source", 0)),
    )


def check_batch_size(count: int) -> None:
    """Raise :class:`CriticInputError` unless a request holds 1..``MAX_EPISODES`` episodes."""
    if not 1 <= count <= MAX_EPISODES:
        raise CriticInputError(f"episodes: got {count} episodes, expected 1..{MAX_EPISODES}")


def episodes_from_results(results: Sequence[Mapping[str, Any]], scenes: SceneBook) -> list[RecordedEpisode]:
    """Convert a batch (1..``MAX_EPISODES`` results); errors name the episode's index in the batch."""
    check_batch_size(len(results))
    return [episode_from_result(r, scenes, i) for i, r in enumerate(results)]


def has_privileged_state(episode: RecordedEpisode) -> bool:
    """Tell whether the trajectory carries object states (simulated episodes do, real arms do not)."""
    return any(s.get("objects") for s in episode.samples)


def choose_backends(episodes: Sequence[RecordedEpisode], requested: str) -> list[str]:
    """Backend of each episode: ``requested``, or for ``auto`` grounded with privileged state, else learned."""
    if requested not in BACKEND_CHOICES:
        raise CriticInputError(f"backend {requested!r} is not served here; choose one of {', '.join(BACKEND_CHOICES)}")
    if requested != "auto":
        return [requested] * len(episodes)
    return ["grounded" if has_privileged_state(ep) else "learned" for ep in episodes]


def check_for_backends(episodes: Sequence[RecordedEpisode], backends: Sequence[str]) -> None:
    """Run :func:`check_episodes` on the batch and, per episode, with what its backend needs.

    Errors name the episode by its index in the whole batch.
    """
    check_episodes(episodes)
    for i, (ep, backend) in enumerate(zip(episodes, backends, strict=True)):
        try:
            check_episodes([ep], need_keyframes=backend == "learned", need_privileged=backend == "grounded")
        except CriticInputError as exc:
            message = str(exc)
            prefix = f"episode 0 ({ep.episode_id!r})"
            if message.startswith(prefix):
                message = f"episode {i} ({ep.episode_id!r})" + message[len(prefix) :]
            raise CriticInputError(f"{message} [backend {backend}]") from exc


def diagnose_with(
    episodes: Sequence[RecordedEpisode], backends: Sequence[str], critics: Mapping[str, Critic]
) -> list[Diagnosis]:
    """Diagnose each episode with ``critics[backend]`` (one call per backend), in the episodes' order."""
    diagnoses: list[Diagnosis | None] = [None] * len(episodes)
    order = sorted(range(len(episodes)), key=lambda i: backends[i])
    for backend, group in itertools.groupby(order, key=lambda i: backends[i]):
        index = list(group)
        for i, d in zip(index, critics[backend].diagnose([episodes[i] for i in index]), strict=True):
            diagnoses[i] = d
    return [d for d in diagnoses if d is not None]


def resolve_learned_model(model: str | Path, root: str | Path, fallback: Path | None = None) -> Path:
    """Return the learned critic folder: ``model``, else the newest ``lc-*`` under ``root``, else ``fallback``.

    The node passes the embedded critic (``coda_critic.models.EMBEDDED_MODEL``) as ``fallback``.
    """
    if str(model):
        folder = Path(model)
        if not (folder / "config.json").is_file():
            raise LearnedModelError(f"learned_model {str(folder)!r} is not a saved critic folder (no config.json)")
        return folder
    folders = [p for p in Path(root).glob("lc-*") if (p / "config.json").is_file()]
    if not folders and fallback is not None:
        return fallback
    if not folders:
        raise LearnedModelError(
            f"no trained critic under {str(root)!r}: run `coda critic train` first, or set the learned_model parameter"
        )
    return max(folders, key=lambda p: (p.stat().st_mtime, p.name))
