# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What the vision-language critic asks a model and how it checks the answer (pure: no torch, no transformers).

:func:`build_prompt` writes the question about one episode (instruction, objects, the family's stages, a short
trajectory summary), :func:`extract_json` and :func:`validate_answer` turn the model's text into a
:class:`VlmAnswer` or a :class:`SchemaError` listing every problem, and :func:`fallback_note` is the sentence a
fallback diagnosis carries. :mod:`coda_critic.vlm` runs the model. No rclpy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from coda_critic.diagnosis import CONDITION_KEYS, MODE_SUCCESS, MODES, EpisodeLike, stage_names

NO_STAGE = "none"
"""The ``stage`` of a success answer."""
ANSWER_FIELDS = ("failure_mode", "stage", "target", "conditions", "explanation", "confidence")
"""Keys of the JSON answer, in the order the prompt lists them."""
REASON_CHARS = 200
"""Each rejected answer's problem is cut to this many characters in the diagnosis text."""


class SchemaError(ValueError):
    """A model answer that is not a valid diagnosis; the message lists every problem."""

@dataclass(frozen=True)
class VlmAnswer:
    """A validated answer."""

    failure_mode: str
    """One of ``MODES``."""
    failed_stage: int
    """Index in the family's stage library; -1 for success."""
    stage_name: str
    """Its name; empty for success."""
    target: str
    """One of the scene's objects."""
    conditions: dict[str, str]
    """Conditions the model cites (keys of ``CONDITION_KEYS``)."""
    explanation: str
    """The model's sentence."""
    confidence: float
    """In [0, 1]."""

@dataclass(frozen=True)
class VlmAttempt:
    """One question to the model and what came back."""

    episode_id: str
    """Episode asked about."""
    attempt: int
    """1 for the first question, 2 for the retry."""
    output: str
    """The model's raw answer."""
    error: str
    """Why it was rejected; empty when it was valid."""
    seconds: float
    """Time the model took."""

def extract_json(text: str) -> dict[str, Any]:
    """Return the first JSON object in ``text`` (code fences and surrounding words are skipped).

    Raises :class:`SchemaError` when there is none, naming whether an object started but was cut off.
    """
    decoder = json.JSONDecoder()
    start = text.find("{")
    if start < 0:
        raise SchemaError(f"no JSON object in the output {text[:80]!r}")
    first_error = ""
    while start >= 0:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError as error:
            first_error = first_error or f"{error.msg} at character {error.pos}"
        else:
            if isinstance(value, dict):
                return value
        start = text.find("{", start + 1)
    raise SchemaError(f"no complete JSON object in the output (first one: {first_error}; cut off or malformed)")

def validate_answer(data: Any, family: str, objects: Sequence[str]) -> VlmAnswer:
    """Check a decoded answer against the schema (module docstring); :class:`SchemaError` lists every problem.

    ``stage`` is a stage name of ``family`` (case-insensitive) for a failure and ``none`` (or null / empty)
    for success; condition values may be strings or numbers; extra keys are ignored.
    """
    if not isinstance(data, Mapping):
        raise SchemaError(f"the answer is a {type(data).__name__}, not a JSON object")
    missing = [k for k in ANSWER_FIELDS if k not in data]
    problems = [f"missing fields {missing} (partial answer)"] if missing else []
    names = stage_names(family)
    mode = data.get("failure_mode")
    if "failure_mode" in data and mode not in MODES:
        problems.append(f"failure_mode={mode!r} is not one of {MODES}")
    stage, stage_name = -1, ""
    if "stage" in data:
        raw = data["stage"]
        word = "" if raw is None else str(raw).strip().lower() if isinstance(raw, str) else None
        if word is None:
            problems.append(f"stage={raw!r} must be a stage name or {NO_STAGE!r}")
        elif word in ("", NO_STAGE):
            if mode in MODES and mode != MODE_SUCCESS:
                problems.append(f"stage={raw!r}: a failure ({mode}) names the stage that did not complete, one of "
                                f"{names}")
        elif word not in names:
            problems.append(f"stage={raw!r} is not a stage of {family} {names} (or {NO_STAGE!r} for success)")
        elif mode == MODE_SUCCESS:
            problems.append(f"stage={raw!r}: a success has stage {NO_STAGE!r}")
        else:
            stage, stage_name = names.index(word), word
    target = data.get("target")
    if "target" in data and (not isinstance(target, str) or target not in objects):
        problems.append(f"target={target!r} is not one of the scene's objects {list(objects)}")
    conditions: dict[str, str] = {}
    if "conditions" in data:
        raw_conditions = data["conditions"]
        if not isinstance(raw_conditions, Mapping):
            problems.append(f"conditions must be an object {{key: value}}, got {type(raw_conditions).__name__}")
        else:
            for key, value in raw_conditions.items():
                if key not in CONDITION_KEYS:
                    problems.append(f"condition key {key!r} is not one of {CONDITION_KEYS}")
                elif isinstance(value, bool) or not isinstance(value, str | int | float) or not str(value).strip():
                    problems.append(f"condition {key}={value!r} must be a non-empty string or a number")
                else:
                    conditions[key] = str(value).strip()
    explanation = data.get("explanation")
    if "explanation" in data and (not isinstance(explanation, str) or not explanation.strip()):
        problems.append(f"explanation={explanation!r} must be a non-empty string")
    confidence = data.get("confidence")
    if "confidence" in data and (isinstance(confidence, bool) or not isinstance(confidence, int | float)
                                 or not 0.0 <= float(confidence) <= 1.0):
        problems.append(f"confidence={confidence!r} must be a number in [0, 1]")
    if problems:
        raise SchemaError("; ".join(problems))
    return VlmAnswer(failure_mode=str(mode), failed_stage=stage, stage_name=stage_name, target=str(target),
                     conditions=conditions, explanation=str(explanation).strip(), confidence=float(confidence))

