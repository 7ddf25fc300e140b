# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What each step of a round returns: typed results, stored in memory and read back as the same types.

    done = loop.output(r, GenerateResult)              # this process's result, or after a resume memory's
    done.scene_ids, done.probe_ids
    store.finish_step(r, done)                         # written as JSON with its ``schema``
    store.finished_step(r, EvaluateResult)             # -> EvaluateResult | None

One class per step (``STEP`` is its name in ``coda_loop.rounds.ROUND_STEPS``) and one per part a step nests
(the BC gate, the PPO stage, corrective statistics, the learned critic's round, ...). Each step result carries a
``SCHEMA`` number; the stored JSON holds it under ``"schema"``:

- the current schema is read strictly: an unknown field or a missing required one is an error naming it;
- schema 0 is what runs wrote before results were typed (no ``"schema"`` key): read leniently (fields this code
  does not know are dropped, missing optional ones take their defaults) and moved to the current layout by
  :meth:`StepResult.migrate`;
- a schema newer than the code's is refused with both numbers (the run was written by newer code).

Pure module: no rclpy, no torch.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="Part")
S = TypeVar("S", bound="StepResult")


class StepResultError(ValueError):
    """A stored step result this code cannot read (names the step, the field and what is wrong)."""


def _plain(value: Any) -> Any:
    """``value`` as JSON types: parts as dicts, tuples as lists."""
    if isinstance(value, Part):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _part_type(hint: Any) -> type[Part] | None:
    """Return the ``Part`` class of a field typed ``P`` or ``P | None``, else None."""
    if isinstance(hint, type) and issubclass(hint, Part):
        return hint
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        return _part_type(args[0])
    return None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """Return the resolved field types of a part class (resolved once per class, not per record read)."""
    return typing.get_type_hints(cls)


def _read(hint: Any, value: Any, where: str, strict: bool) -> Any:
    part = _part_type(hint)
    if part is not None and value is not None:
        return part.from_dict(value, where, strict=strict)
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint) or (Any,)
        inner = _part_type(item)
        if inner is not None:
            if not isinstance(value, list):
                raise StepResultError(f"{where}: expected a list, got {type(value).__name__}")
            return [inner.from_dict(v, f"{where}[{i}]", strict=strict) for i, v in enumerate(value)]
    return value


@dataclass(kw_only=True)
class Part:
    """A typed record of JSON fields: ``to_dict`` / ``from_dict`` by field (nested parts included)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the record as JSON types."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls: type[R], data: Any, where: str = "", *, strict: bool = True) -> R:
        """Read a record; ``StepResultError`` naming ``where`` and the field when it does not fit.

        ``strict`` False (records of schema 0) drops fields this class does not have.
        """
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise StepResultError(f"{where}: expected an object, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown and strict:
            raise StepResultError(f"{where}: unknown field(s) {unknown}")
        hints = _hints(cls)
        kwargs = {}
        for name, f in known.items():
            if name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise StepResultError(f"{where}: required field {name!r} is missing")
                continue
            kwargs[name] = _read(hints[name], data[name], f"{where}.{name}", strict)
        return cls(**kwargs)


@dataclass(kw_only=True)
class StepResult(Part):
    """What one step returned. ``STEP``: the step's name; ``SCHEMA``: the layout's version (module docstring)."""

    STEP: ClassVar[str] = ""
    SCHEMA: ClassVar[int] = 1

    def to_dict(self) -> dict[str, Any]:
        """Return the result as JSON types, with its ``schema``."""
        return {**super().to_dict(), "schema": self.SCHEMA}

    @classmethod
    def migrate(cls, data: dict[str, Any], schema: int) -> dict[str, Any]:
        """Move a record of an older ``schema`` to the current layout (the base class changes nothing)."""
        return data

    @classmethod
    def read(cls: type[S], data: Any, where: str = "") -> S:
        """Read a stored result of any schema up to ``SCHEMA`` (see the module docstring)."""
        where = where or f"step {cls.STEP!r}"
        if not isinstance(data, dict):
            raise StepResultError(f"{where}: expected an object, got {type(data).__name__}")
        schema = data.get("schema", 0)
        if not isinstance(schema, int) or schema < 0:
            raise StepResultError(f"{where}: schema must be a non-negative integer, got {schema!r}")
        if schema > cls.SCHEMA:
            raise StepResultError(f"{where}: written with schema {schema}, this code reads up to {cls.SCHEMA} "
                                  "(the run comes from newer code)")
        body = {k: v for k, v in data.items() if k != "schema"}
        if schema < cls.SCHEMA:
            body = cls.migrate(body, schema)
        return cls.from_dict(body, where, strict=schema == cls.SCHEMA)


# ---------------------------------------------------------------------------------------------------- generate
@dataclass(kw_only=True)
class GenerateResult(StepResult):
    """The generate step: the round's scenes (ids in memory) and how they were made."""

    STEP: ClassVar[str] = "generate"
    program_id: str
    """The generation program the scenes were drawn for."""
    scene_ids: list[str]
    """Generated (and replayed) scenes, in program order: the policy's episodes and the round's demonstrations."""
    probe_ids: list[str]
    """The fixed probe scenes (``probe_per_family`` per family), run and diagnosed but never demonstrated."""
    unmet: int = 0
    """Scenes accepted after ``MATCH_ATTEMPTS`` draws without meeting their allocation's conditions."""
    families: dict[str, int] = field(default_factory=dict)
    """Scenes per family (replays included)."""
    replayed_scenes: int = 0
    """Stored scenes played again (scene replay from memory)."""
    generator: str = ""
    """Where the scenes were generated: ``in_process`` or the ``GenerateScenes`` service used."""
    edited_scenes: dict[str, int] = field(default_factory=dict)
    """Of the replays, scenes edited along their diagnosed failure, per edit (``GenerationConfig.edit_replays``)."""
    unedited_replays: int = 0
    """Replays that asked for an edit but were played exactly (no edit gave a scene the expert solves)."""


