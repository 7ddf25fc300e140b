# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The critic's data types (aligned with ``coda_msgs/Diagnosis`` and ``Condition``) and input checks.

:class:`Diagnosis.to_dict` mirrors the message field by field (nested ``header``), so
``coda_engine.ros.convert.dict_to_msg(Diagnosis, d.to_dict())`` fills the message, and
``Diagnosis.from_dict(d.to_dict()) == d`` holds. The failure-mode vocabulary is the message's
``MODE_*`` constants. :func:`scene_conditions` describes a scene in the generator's vocabulary
(the keys of ``Condition.msg``), and :func:`check_episodes` rejects malformed critic input with
an error that names the episode and the problem. Pure module: no rclpy.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from coda_engine.sim.families import get_family
from coda_engine.sim.families import pick_place as _pick_place
from coda_engine.sim.families import push as _push
from coda_engine.sim.families import reach as _reach
from coda_engine.sim.families import stack as _stack
from coda_engine.sim.layout import LAYOUT
from coda_engine.sim.scene import SHAPE_NAMES, Scene
from coda_engine.sim.stages import compile_program

MODE_SUCCESS = "success"
MODE_NEVER_APPROACHED = "never_approached"
MODE_WRONG_OBJECT = "wrong_object"
MODE_MISSED_GRASP = "missed_grasp"
MODE_DROPPED = "dropped"
MODE_MISPLACED = "misplaced"
MODE_KNOCKED_OVER = "knocked_over"
MODE_TIMED_OUT = "timed_out"
MODES: tuple[str, ...] = (MODE_SUCCESS, MODE_NEVER_APPROACHED, MODE_WRONG_OBJECT, MODE_MISSED_GRASP, MODE_DROPPED,
                          MODE_MISPLACED, MODE_KNOCKED_OVER, MODE_TIMED_OUT)
"""Every failure mode, in the order of ``Diagnosis.msg``."""
FAILURE_MODES: tuple[str, ...] = MODES[1:]
"""The modes that are failures."""
BACKENDS: tuple[str, ...] = ("grounded", "learned", "vlm")
"""Critic backend names of ``Diagnosis.critic_backend``."""
CONDITION_KEYS: tuple[str, ...] = ("family", "split", "position_region", "phrasing", "target_color", "target_shape",
                                   "target_size", "num_distractors", "camera_jitter")
"""Condition keys of ``Condition.msg``."""
NEAR_FAR_X = 0.5
"""Objects with x below this (m, base frame) are ``near``, else ``far``."""
SIDE_Y = 0.08
"""Objects with y above this are ``left``, below minus this ``right``, else ``center`` (m)."""
NOMINAL_TARGET_SIZE: dict[str, dict[int, tuple[float, float, float]]] = {
    "reach": dict(_reach.NOMINAL),
    "pick_place": dict(_pick_place.NOMINAL),
    "push": dict(_push.NOMINAL),
    "stack": {0: _stack.TARGET_SIZE},
}
"""Nominal half extents of the target per family and shape code (the generator scales them)."""


class CriticInputError(ValueError):
    """Critic input that cannot be diagnosed; the message names the episode and the problem."""