def parse_answer(text: str, family: str, objects: Sequence[str]) -> VlmAnswer:
    """:func:`extract_json` then :func:`validate_answer`."""
    return validate_answer(extract_json(text), family, objects)

def trajectory_summary(episode: EpisodeLike, points: int = 4) -> str:
    """Summarise the tool's path and the gripper (nothing privileged: no object states, no success flag)."""
    samples = episode.samples
    picks = sorted(set(np.linspace(0, len(samples) - 1, max(points, 2)).round().astype(int).tolist()))
    where = []
    for k in picks:
        e = samples[k]["ee_position"]
        where.append(f"step {int(samples[k]['step'])}: ({e['x']:.2f}, {e['y']:.2f}, {e['z']:.2f}) m, "
                     f"fingers {float(samples[k]['gripper_opening']):.3f} m")
    openings = np.array([float(s["gripper_opening"]) for s in samples])
    lowest = min(float(s["ee_position"]["z"]) for s in samples)
    return (f"{episode.steps} control steps; keyframes at steps {list(map(int, episode.keyframe_steps))}. "
            f"Tool positions: {'; '.join(where)}. Lowest tool height {lowest:.2f} m; narrowest finger opening "
            f"{openings.min():.3f} m.")

def build_prompt(episode: EpisodeLike, images: int, points: int = 4, feedback: str = "") -> str:
    """Write the question about one episode (``images`` keyframes come before it); ``feedback`` asks again."""
    scene = episode.scene
    names = stage_names(scene.family)
    objects = [o.name for o in scene.objects]
    lines = [
        f"These {images} images are keyframes of one robot-arm episode, in time order.",
        f'Task family: {scene.family}. Instruction: "{scene.instruction}".',
        f"Objects in the scene: {', '.join(objects)}.",
        f"Stages of the task, in order: {', '.join(names)}.",
        f"Trajectory: {trajectory_summary(episode, points)}",
        "Diagnose the episode. Answer with one JSON object with exactly these fields:",
        f'"failure_mode": one of {", ".join(MODES)};',
        f'"stage": the first stage that did not complete ({", ".join(names)}), or "{NO_STAGE}" for success;',
        '"target": the object the instruction refers to;',
        f'"conditions": an object with the scene conditions that explain the outcome, keys among '
        f'{", ".join(CONDITION_KEYS)};',
        '"explanation": one sentence;',
        '"confidence": a number between 0 and 1.',
    ]
    if feedback:
        lines.append(f"Your previous answer was rejected: {feedback}. Reply with the JSON object only.")
    return "\n".join(lines)

def fallback_note(version: str, attempts: Sequence[VlmAttempt], backend: str) -> str:
    """Return the sentence appended to a fallback diagnosis: which answers were rejected and why."""
    reasons = "; ".join(f"answer {a.attempt}: {a.error[:REASON_CHARS]}" for a in attempts)
    return (f" [VLM fallback: the vlm critic {version} gave no valid diagnosis in {len(attempts)} answers "
            f"({reasons}); diagnosed by the {backend} critic.]")