# ---------------------------------------------------------------------------------------------------- episodes
@dataclass(kw_only=True)
class RealArmsRound(Part):
    """The real arms' part of an episodes step (``coda run --arms``)."""

    by_source: dict[str, dict[str, Any]]
    """``sim`` / ``real``: episodes and success."""
    by_robot: dict[str, dict[str, Any]]
    """Per robot: episodes, successes, unfinished, seconds, success."""
    real_allocation: dict[str, int] = field(default_factory=dict)
    """Episodes each arm (namespace) was given this round."""
    arm_notes: dict[str, str] = field(default_factory=dict)
    """Why an arm ran fewer episodes than allocated (unavailable, gate, faults)."""
    unfinished_ids: list[str] = field(default_factory=list)
    """Episodes an arm started and did not finish (stored, not scored)."""
    intervention_ids: list[str] = field(default_factory=list)
    """Safety interventions stored this round."""


@dataclass(kw_only=True)
class EpisodesResult(StepResult):
    """The episodes step: the acting policy on the round's scenes."""

    STEP: ClassVar[str] = "episodes"
    version: str
    """The policy version that acted."""
    episode_ids: list[str]
    """Finished episodes (in memory), scenes' order."""
    success: float
    """Success over the finished episodes."""
    by_family: dict[str, float] = field(default_factory=dict)
    """Success per family."""
    remote: dict[str, int] = field(default_factory=dict)
    """Episodes per ``sim_bridge`` worker namespace of the domain."""
    real_arms: RealArmsRound | None = None
    """With real arms in the fleet: their part."""

    @classmethod
    def migrate(cls, data: dict[str, Any], schema: int) -> dict[str, Any]:
        """Move the real arms' fields, at the top level in schema 0, into ``real_arms``."""
        keys = [f.name for f in dataclasses.fields(RealArmsRound)]
        if schema == 0 and "by_source" in data:
            data = {**{k: v for k, v in data.items() if k not in keys},
                    "real_arms": {k: data[k] for k in keys if k in data}}
        return data


# ---------------------------------------------------------------------------------------------------- diagnose
@dataclass(kw_only=True)
class Recall(Part):
    """One earlier failure memory recalled for a failure of this round, and what its generation changed."""

    diagnosis_id: str
    similar: str
    """The most similar earlier diagnosis."""
    score: float
    """Cosine similarity of the two texts."""
    effect: dict[str, Any] = field(default_factory=dict)
    """``MemoryStore.generation_effect`` of the earlier diagnosis."""