@dataclass(frozen=True)
class Condition:
    """One condition of a failure as a key/value pair (``coda_msgs/Condition``)."""

    key: str
    """One of ``CONDITION_KEYS``."""
    value: str
    """Its value in the generator's vocabulary, e.g. ``left_far``."""

    def to_dict(self) -> dict[str, Any]:
        """Fields of ``coda_msgs/Condition``."""
        return {"key": self.key, "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Condition:
        """Inverse of :meth:`to_dict`."""
        return cls(key=str(data["key"]), value=str(data["value"]))


@dataclass
class Diagnosis:
    """The critic's verdict on one or more episodes (``coda_msgs/Diagnosis``)."""

    diagnosis_id: str
    """Unique id."""
    episode_ids: list[str]
    """Episodes this diagnosis explains (at least one)."""
    scene_id: str
    """Scene of the first episode."""
    family: str
    """Task family of the scene."""
    failure_mode: str
    """One of ``MODES``."""
    failed_stage: int
    """Index of the stage that did not complete; -1 for success."""
    failed_stage_name: str
    """Its name in the family's stage library; empty for success."""
    target_object: str
    """Object the instruction refers to."""
    conditions: list[Condition] = field(default_factory=list)
    """Scene conditions that characterise the failure."""
    text: str = ""
    """Natural-language explanation (the input of Text2potential)."""
    confidence: float = 1.0
    """In [0, 1]."""
    critic_backend: str = "grounded"
    """One of ``BACKENDS``."""
    critic_version: str = ""
    """Version id of the critic model; empty for grounded."""
    stamp_sec: int = 0
    """Header stamp, seconds."""
    stamp_nanosec: int = 0
    """Header stamp, nanoseconds."""
    failure_step: int = -1
    """Control step at which the failure began (its onset, e.g. the first contact that tipped an object); -1 for
    success or when the critic cannot tell (a critic without the privileged trace)."""

    def __post_init__(self) -> None:
        """Check the vocabulary and ranges; the error names the field."""
        problems = []
        if self.failure_mode not in MODES:
            problems.append(f"failure_mode={self.failure_mode!r} is not one of {MODES}")
        if not self.episode_ids:
            problems.append("episode_ids is empty (a diagnosis explains at least one episode)")
        if not 0.0 <= self.confidence <= 1.0:
            problems.append(f"confidence={self.confidence} is outside [0, 1]")
        if self.critic_backend not in BACKENDS:
            problems.append(f"critic_backend={self.critic_backend!r} is not one of {BACKENDS}")
        if self.failure_step < -1 or (self.failure_mode == MODE_SUCCESS and self.failure_step != -1):
            problems.append(f"failure_step={self.failure_step} must be >= 0 for a failure whose onset is known, "
                            "else -1")
        if (self.failure_mode == MODE_SUCCESS) != (self.failed_stage == -1):
            problems.append(f"failed_stage={self.failed_stage} must be -1 exactly for success "
                            f"(failure_mode={self.failure_mode!r})")
        bad = [c.key for c in self.conditions if c.key not in CONDITION_KEYS]
        if bad:
            problems.append(f"unknown condition keys {bad}; expected some of {CONDITION_KEYS}")
        if problems:
            raise ValueError(f"invalid Diagnosis {self.diagnosis_id!r}: " + "; ".join(problems))

    @property
    def is_failure(self) -> bool:
        """True unless the mode is success."""
        return self.failure_mode != MODE_SUCCESS

    def condition(self, key: str, default: str = "") -> str:
        """Return the value of condition ``key`` (``default`` if absent)."""
        return next((c.value for c in self.conditions if c.key == key), default)

    def to_dict(self) -> dict[str, Any]:
        """Nested dict with the field names and structure of ``coda_msgs/Diagnosis``."""
        return {
            "header": {"stamp": {"sec": int(self.stamp_sec), "nanosec": int(self.stamp_nanosec)}, "frame_id": ""},
            "diagnosis_id": self.diagnosis_id,
            "episode_ids": list(self.episode_ids),
            "scene_id": self.scene_id,
            "family": self.family,
            "failure_mode": self.failure_mode,
            "failed_stage": int(self.failed_stage),
            "failed_stage_name": self.failed_stage_name,
            "failure_step": int(self.failure_step),
            "target_object": self.target_object,
            "conditions": [c.to_dict() for c in self.conditions],
            "text": self.text,
            "confidence": float(self.confidence),
            "critic_backend": self.critic_backend,
            "critic_version": self.critic_version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        """Inverse of :meth:`to_dict` (also accepts a dict made from the message)."""
        stamp = data.get("header", {}).get("stamp", {})
        return cls(
            diagnosis_id=str(data["diagnosis_id"]),
            episode_ids=[str(e) for e in data["episode_ids"]],
            scene_id=str(data["scene_id"]),
            family=str(data["family"]),
            failure_mode=str(data["failure_mode"]),
            failed_stage=int(data["failed_stage"]),
            failed_stage_name=str(data["failed_stage_name"]),
            failure_step=int(data.get("failure_step", -1)),
            target_object=str(data["target_object"]),
            conditions=[Condition.from_dict(c) for c in data.get("conditions", [])],
            text=str(data.get("text", "")),
            confidence=float(data.get("confidence", 1.0)),
            critic_backend=str(data.get("critic_backend", "grounded")),
            critic_version=str(data.get("critic_version", "")),
            stamp_sec=int(stamp.get("sec", 0)),
            stamp_nanosec=int(stamp.get("nanosec", 0)),
        )


def pass_fail(d: Diagnosis, ended_stage: int) -> Diagnosis:
    """Return ``d`` reduced to what an episode's success flag says (the ``coda_pass_fail`` ablation).

    A success stays a success with a plain text. A failure keeps its episode, scene, family, target and the scene's
    own conditions (the scene's description, which a baseline without a critic reads as well) and loses everything
    the critic found: its mode becomes ``timed_out`` (what every critic calls an episode that ran out of steps for no
    reason it can name), its onset is unknown (-1), its text says only that the task was not completed, and its
    failed stage is ``ended_stage``, the stage the episode's own recorded stage index ended in (every episode records
    it; no critic needed). A ValueError names a stage outside the family's stages.
    """
    names = stage_names(d.family)
    if not d.is_failure:
        return dataclasses.replace(d, text="the task succeeded", failure_step=-1)
    if not 0 <= ended_stage < len(names):
        raise ValueError(f"ended_stage={ended_stage} is not a stage of {d.family!r} (0..{len(names) - 1})")
    return dataclasses.replace(d, failure_mode=MODE_TIMED_OUT, failure_step=-1, failed_stage=int(ended_stage),
                               failed_stage_name=names[ended_stage], text=f"the {d.family} task was not completed")


class EpisodeLike(Protocol):
    """What a critic reads of an episode (``coda_engine.episodes.RecordedEpisode`` has all of it)."""

    episode_id: str
    scene: Scene
    success: bool
    steps: int
    stage_reached: int
    num_stages: int
    samples: list[dict[str, Any]]
    keyframes: list[np.ndarray]
    keyframe_steps: list[int]


class Critic(Protocol):
    """One interface for every backend."""

    name: str

    def diagnose(self, episodes: Sequence[EpisodeLike]) -> list[Diagnosis]:
        """Return one diagnosis per episode, in order."""


@functools.cache
def stage_library(family: str) -> tuple[tuple[str, str, str], ...]:
    """Return the family's default stages as (name, progress, done) sources, compiled with ``coda_core_cpp``."""
    program = compile_program(get_family(family).program, LAYOUT)
    return tuple((str(n), str(p), str(d)) for n, p, d in program.stages)


def stage_names(family: str) -> list[str]:
    """Names of the family's default stages, in order."""
    return [name for name, _, _ in stage_library(family)]


def position_region(x: float, y: float) -> str:
    """Region word of a table position: ``{left|center|right}_{near|far}``."""
    side = "left" if y > SIDE_Y else "right" if y < -SIDE_Y else "center"
    return f"{side}_{'near' if x < NEAR_FAR_X else 'far'}"


def phrasing(scene: Scene) -> str:
    """How the instruction names the target: the referring mode, ``_synonym`` appended when synonyms are used."""
    mode = next((t.split(":", 1)[1] for t in scene.perturbation_tags if t.startswith("referring:")), "color_shape")
    return mode + ("_synonym" if "instruction:synonym" in scene.perturbation_tags else "")


def size_class(scene: Scene) -> str:
    """``small`` | ``nominal`` | ``large``: the target's scale against its family's nominal size (0.9..1.1)."""
    target = scene.target
    nominal = NOMINAL_TARGET_SIZE.get(scene.family, {}).get(target.shape)
    if nominal is None:
        return "nominal"
    scale = target.size[0] / nominal[0]
    return "small" if scale < 0.895 else "large" if scale > 1.105 else "nominal"


def scene_conditions(scene: Scene) -> list[Condition]:
    """Describe the scene in the generator's vocabulary: one condition per ``CONDITION_KEYS`` entry."""
    target = scene.target
    jitter = float(scene.meta.get("params", {}).get("camera_jitter", 0.0))
    values = {
        "family": scene.family,
        "split": scene.split,
        "position_region": position_region(target.position[0], target.position[1]),
        "phrasing": phrasing(scene),
        "target_color": target.color_name,
        "target_shape": SHAPE_NAMES[target.shape],
        "target_size": size_class(scene),
        "num_distractors": str(len(scene.distractors)),
        "camera_jitter": f"{jitter:g}",
    }
    return [Condition(k, values[k]) for k in CONDITION_KEYS]


def diagnosis_id(backend: str, episode_ids: Sequence[str], version: str = "") -> str:
    """Deterministic id: backend, then a hash of the episode ids and the critic version."""
    digest = hashlib.sha256(json.dumps([list(episode_ids), version]).encode()).hexdigest()[:12]
    return f"dx-{backend}-{digest}"


def check_episodes(episodes: Sequence[EpisodeLike], *, need_keyframes: bool = False,
                   need_privileged: bool = False) -> None:
    """Raise :class:`CriticInputError` naming the episode and the problem when the input cannot be diagnosed.

    Checks: unique episode ids; a non-empty trajectory with increasing steps; the target among the scene's
    objects; keyframes and keyframe_steps of equal length (and non-empty, HxWx3 uint8 when
    ``need_keyframes``); privileged object states whose names match the scene's objects (when
    ``need_privileged``).
    """
    seen: set[str] = set()
    for index, ep in enumerate(episodes):
        where = f"episode {index} ({ep.episode_id!r})"
        if not ep.episode_id:
            raise CriticInputError(f"{where}: empty episode_id")
        if ep.episode_id in seen:
            raise CriticInputError(f"{where}: duplicate episode_id {ep.episode_id!r} in one batch")
        seen.add(ep.episode_id)
        names = [o.name for o in ep.scene.objects]
        if ep.scene.target_object not in names:
            raise CriticInputError(f"{where}: target_object {ep.scene.target_object!r} is not an object of scene "
                                   f"{ep.scene.scene_id!r} ({names})")
        if not ep.samples:
            raise CriticInputError(f"{where}: empty trajectory")
        steps = [int(s["step"]) for s in ep.samples]
        if any(b <= a for a, b in itertools.pairwise(steps)):
            raise CriticInputError(f"{where}: trajectory steps are not increasing")
        if len(ep.keyframes) != len(ep.keyframe_steps):
            raise CriticInputError(f"{where}: {len(ep.keyframes)} keyframes but {len(ep.keyframe_steps)} "
                                   "keyframe_steps (mismatched)")
        if need_keyframes:
            if not ep.keyframes:
                raise CriticInputError(f"{where}: empty keyframes (this critic looks at images)")
            for k, frame in enumerate(ep.keyframes):
                arr = np.asarray(frame)
                if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
                    raise CriticInputError(f"{where}: keyframe {k} must be HxWx3 uint8 rgb, got {arr.dtype} "
                                           f"{arr.shape}")
        if need_privileged:
            for sample in ep.samples:
                got = [o["name"] for o in sample.get("objects", [])]
                if not got:
                    raise CriticInputError(f"{where}: step {sample['step']} has no privileged object states "
                                           "(the grounded critic needs a simulated episode)")
                if got != names:
                    raise CriticInputError(f"{where}: step {sample['step']} object states {got} do not match the "
                                           f"objects of scene {ep.scene.scene_id!r} {names} (mismatched ids)")
