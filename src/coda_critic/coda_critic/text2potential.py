# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Text2potential: diagnosis text -> a staged potential program, compiled with ``coda_core_cpp``.

The default translator needs no large model. A small grammar over the diagnosis vocabulary reads
the text (from any critic backend): the failure mode (the earliest phrase of any mode), the failed
stage (``the NAME stage`` with NAME from the family's stage library, or ``stage N of K``), and the
objects it names. A rule per mode then rewrites the family's default program around the failed
stage, always keeping the progress terms in [0, 1]:

=================  =====================================================================================
mode               rewrite of the family's stage library
=================  =====================================================================================
never_approached   split the failed stage at half progress (twice the potential for getting closer)
wrong_object       multiply the failed stage's progress by a term that is 0 at the wrong object
missed_grasp       insert ``center`` (fingers centred on the target) before the grasp stage
dropped            insert ``secure`` (lifted a little, still in the hand) before the lift stage and make
                   the lift progress count only while the target stays in the hand
misplaced          insert ``align_goal`` (target over the goal) before the failed placing stage
knocked_over       insert ``<stage>_above`` (arrive over the stage's object from above) before it
timed_out          split the failed stage at half progress
success            the family's default program
=================  =====================================================================================

Every emitted source goes through :func:`compile_checked` (``PotentialProgram.compile`` against the
observation layout); anything that does not compile, or text in which no mode is recognised, becomes
a :class:`Reject` carrying the compiler's line, column and message. Pure module: no rclpy.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coda_core_cpp import PotentialError, PotentialProgram
from coda_critic.diagnosis import (
    MODE_DROPPED,
    MODE_KNOCKED_OVER,
    MODE_MISPLACED,
    MODE_MISSED_GRASP,
    MODE_NEVER_APPROACHED,
    MODE_SUCCESS,
    MODE_TIMED_OUT,
    MODE_WRONG_OBJECT,
    Diagnosis,
    stage_library,
)
from coda_engine.sim.families import get_family
from coda_engine.sim.layout import LAYOUT
from coda_engine.sim.scene import MAX_OBJECTS

Layout = Mapping[str, tuple[int, int]]

MODE_PATTERNS: dict[str, str] = {
    MODE_SUCCESS: r"\bsuccess(?:ful(?:ly)?)?\b|\bsucceeded\b|\ball \d+ stages completed\b",
    MODE_NEVER_APPROACHED: r"\bnever (?:approached|came near|got close to|reached)\b|\bdid not (?:approach|reach)\b"
                           r"|\bstayed away from\b",
    MODE_WRONG_OBJECT: r"\bwrong object\b|\binstead of the\b|\banother object\b|\bthe wrong (?:item|thing)\b",
    MODE_MISSED_GRASP: r"\bmissed (?:the )?grasp\b|\bfailed to grasp\b|\bcould not grasp\b|\bgrasp (?:failed|missed)\b"
                       r"|\bclosed the gripper but\b",
    MODE_DROPPED: r"\bdropped\b|\blost (?:it|the \w+) in the air\b|\bslipped\b|\bfell out of the gripper\b",
    MODE_MISPLACED: r"\bmisplaced\b|\bwrong (?:place|region|location|spot)\b|\bnot on it\b|\boutside the goal\b",
    MODE_KNOCKED_OVER: r"\bknock(?:ed)? (?:over|off)\b|\bknocked\b|\bcollided\b|\bcollision\b|\btipped\b|\bbumped\b",
    MODE_TIMED_OUT: r"\btimed out\b|\btime out\b|\bran out of (?:steps|time)\b|\btoo slow\b",
}
"""The grammar's phrases of each failure mode (matched case-insensitively; the earliest match wins)."""
TRANSLATORS = ("default", "grammar", "model")
"""``PotentialProgram.translator`` values."""


class TranslationError(ValueError):
    """Text the grammar cannot read (no failure mode, unknown family)."""


@dataclass(frozen=True)
class Text2PotentialConfig:
    """Settings of the default translator."""

    gamma: float = 0.99
    """Discount written into the programs (shaping F = gamma * Phi(s') - Phi(s))."""
    guard_radius: float = 0.1
    """wrong_object: progress is scaled by clip(distance to the wrong object / this, 0, 1), m."""
    center_radius: float = 0.015
    """missed_grasp: the ``center`` stage is done within this of the target centre, m."""
    secure_height: float = 0.03
    """dropped: the ``secure`` stage is done when the target is this far above its rest height, m."""
    align_tolerance: float = 0.02
    """misplaced: ``align_goal`` is done when the target is this close to the goal horizontally, m."""
    above_clearance: float = 0.05
    """knocked_over: ``<stage>_above`` is done with the tool this far above the object, m."""

    def __post_init__(self) -> None:
        """Check ranges."""
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"Text2PotentialConfig.gamma={self.gamma} must be in (0, 1]")
        for name in ("guard_radius", "center_radius", "secure_height", "align_tolerance", "above_clearance"):
            if not 0.0 < getattr(self, name) < 0.5:
                raise ValueError(f"Text2PotentialConfig.{name}={getattr(self, name)} must be in (0, 0.5) m")


@dataclass(frozen=True)
class StageSpec:
    """One stage (``coda_msgs/PotentialStage``)."""

    name: str
    """Stage name."""
    progress: str
    """Progress expression."""
    done: str
    """Completion predicate."""

    def to_dict(self) -> dict[str, Any]:
        """Fields of ``coda_msgs/PotentialStage``."""
        return {"name": self.name, "progress": self.progress, "done": self.done}

    def source(self) -> str:
        """Return the stage in the potential language."""
        return f"stage {self.name}:\n  progress = {self.progress}\n  done     = {self.done}\n"


@dataclass
class ProgramSpec:
    """A compiled staged potential program (``coda_msgs/PotentialProgram``)."""

    program_id: str
    """``pp-`` + sha256 prefix of family and source."""
    family: str
    """Task family it was written for."""
    stages: list[StageSpec]
    """K >= 1 stages."""
    gamma: float
    """Shaping discount."""
    source: str
    """Program text as compiled."""
    layout: dict[str, tuple[int, int]]
    """Observation layout it was compiled against."""
    source_diagnosis_id: str = ""
    """Diagnosis that produced it; empty for a family's default program."""
    translator: str = "default"
    """One of ``TRANSLATORS``."""
    parsed: dict[str, str] = field(default_factory=dict)
    """What the grammar read from the text (mode, stage, objects); not part of the message."""

    def compile(self) -> PotentialProgram:
        """Compile again (programs are plain data; compiling takes microseconds)."""
        return PotentialProgram.compile(self.source, self.layout)

    def to_dict(self) -> dict[str, Any]:
        """Fields of ``coda_msgs/PotentialProgram`` (header stamp zero)."""
        layout = sorted(self.layout.items(), key=lambda kv: (kv[1][0], kv[0]))
        return {
            "header": {"stamp": {"sec": 0, "nanosec": 0}, "frame_id": ""},
            "program_id": self.program_id,
            "family": self.family,
            "stages": [s.to_dict() for s in self.stages],
            "gamma": float(self.gamma),
            "source": self.source,
            "layout": [{"name": n, "offset": int(o), "length": int(k)} for n, (o, k) in layout],
            "source_diagnosis_id": self.source_diagnosis_id,
            "translator": self.translator,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProgramSpec:
        """Inverse of :meth:`to_dict` (``parsed`` is not carried)."""
        return cls(program_id=str(data["program_id"]), family=str(data["family"]),
                   stages=[StageSpec(str(s["name"]), str(s["progress"]), str(s["done"])) for s in data["stages"]],
                   gamma=float(data["gamma"]), source=str(data["source"]),
                   layout={str(e["name"]): (int(e["offset"]), int(e["length"])) for e in data["layout"]},
                   source_diagnosis_id=str(data["source_diagnosis_id"]), translator=str(data["translator"]))


@dataclass(frozen=True)
class Reject:
    """A program that was not emitted, with the reason (the compiler's error when it did not compile)."""

    diagnosis_id: str
    """Diagnosis whose translation failed."""
    translator: str
    """Translator that produced the source."""
    source: str
    """The rejected source (empty when the text could not be read)."""
    line: int
    """1-based line of the compile error (0 when not a compile error)."""
    column: int
    """1-based column of the compile error (0 when not a compile error)."""
    message: str
    """The problem."""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for logs and memory."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Parsed:
    """What the grammar read from a diagnosis text."""

    mode: str
    """Failure mode."""
    stage: int
    """Failed stage index in the family's stage library."""
    objects: tuple[str, ...]
    """Object names mentioned, in order of first mention."""


def _stages(family: str) -> list[StageSpec]:
    return [StageSpec(n, p, d) for n, p, d in stage_library(family)]


def program_id(family: str, source: str) -> str:
    """``pp-`` + 12 hex digits of sha256(family, source)."""
    return "pp-" + hashlib.sha256(f"{family}\n{source}".encode()).hexdigest()[:12]


def compile_checked(source: str, family: str, layout: Layout | None = None, *, diagnosis_id: str = "",
                    translator: str = "grammar", gamma: float = 0.99) -> ProgramSpec | Reject:
    """Compile ``source``; return the program, or a :class:`Reject` with the compiler's error.

    Every translator (grammar or model) emits through this gate.
    """
    if translator not in TRANSLATORS:
        raise ValueError(f"translator={translator!r} is not one of {TRANSLATORS}")
    lay = {k: (int(o), int(n)) for k, (o, n) in (layout or LAYOUT).items()}
    try:
        compiled = PotentialProgram.compile(source, lay)
    except PotentialError as error:
        return Reject(diagnosis_id, translator, source, int(error.line), int(error.column), str(error.message))
    stages = [StageSpec(str(n), str(p), str(d)) for n, p, d in compiled.stages]
    return ProgramSpec(program_id=program_id(family, source), family=family, stages=stages, gamma=gamma,
                       source=source, layout=lay, source_diagnosis_id=diagnosis_id, translator=translator)


def default_program(family: str, gamma: float = 0.99) -> ProgramSpec:
    """Return the family's stage library as a program (translator ``default``)."""
    result = compile_checked(get_family(family).program, family, translator="default", gamma=gamma)
    assert isinstance(result, ProgramSpec), f"the {family} default program does not compile: {result}"
    return result


def parse(text: str, family: str, object_names: Sequence[str] = ()) -> Parsed:
    """Read mode, failed stage and mentioned objects from ``text`` (the grammar; see the module docstring)."""
    lowered = text.lower()
    best: tuple[int, str] | None = None
    for mode, pattern in MODE_PATTERNS.items():
        match = re.search(pattern, lowered)
        if match and (best is None or match.start() < best[0]):
            best = (match.start(), mode)
    if best is None:
        raise TranslationError(f"no failure mode recognised in the text {text[:80]!r}")
    mode = best[1]
    names = [n for n, _, _ in stage_library(family)]
    stage = -1
    for match in re.finditer(r"\bthe (\w+) stage\b", lowered):
        if match.group(1) in names:
            stage = names.index(match.group(1))
            break
    if stage < 0:
        match = re.search(r"\bstage (\d+) of (\d+)\b", lowered)
        if match and 1 <= int(match.group(1)) <= len(names):
            stage = int(match.group(1)) - 1
    if stage < 0:
        stage = _default_stage(mode, names)
    mentioned = sorted({n for n in object_names if re.search(rf"\b{re.escape(n.lower())}\b", lowered)},
                       key=lambda n: lowered.index(n.lower()))
    return Parsed(mode=mode, stage=stage, objects=tuple(mentioned))


def _default_stage(mode: str, names: list[str]) -> int:
    """Stage a mode points at when the text names none."""
    if mode == MODE_MISSED_GRASP and "grasp" in names:
        return names.index("grasp")
    if mode == MODE_DROPPED and "lift" in names:
        return names.index("lift")
    if mode in (MODE_MISPLACED, MODE_TIMED_OUT):
        return len(names) - 1
    return 0


def _focus(stage: StageSpec) -> str:
    """Return the object position a stage is about: the target's unless only the goal's appears."""
    text = stage.progress + " " + stage.done
    return "goal_pos" if "goal_pos" in text and "target_pos" not in text else "target_pos"


def _split_half(stage: StageSpec) -> list[StageSpec]:
    first = StageSpec(f"{stage.name}_half", f"clip(2 * ({stage.progress}), 0, 1)",
                      f"({stage.progress}) >= 0.5 or ({stage.done})")
    return [first, stage]


class Text2Potential:
    """The default (grammar) translator; see the module docstring."""

    translator = "grammar"

    def __init__(self, config: Text2PotentialConfig | None = None) -> None:
        """Keep the settings."""
        self.config = config or Text2PotentialConfig()

    def translate(self, diagnosis: Diagnosis, layout: Layout | None = None) -> ProgramSpec | Reject:
        """Program for one diagnosis (its text and family), compiled against ``layout`` (default ``LAYOUT``)."""
        lay = layout or LAYOUT
        objects = [k[:-4] for k in lay if k.endswith("_pos") and not k.startswith(("obj", "ee_", "target_", "goal_"))]
        try:
            parsed = parse(diagnosis.text, diagnosis.family, objects)
        except (TranslationError, ValueError) as error:
            return Reject(diagnosis.diagnosis_id, self.translator, "", 0, 0, str(error))
        if parsed.mode == MODE_SUCCESS:
            program = default_program(diagnosis.family, self.config.gamma)
            program.source_diagnosis_id = diagnosis.diagnosis_id
            program.parsed = {"mode": parsed.mode}
            return program
        target = diagnosis.target_object
        other = next((o for o in parsed.objects if o != target), "")
        stages = self.rewrite(diagnosis.family, parsed.mode, parsed.stage, other if other + "_pos" in lay else "")
        source = "".join(s.source() for s in stages)
        result = compile_checked(source, diagnosis.family, lay, diagnosis_id=diagnosis.diagnosis_id,
                                 translator=self.translator, gamma=self.config.gamma)
        if isinstance(result, ProgramSpec):
            names = [n for n, _, _ in stage_library(diagnosis.family)]
            result.parsed = {"mode": parsed.mode, "stage": names[parsed.stage], "other_object": other}
        return result

    def translate_all(self, diagnoses: Sequence[Diagnosis], layout: Layout | None = None
                      ) -> tuple[list[ProgramSpec], list[Reject]]:
        """Translate every diagnosis; return the programs and the rejects."""
        programs: list[ProgramSpec] = []
        rejects: list[Reject] = []
        for d in diagnoses:
            result = self.translate(d, layout)
            (programs if isinstance(result, ProgramSpec) else rejects).append(result)  # type: ignore[arg-type]
        return programs, rejects

    def rewrite(self, family: str, mode: str, failed: int, other_object: str = "") -> list[StageSpec]:
        """Return the family's stages rewritten for ``mode`` at stage index ``failed`` (module docstring table)."""
        cfg = self.config
        stages = _stages(family)
        names = [s.name for s in stages]
        if not 0 <= failed < len(stages):
            raise ValueError(f"failed stage {failed} outside the {family} stage library {names}")
        stage = stages[failed]
        if mode in (MODE_NEVER_APPROACHED, MODE_TIMED_OUT):
            return stages[:failed] + _split_half(stage) + stages[failed + 1:]
        if mode == MODE_WRONG_OBJECT:
            if other_object:
                away = f"clip(dist(ee_pos, {other_object}_pos) / {cfg.guard_radius:g}, 0, 1)"
            else:  # every distractor slot; absent slots (present = 0) do not count
                terms = [f"clip(dist(ee_pos, obj{i}_pos) / {cfg.guard_radius:g} + 1 - obj{i}_present, 0, 1)"
                         for i in range(2, MAX_OBJECTS)]
                away = f"min({', '.join(terms)})"
            guarded = StageSpec(stage.name, f"clip({stage.progress}, 0, 1) * {away}", stage.done)
            return [*stages[:failed], guarded, *stages[failed + 1:]]
        if mode == MODE_MISSED_GRASP:
            at = names.index("grasp") if "grasp" in names else failed
            center = StageSpec("center", f"1 - clip(dist(ee_pos, target_pos) / {cfg.center_radius * 4:g}, 0, 1)",
                               f"dist(ee_pos, target_pos) < {cfg.center_radius:g} or ({stages[at].done})")
            return [*stages[:at], center, *stages[at:]]
        if mode == MODE_DROPPED:
            at = names.index("lift") if "lift" in names else failed
            hold = "(1 - clip((dist(ee_pos, target_pos) - 0.03) / 0.05, 0, 1))"
            secure = StageSpec("secure", f"clip((target_pos.z - target_size.z) / {cfg.secure_height:g}, 0, 1) * {hold}",
                               f"(target_pos.z > target_size.z + {cfg.secure_height:g} and dist(ee_pos, target_pos) < "
                               f"0.03) or ({stages[at].done})")
            lift = StageSpec(stages[at].name, f"clip({stages[at].progress}, 0, 1) * {hold}", stages[at].done)
            return [*stages[:at], secure, lift, *stages[at + 1:]]
        if mode == MODE_MISPLACED:
            align = StageSpec("align_goal", "1 - clip(dist_xy(target_pos, goal_pos) / 0.4, 0, 1)",
                              f"dist_xy(target_pos, goal_pos) < {cfg.align_tolerance:g} or ({stage.done})")
            return [*stages[:failed], align, *stages[failed:]]
        if mode == MODE_KNOCKED_OVER:
            focus = _focus(stage)
            above = StageSpec(f"{stage.name}_above", f"1 - clip(dist_xy(ee_pos, {focus}) / 0.4, 0, 1)",
                              f"(dist_xy(ee_pos, {focus}) < 0.02 and ee_pos.z > {focus}.z + {cfg.above_clearance:g})"
                              f" or ({stage.done})")
            return [*stages[:failed], above, *stages[failed:]]
        raise ValueError(f"no rewrite rule for failure mode {mode!r}")


@dataclass
class TrainingPlan:
    """A round's training program (``coda_msgs/TrainingProgram``) and the translations that were rejected."""

    program_id: str
    """Unique id."""
    round: int
    """Round whose training it drives."""
    potentials: list[ProgramSpec]
    """At most one program per family."""
    sft_epochs: int
    """Behaviour-cloning epochs (0 = skip)."""
    rl_env_steps: int
    """PPO environment steps with the shaped reward (0 = skip)."""
    cause_diagnosis_ids: list[str]
    """Diagnoses that produced the potentials."""
    text: str
    """Explanation."""
    rejects: list[Reject] = field(default_factory=list)
    """Translations that did not compile or could not be read (not part of the message)."""

    def to_dict(self) -> dict[str, Any]:
        """Fields of ``coda_msgs/TrainingProgram`` (header stamp zero)."""
        return {"header": {"stamp": {"sec": 0, "nanosec": 0}, "frame_id": ""}, "program_id": self.program_id,
                "round": int(self.round), "potentials": [p.to_dict() for p in self.potentials],
                "sft_epochs": int(self.sft_epochs), "rl_env_steps": int(self.rl_env_steps),
                "cause_diagnosis_ids": list(self.cause_diagnosis_ids), "text": self.text}


def training_plan(diagnoses: Sequence[Diagnosis], round_index: int, *, sft_epochs: int = 1, rl_env_steps: int = 0,
                  translator: Text2Potential | None = None, layout: Layout | None = None) -> TrainingPlan:
    """One potential per family: the translation of its most frequent failure (mode, stage) in ``diagnoses``.

    The diagnoses sharing that (mode, stage) are the causes; when the first one's text does not translate,
    the next is tried, and every failed attempt is kept in ``rejects``. Families without failures keep
    their default program (not listed).
    """
    translator = translator or Text2Potential()
    groups: dict[str, dict[tuple[str, int], list[Diagnosis]]] = {}
    for d in diagnoses:
        if d.is_failure:
            groups.setdefault(d.family, {}).setdefault((d.failure_mode, d.failed_stage), []).append(d)
    potentials: list[ProgramSpec] = []
    causes: list[str] = []
    lines: list[str] = []
    rejects: list[Reject] = []
    for family in sorted(groups):
        (mode, _), members = max(groups[family].items(), key=lambda kv: (len(kv[1]), kv[0]))
        for d in members:
            result = translator.translate(d, layout)
            if isinstance(result, Reject):
                rejects.append(result)
                continue
            potentials.append(result)
            causes += [m.diagnosis_id for m in members]
            stages = " -> ".join(s.name for s in result.stages)
            lines.append(f"{family}: {len(members)} x {mode} at stage {d.failed_stage_name}; shaped by {stages}")
            break
    digest = hashlib.sha256("\n".join(p.program_id for p in potentials).encode()).hexdigest()[:10]
    return TrainingPlan(program_id=f"tp-r{round_index:03d}-{digest}", round=round_index, potentials=potentials,
                        sft_epochs=sft_epochs, rl_env_steps=rl_env_steps, cause_diagnosis_ids=causes,
                        text="; ".join(lines) or "no failures: default programs", rejects=rejects)