@dataclass(kw_only=True)
class CriticFineTune(Part):
    """A fine-tuning of the learned critic on the grounded labels (``grounded+learned``)."""

    parent: str
    round: int
    train_examples: int
    held_out_examples: int
    held_out_mode_accuracy_before: float
    held_out_mode_accuracy_after: float
    kept: bool
    """The copy became the next version (it agreed at least as often on the held-out episodes)."""
    seconds: float = 0.0


@dataclass(kw_only=True)
class LearnedCriticRound(Part):
    """The learned critic's part of a ``grounded+learned`` diagnose step."""

    version: str
    """The acting version."""
    agreement: dict[str, float]
    """``coda_critic.learned.agreement`` with the grounded diagnoses of the round's episodes."""
    episode_ids: list[str] = field(default_factory=list)
    verdicts: list[list[Any]] = field(default_factory=list)
    """Per episode: [failure mode, failed stage] of the learned critic."""
    next_version: str = ""
    """The version acting next round."""
    next_folder: str = ""
    """Its folder relative to the run folder ("" for the starting critic, outside the run)."""
    fine_tune: CriticFineTune | None = None


@dataclass(kw_only=True)
class DiagnoseResult(StepResult):
    """The diagnose step: the critic's diagnoses of the round's episodes (ids in memory)."""

    STEP: ClassVar[str] = "diagnose"
    diagnosis_ids: list[str]
    """Every diagnosis, simulated episodes first, then real arms' ones."""
    skipped: str = ""
    """Why there was nothing to diagnose (methods without the critic)."""
    failures: int = 0
    modes: dict[str, int] = field(default_factory=dict)
    """Diagnoses per failure mode."""
    critic: str = ""
    """The steering critic's name."""
    critic_version: str = ""
    """Its version id in memory (``grounded-<hash>``, a learned version, or ``<backend>@<service>``)."""
    recalled: list[Recall] = field(default_factory=list)
    real_diagnosis_ids: list[str] = field(default_factory=list)
    """The real arms' diagnoses (learned critic)."""
    learned: LearnedCriticRound | None = None


# ---------------------------------------------------------------------------------------------------- programs
@dataclass(kw_only=True)
class AllocationSummary(Part):
    """One line of the next round's generation program, short."""

    kind: str
    family: str
    conditions: list[str]
    """``key=value`` conditions after the family's."""
    count: int


@dataclass(kw_only=True)
class ProgramsResult(StepResult):
    """The programs step: the training program of this round and the generation program of the next."""

    STEP: ClassVar[str] = "programs"
    failure_rate: dict[str, float]
    """Per family, of the round's episodes."""
    rl_family: str = ""
    """The family PPO trains on this round ("" for none)."""
    generation_program_id: str = ""
    """Next round's generation program (methods with the critic)."""
    training_program_id: str = ""
    potentials: dict[str, str] = field(default_factory=dict)
    """Family -> potential program id (Text2potential)."""
    rejects: int = 0
    """Potential programs the translator's checks rejected."""
    rl_stage: int = 0
    """The diagnosed stage PPO episodes start at."""
    allocations: list[AllocationSummary] = field(default_factory=list)

    @classmethod
    def migrate(cls, data: dict[str, Any], schema: int) -> dict[str, Any]:
        """Turn schema 0's [kind, family, conditions, count] allocation lists into records."""
        if schema == 0 and data.get("allocations"):
            data = {**data, "allocations": [dict(zip(("kind", "family", "conditions", "count"), a, strict=True))
                                            if isinstance(a, list) else a for a in data["allocations"]]}
        return data


# ---------------------------------------------------------------------------------------------------- train
@dataclass(kw_only=True)
class CorrectiveStats(Part):
    """Corrective demonstrations of a round (``corrective_relabel`` / ``corrective: true`` methods)."""

    failed_scenes: int = 0
    """Scenes the policy failed with a diagnosed failed stage (the expert took over)."""
    recovered: int = 0
    """Of them, scenes the expert finished from the takeover."""
    relabelled_successes: int = 0
    expert_from_start: int = 0
    """Scenes demonstrated from their start."""
    by_mode: dict[str, int] = field(default_factory=dict)
    """``<failure mode>:recovered|not_recovered`` counts."""
    takeover_steps: list[int] = field(default_factory=list)
    corrective_steps: int = 0
    relabelled_steps: int = 0
    margin: int = 0
    """``corrective_margin``: control steps before the failed stage's entry at which the expert took over."""
    relabel: int = 0
    """``corrective_relabel``: policy steps before the takeover kept, labelled by the expert."""
    beside_start: bool = False
    """``corrective_beside_start``: every scene also kept its demonstration from the start."""


@dataclass(kw_only=True)
class BCGate(Part):
    """The round's BC update against the policy it started from, on the same new ``id`` scenes."""

    before: float
    """Mean success over families of the policy the update started from."""
    after: float
    """The same of the update."""
    kept: bool
    """``after >= before - bc_gate_tolerance``: the update became the round's policy."""
    per_family_before: dict[str, float] = field(default_factory=dict)
    per_family_after: dict[str, float] = field(default_factory=dict)
    episodes_per_family: int = 0
    """``bc_gate_episodes``: new scenes per family both were scored on."""


@dataclass(kw_only=True)
class RLResult(Part):
    """The round's PPO stage, kept only for a gain on new scenes of its family."""

    version: str
    family: str
    shaped: bool
    """Text2potential shaping (else the sparse reward)."""
    start_stage: int = 0
    """The stage a share (``rl_stage_share``) of its episodes started at."""
    program: str = ""
    """First line of the potential program."""
    success_before: float = 0.0
    """Success on new scenes of the family before PPO (``rl_eval_episodes``)."""
    success_after: float = 0.0
    kept: bool = False
    """PPO's version became the round's policy (a gain, or no eval episodes configured)."""
    seconds: float = 0.0
    success_demos: int = 0
    """Successful rollout episodes kept as demonstrations for later rounds (``rl_success_demos``)."""
    env_steps: int = 0
    """Environment steps PPO simulated (0 in records made before it was recorded)."""
    eval_episodes: int = 0
    """Episodes of the gate, each of the policy before and after (0 in records made before it was recorded)."""
    learner: str = "ppo"
    """``LoopConfig.rl_learner``: ``ppo`` or ``residual`` (its ``shaped`` means the critics were warmed up on the
    potential: staged value learning)."""


@dataclass(kw_only=True)
class TrainResult(StepResult):
    """The train step: round 0's SFT policy, or a round's BC update (and PPO stage)."""

    STEP: ClassVar[str] = "train"
    version: str
    """The policy the next round acts with (the BC or PPO version if kept, else the parent)."""
    new_demos: int = 0
    """Demonstrations added this round."""
    seconds: float = 0.0
    demos: list[str] = field(default_factory=list)
    """Round 0: the demonstration files."""
    bc_version: str = ""
    """The BC update trained this round (kept or not)."""
    new_steps: int = 0
    demo_episodes: int = 0
    """Demonstrations BC trained on (every round so far)."""
    bc_val_loss: float | None = None
    new_demo_steps: int | None = None
    """Samples of this round's demonstrations (with ``focus_share``)."""
    focus_share: float = 0.0
    corrective: CorrectiveStats | None = None
    bc_gate: BCGate | None = None
    rl: RLResult | None = None


# ---------------------------------------------------------------------------------------------------- evaluate
@dataclass(kw_only=True)
class Score(Part):
    """One policy on the suites of one kind (test or validation)."""

    rates: dict[str, dict[str, float]]
    """Split -> family -> success."""
    per_split: dict[str, float]
    ood: float
    """Mean over the OOD splits present (NaN without any)."""
    episodes_per_family: dict[str, int]
    """Episodes per family, per split."""
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    """Split -> scene id -> 1/0: what paired comparisons resample."""


@dataclass(kw_only=True)
class EvaluateResult(Score, StepResult):
    """The evaluate step: the round's policy on the test suites (and the validation suites)."""

    STEP: ClassVar[str] = "evaluate"
    version: str
    validation: Score | None = None
    reused_from: str = ""
    """Round 0 of a run started from ``base_from``: the base run whose scores are reused."""


STEP_RESULTS: dict[str, type[StepResult]] = {
    cls.STEP: cls for cls in (TrainResult, GenerateResult, EpisodesResult, DiagnoseResult, ProgramsResult,
                              EvaluateResult)}
"""Step name -> its result class."""

