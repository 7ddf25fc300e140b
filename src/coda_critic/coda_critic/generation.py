# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Generation programs: how the next round's scene budget is spent, decided from diagnoses.

:meth:`GenerationPlanner.plan` splits the budget three ways:

* **targeted**: every failed diagnosis is assigned to one condition group (family + one condition
  such as ``position_region=left_far``): among the groups it belongs to with at least ``min_support``
  failures, the one with the highest failure rate (``target_rule="failure_rate"``) or, with
  ``learning_potential``, the one whose success rate s maximises s (1 - s) among those solved at least once
  (ties: more failures, then ``condition_keys`` order); without such a group, its family alone. Groups get
  scenes in proportion to the failures assigned to them, and each allocation lists exactly those diagnoses as
  its causes.
* **scene replay** (with memory): scenes of earlier rounds that the policy failed at its latest attempt
  are played again, exactly (``Condition("scene", <scene id>)``), so a failure is revisited by the
  improved policy (and, with corrective demonstrations, demonstrated from where that policy fails now).
  ``replay`` candidates come from memory (:func:`replay_candidates`); the highest priorities are taken
  (prioritised level replay: failure rate over the attempts, plus ``staleness_weight`` times the rounds
  since the scene was last played, normalised); a scene failed ``max_scene_attempts`` times is given up.
  Causes are the scene's failed diagnoses. Unused share goes to the targeted scenes. With ``edit_replays``
  the scene is not played exactly but edited one small step along its latest diagnosed failure
  (``Condition("edit", <operators>)``, the operators of :data:`EDITS_FOR_MODE` in the order to try; the loop
  applies the first that gives a valid scene, :mod:`coda_engine.sim.edits`, else plays it exactly).
* **replay**: conditions that failed before (``history``: failure rate >= ``failing_rate``) and now
  pass (failure rate <= ``fixed_rate``) are replayed so nothing is forgotten; causes are the earlier
  failures and the current successes. Without such conditions the share replays the families that
  pass now (causes: those successes).
* **exploration**: spread evenly over all families with no condition fixed.

A closed loop without a critic plans from :class:`Outcome` records instead of diagnoses: each is an episode's
success flag with its scene's conditions (what the simulator knows without diagnosing anything), so its
targeted scenes follow the conditions with the highest failure rate, with no failure mode or stage behind them.

Only conditions the training vocabulary can generate are targeted (held-out colours, sizes,
phrasings or distractor counts of the OOD splits are never asked of the generator); such failures
still count for their family. :meth:`GenerationProgram.to_dict` fills ``coda_msgs/GenerationProgram``.
Pure module: no rclpy.
"""

from __future__ import annotations

import hashlib
import json
import types
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coda_critic.diagnosis import Condition, Diagnosis, scene_conditions
from coda_engine.sim.families import FAMILIES
from coda_engine.sim.scene import SHAPE_NAMES, Scene, SceneParams
from coda_engine.sim.vocab import load_vocabulary

KIND_TARGETED, KIND_EXPLORATION, KIND_REPLAY = "targeted", "exploration", "replay"
KINDS = (KIND_TARGETED, KIND_EXPLORATION, KIND_REPLAY)
TARGET_RULES = ("failure_rate", "learning_potential")
EDITS_FOR_MODE: Mapping[str, tuple[str, ...]] = types.MappingProxyType({
    "wrong_object": ("distractor_closer", "target_shift"),
    "knocked_over": ("distractor_closer", "target_shift"),
    "missed_grasp": ("target_yaw", "target_shift"),
    "dropped": ("target_mass", "target_shift"),
    "misplaced": ("goal_shift", "target_shift"),
    "never_approached": ("target_shift",),
    "timed_out": ("target_shift",),
})
"""Failure mode -> the scene edits that answer it, in the order to try (``coda_engine.sim.edits``): a wrong object
or a knocked one brings the distractor nearer; a missed grasp turns the target; a drop makes it heavier; a misplaced
one moves the goal; a target never reached, or reached too slowly, moves. A diagnosis reduced to pass/fail
(``timed_out``) only ever moves the target."""
REGIONS = tuple(f"{side}_{depth}" for side in ("left", "center", "right") for depth in ("near", "far"))


ROUND_BUDGET = 32
"""Scenes generated per round unless a run sets another number: the one default of ``LoopConfig.budget`` and of
the critic node's ``generation_budget`` (``loop.yaml``, ``critic.yaml`` and ``coda_sim.launch.py`` repeat it, and
a test holds them to it)."""

CODA_PLANNER: Mapping[str, float] = types.MappingProxyType(
    {"exploration_share": 0.75, "replay_share": 0.0, "scene_replay_share": 0.25})
"""How the critic's generation programs split a budget in the shipped design: three quarters from the broad training
distribution, one quarter replaying the scenes the current policy failed (by failures and staleness; a planner given
no ``replay`` candidates targets that quarter at the diagnosed conditions), no condition replay. The ``coda`` methods
of the loop (``coda_loop.config.METHOD_SPECS``) and the critic node's defaults (``critic.yaml``) use it. Chosen on the
bench's validation scenes (``docs/results.md``, "Memory's part"); :class:`GenerationConfig`'s own defaults (a fifth
explored, the rest targeted at diagnosed conditions and replayed) were 12 points below uniform generation there and
stay the closed-loop baseline's. Read-only: its users share it."""


@dataclass(frozen=True)
class GenerationConfig:
    """How a generation program is decided."""

    exploration_share: float = 0.2
    """Fraction of the budget drawn from the broad training distribution."""
    replay_share: float = 0.1
    """Fraction of the budget replaying conditions that were fixed."""
    min_support: int = 2
    """Failures a condition group needs before it is targeted on its own (else: the family)."""
    max_targeted: int = 8
    """Most targeted allocations (the groups with the fewest failures merge into their families)."""
    target_rule: str = "failure_rate"
    """Which of a failed episode's condition groups it is assigned to: ``failure_rate`` (the group with the highest
    failure rate) or ``learning_potential`` (the group whose success rate s maximises s (1 - s): conditions the
    policy solves sometimes; groups it never solved are not targeted on their own)."""
    rate_rounds: int = 1
    """Rounds of diagnoses the targeting's success rates are read from: the last round, and with memory up to
    ``rate_rounds - 1`` earlier ones (``recent`` of :meth:`GenerationPlanner.plan`), which steadies the rates of
    conditions a single round saw a few times. Only the last round's failures are assigned."""
    condition_keys: tuple[str, ...] = ("position_region", "num_distractors", "target_shape", "target_color",
                                       "phrasing", "target_size")
    """Condition keys that may be targeted, in tie-break order."""
    failing_rate: float = 0.5
    """A condition group of the history with at least this failure rate was failing."""
    fixed_rate: float = 0.2
    """A failing group is fixed when its current failure rate is at most this."""
    scene_replay_share: float = 0.25
    """Fraction of the budget replaying failed scenes of earlier rounds (needs ``replay`` candidates)."""
    edit_replays: bool = False
    """Scene replays play the failed scene edited one small step along its latest diagnosed failure
    (:data:`EDITS_FOR_MODE`) instead of exactly as it was."""
    max_scene_attempts: int = 3
    """A scene failed this many times is no longer replayed."""
    staleness_weight: float = 0.3
    """Weight of staleness (rounds since last played, over the largest such gap) in a scene's replay priority."""

    def __post_init__(self) -> None:
        """Check ranges and that the shares leave room for each other."""
        shares = (self.exploration_share, self.replay_share, self.scene_replay_share)
        if not (all(0 <= x <= 1 for x in shares) and sum(shares) <= 1):
            raise ValueError(f"GenerationConfig: exploration_share={self.exploration_share}, replay_share="
                             f"{self.replay_share} and scene_replay_share={self.scene_replay_share} must be in "
                             "[0, 1] with a sum <= 1")
        if self.max_scene_attempts < 1 or self.staleness_weight < 0:
            raise ValueError(f"GenerationConfig: max_scene_attempts={self.max_scene_attempts} must be >= 1 and "
                             f"staleness_weight={self.staleness_weight} >= 0")
        if self.target_rule not in TARGET_RULES:
            raise ValueError(f"GenerationConfig: target_rule={self.target_rule!r} must be one of {TARGET_RULES}")
        if self.min_support < 1 or self.max_targeted < 1 or self.rate_rounds < 1:
            raise ValueError(f"GenerationConfig: min_support={self.min_support}, max_targeted={self.max_targeted} and "
                             f"rate_rounds={self.rate_rounds} must be >= 1")
        if not 0 <= self.fixed_rate < self.failing_rate <= 1:
            raise ValueError(f"GenerationConfig: need 0 <= fixed_rate ({self.fixed_rate}) < failing_rate "
                             f"({self.failing_rate}) <= 1")


@dataclass
class BudgetAllocation:
    """One line of a generation program (``coda_msgs/BudgetAllocation``)."""

    kind: str
    """One of ``KINDS``."""
    family: str
    """Task family."""
    conditions: list[Condition]
    """Generator conditions to fix (``family`` first)."""
    count: int
    """Number of scenes."""
    cause_diagnosis_ids: list[str] = field(default_factory=list)
    """Diagnoses that caused this allocation (empty for exploration)."""
    reason: str = ""
    """One-line explanation."""

    def to_dict(self) -> dict[str, Any]:
        """Fields of ``coda_msgs/BudgetAllocation``."""
        return {"kind": self.kind, "family": self.family, "conditions": [c.to_dict() for c in self.conditions],
                "count": int(self.count), "cause_diagnosis_ids": list(self.cause_diagnosis_ids), "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BudgetAllocation:
        """Inverse of :meth:`to_dict`."""
        return cls(kind=str(data["kind"]), family=str(data["family"]),
                   conditions=[Condition.from_dict(c) for c in data["conditions"]], count=int(data["count"]),
                   cause_diagnosis_ids=[str(i) for i in data["cause_diagnosis_ids"]], reason=str(data["reason"]))


@dataclass
class GenerationProgram:
    """How a round's scene budget is spent (``coda_msgs/GenerationProgram``)."""

    program_id: str
    """Unique id."""
    round: int
    """Round whose scenes it generates."""
    budget: int
    """Total scenes; the sum of the allocation counts."""
    exploration_share: float
    """Fraction kept for exploration."""
    replay_share: float
    """Fraction kept for replay."""
    allocations: list[BudgetAllocation]
    """The lines."""

    def __post_init__(self) -> None:
        """Check that the counts add up to the budget."""
        total = sum(a.count for a in self.allocations)
        if total != self.budget:
            raise ValueError(f"GenerationProgram {self.program_id!r}: allocation counts sum to {total}, budget is "
                             f"{self.budget}")

    def to_dict(self) -> dict[str, Any]:
        """Fields of ``coda_msgs/GenerationProgram`` (header stamp zero)."""
        return {"header": {"stamp": {"sec": 0, "nanosec": 0}, "frame_id": ""}, "program_id": self.program_id,
                "round": int(self.round), "budget": int(self.budget),
                "exploration_share": float(self.exploration_share), "replay_share": float(self.replay_share),
                "allocations": [a.to_dict() for a in self.allocations]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GenerationProgram:
        """Inverse of :meth:`to_dict`."""
        return cls(program_id=str(data["program_id"]), round=int(data["round"]), budget=int(data["budget"]),
                   exploration_share=float(data["exploration_share"]), replay_share=float(data["replay_share"]),
                   allocations=[BudgetAllocation.from_dict(a) for a in data["allocations"]])

    def counts(self, kind: str) -> int:
        """Scenes of one kind."""
        return sum(a.count for a in self.allocations if a.kind == kind)


@dataclass(frozen=True)
class Outcome:
    """An episode's result with its scene's conditions: what a planner without a critic plans from.

    It offers the attributes the planner reads of a :class:`~coda_critic.diagnosis.Diagnosis`.
    """

    diagnosis_id: str
    """The episode's id (the record the allocation names as its cause)."""
    scene_id: str
    """The scene."""
    family: str
    """Its task family."""
    success: bool
    """Whether the episode succeeded."""
    conditions: tuple[Condition, ...] = ()
    """The scene's conditions (:func:`coda_critic.diagnosis.scene_conditions`)."""

    @property
    def is_failure(self) -> bool:
        """True when the episode failed."""
        return not self.success

    @property
    def failure_mode(self) -> str:
        """``failure`` or ``success`` (no critic says more)."""
        return "failure" if not self.success else "success"

    def condition(self, key: str, default: str = "") -> str:
        """Return the value of condition ``key`` (``default`` if absent)."""
        return next((c.value for c in self.conditions if c.key == key), default)

    @classmethod
    def of(cls, episode_id: str, scene: Scene, success: bool) -> Outcome:
        """Return the outcome of an episode in ``scene``."""
        return cls(episode_id, scene.scene_id, scene.family, bool(success), tuple(scene_conditions(scene)))


@dataclass(frozen=True)
class ReplayCandidate:
    """A scene played in earlier rounds, with its record (from memory)."""

    scene_id: str
    """The scene."""
    family: str
    """Its task family."""
    attempts: int
    """Episodes diagnosed on it."""
    failures: int
    """How many of them failed."""
    last_round: int
    """Round it was last played in."""
    last_failed: bool
    """Whether its latest attempt failed."""
    failed_diagnosis_ids: tuple[str, ...]
    """Its failed diagnoses (the causes of a replay)."""
    last_mode: str = ""
    """Failure mode of its latest failed diagnosis ("" if it never failed)."""


def replay_candidates(history: Sequence[tuple[int, Diagnosis]]) -> list[ReplayCandidate]:
    """Per scene of ``history`` ((round, diagnosis) pairs, any order): its attempts, failures and latest result."""
    by_scene: dict[str, list[tuple[int, Diagnosis]]] = defaultdict(list)
    for round_index, d in history:
        by_scene[d.scene_id].append((round_index, d))
    out = []
    for scene_id, rows in sorted(by_scene.items()):
        rows.sort(key=lambda row: row[0])
        out.append(ReplayCandidate(scene_id=scene_id, family=rows[-1][1].family, attempts=len(rows),
                                   failures=sum(d.is_failure for _, d in rows), last_round=rows[-1][0],
                                   last_failed=rows[-1][1].is_failure,
                                   failed_diagnosis_ids=tuple(d.diagnosis_id for _, d in rows if d.is_failure),
                                   last_mode=next((d.failure_mode for _, d in reversed(rows) if d.is_failure), "")))
    return out


def trainable(key: str, value: str) -> bool:
    """Tell whether the training vocabulary (split ``id``) can generate condition ``key=value``."""
    vocab = load_vocabulary("id")
    if key == "position_region":
        return value in REGIONS
    if key == "target_color":
        return value in vocab.colors
    if key == "target_shape":
        return value in SHAPE_NAMES.values()
    if key == "phrasing":
        return value in vocab.referring
    if key == "target_size":
        return value == "nominal"
    if key == "num_distractors":
        lo, hi = vocab.num_distractors
        return value.isdigit() and lo <= int(value) <= hi
    return False


def split_counts(total: int, weights: Sequence[float]) -> list[int]:
    """Integer counts proportional to ``weights`` summing to ``total`` (largest remainder, ties to the first)."""
    if total <= 0 or not weights:
        return [0] * len(weights)
    norm = sum(weights)
    if norm <= 0:
        weights, norm = [1.0] * len(weights), float(len(weights))
    exact = [total * w / norm for w in weights]
    counts = [int(e) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:total - sum(counts)]:
        counts[i] += 1
    return counts


Group = tuple[str, str, str]
"""(family, condition key, value); key and value empty for the family alone."""


def _groups(d: Diagnosis, keys: Sequence[str]) -> list[Group]:
    return [(d.family, k, d.condition(k)) for k in keys if d.condition(k) and trainable(k, d.condition(k))]


def _rates(diagnoses: Sequence[Diagnosis], keys: Sequence[str]) -> dict[Group, tuple[int, int]]:
    """(failures, total) of every condition group."""
    stats: dict[Group, list[int]] = defaultdict(lambda: [0, 0])
    for d in diagnoses:
        for g in _groups(d, keys):
            stats[g][0] += int(d.is_failure)
            stats[g][1] += 1
    return {g: (f, n) for g, (f, n) in stats.items()}


def _conditions(group: Group) -> list[Condition]:
    family, key, value = group
    return [Condition("family", family)] + ([Condition(key, value)] if key else [])


def _label(group: Group) -> str:
    return group[0] + (f" with {group[1]}={group[2]}" if group[1] else "")


class GenerationPlanner:
    """Decides generation programs from diagnoses (see the module docstring)."""

    def __init__(self, config: GenerationConfig | None = None, families: Sequence[str] | None = None) -> None:
        """Keep the settings and the families exploration spreads over."""
        self.config = config or GenerationConfig()
        self.families = list(families or FAMILIES)
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown:
            raise ValueError(f"unknown families {unknown}; expected some of {sorted(FAMILIES)}")

    def plan(self, diagnoses: Sequence[Diagnosis | Outcome], budget: int, round_index: int,
             history: Sequence[Diagnosis] = (), replay: Sequence[ReplayCandidate] = (),
             recent: Sequence[Diagnosis] = ()) -> GenerationProgram:
        """Return the program for round ``round_index`` spending ``budget`` scenes.

        ``diagnoses``: the last round's diagnoses (or, without a critic, its :class:`Outcome` records);
        ``history``: diagnoses of earlier rounds (condition replay); ``replay``: the scenes of earlier rounds and
        the current one with their record (scene replay); ``recent``: the diagnoses of the ``rate_rounds - 1``
        rounds before the last, which join its diagnoses in the targeting's success rates. All come from memory;
        a run without memory passes none.
        """
        cfg = self.config
        if budget < 1:
            raise ValueError(f"budget={budget} must be >= 1")
        ids = [d.diagnosis_id for d in diagnoses]
        if len(set(ids)) != len(ids):
            raise ValueError("diagnosis ids are not unique")
        n_explore = round(budget * cfg.exploration_share)
        n_replay = round(budget * cfg.replay_share)
        scenes = self._scene_replay(replay, round_index, round(budget * cfg.scene_replay_share))
        targeted = self._targeted(diagnoses, recent)
        replay_groups = self._replay(diagnoses, history)
        if not replay_groups:
            n_explore += n_replay
            n_replay = 0
        n_target = budget - n_explore - n_replay - len(scenes)
        if not targeted:
            n_explore += n_target
            n_target = 0
        allocations: list[BudgetAllocation] = []
        for c in scenes:
            edits = EDITS_FOR_MODE.get(c.last_mode, ()) if cfg.edit_replays else ()
            allocations.append(BudgetAllocation(
                KIND_REPLAY, c.family, [Condition("family", c.family), Condition("scene", c.scene_id),
                                        *([Condition("edit", ",".join(edits))] if edits else [])], 1,
                list(c.failed_diagnosis_ids),
                f"{'edit' if edits else 'replay'} scene: {c.scene_id} failed {c.failures} of {c.attempts} "
                f"attempts, last in round {c.last_round}" + (f" ({c.last_mode}: {', '.join(edits)})" if edits else "")))
        for (group, causes, reason), count in zip(targeted, split_counts(n_target, [len(c) for _, c, _ in targeted]),
                                                  strict=True):
            allocations.append(BudgetAllocation(KIND_TARGETED, group[0], _conditions(group), count, causes, reason))
        for (group, causes, reason), count in zip(replay_groups, split_counts(n_replay, [1.0] * len(replay_groups)),
                                                  strict=True):
            allocations.append(BudgetAllocation(KIND_REPLAY, group[0], _conditions(group), count, causes, reason))
        for family, count in zip(self.families, split_counts(n_explore, [1.0] * len(self.families)), strict=True):
            allocations.append(BudgetAllocation(KIND_EXPLORATION, family, _conditions((family, "", "")), count, [],
                                                f"exploration: {family} from the broad training distribution"))
        allocations = [a for a in allocations if a.count > 0]
        digest = hashlib.sha256(json.dumps([a.to_dict() for a in allocations], sort_keys=True).encode()).hexdigest()
        return GenerationProgram(program_id=f"gp-r{round_index:03d}-{digest[:10]}", round=round_index, budget=budget,
                                 exploration_share=n_explore / budget,
                                 replay_share=(n_replay + len(scenes)) / budget, allocations=allocations)

    def _scene_replay(self, candidates: Sequence[ReplayCandidate], round_index: int,
                      count: int) -> list[ReplayCandidate]:
        """Return the ``count`` failed scenes of the planner's families with the highest replay priority."""
        cfg = self.config
        live = [c for c in candidates if c.last_failed and c.failures < cfg.max_scene_attempts
                and c.family in self.families and c.last_round < round_index]
        if not live or count < 1:
            return []
        stale = max(round_index - c.last_round for c in live)

        def priority(c: ReplayCandidate) -> tuple[float, str]:
            score = c.failures / c.attempts + cfg.staleness_weight * (round_index - c.last_round) / stale
            return (-score, c.scene_id)

        return sorted(live, key=priority)[:count]

    def _targeted(self, diagnoses: Sequence[Diagnosis], recent: Sequence[Diagnosis] = ()
                  ) -> list[tuple[Group, list[str], str]]:
        cfg = self.config
        keys = cfg.condition_keys
        rates = _rates([*diagnoses, *recent], keys)
        assigned: dict[Group, list[Diagnosis]] = defaultdict(list)
        for d in diagnoses:
            if not d.is_failure:
                continue
            options = [g for g in _groups(d, keys) if rates[g][0] >= cfg.min_support]
            if cfg.target_rule == "learning_potential":
                options = [g for g in options if rates[g][0] < rates[g][1]]
            if options:
                best = max(options, key=lambda g: (self._target_score(*rates[g]), rates[g][0], -keys.index(g[1])))
            else:
                best = (d.family, "", "")
            assigned[best].append(d)
        ranked = sorted(assigned.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        while len(ranked) > cfg.max_targeted:  # merge the smallest condition group into its family
            group, members = next((kv for kv in reversed(ranked) if kv[0][1]), ranked[-1])
            ranked.remove((group, members))
            family = (group[0], "", "")
            merged = dict(ranked)
            merged[family] = merged.get(family, []) + members
            ranked = sorted(merged.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        result = []
        family_totals = defaultdict(int)
        for d in diagnoses:
            family_totals[d.family] += 1
        for group, members in ranked:
            modes: dict[str, int] = defaultdict(int)
            for d in members:
                modes[d.failure_mode] += 1
            summary = ", ".join(f"{m} x{n}" for m, n in sorted(modes.items(), key=lambda kv: (-kv[1], kv[0])))
            failures, total = rates.get(group, (len(members), family_totals[group[0]]))
            reason = (f"targeted: {_label(group)} failed {failures} of {total} episodes ({summary})")
            result.append((group, [d.diagnosis_id for d in members], reason))
        return result

    def _target_score(self, failures: int, total: int) -> float:
        """Score of a condition group under ``target_rule`` (higher is targeted first)."""
        rate = failures / total
        return rate if self.config.target_rule == "failure_rate" else rate * (1.0 - rate)

    def _replay(self, diagnoses: Sequence[Diagnosis], history: Sequence[Diagnosis]
                ) -> list[tuple[Group, list[str], str]]:
        cfg = self.config
        keys = cfg.condition_keys
        before = _rates(history, keys)
        now = _rates(diagnoses, keys)
        result = []
        for group in sorted(before):
            failures, total = before[group]
            if total < cfg.min_support or failures / total < cfg.failing_rate or group not in now:
                continue
            f_now, n_now = now[group]
            if f_now / n_now > cfg.fixed_rate:
                continue
            old = [d.diagnosis_id for d in history if d.is_failure and group in _groups(d, keys)]
            passing = [d.diagnosis_id for d in diagnoses if not d.is_failure and group in _groups(d, keys)]
            result.append((group, old + passing, f"replay: {_label(group)} failed {failures} of {total} before and "
                                                 f"{f_now} of {n_now} now; kept so it stays fixed"))
        if result:
            return result
        passing_families = sorted({d.family for d in diagnoses if not d.is_failure})
        for family in passing_families:
            ids = [d.diagnosis_id for d in diagnoses if not d.is_failure and d.family == family]
            result.append(((family, "", ""), ids, f"replay: no fixed condition on record; {family} passes in "
                                                  f"{len(ids)} episodes and is kept in the mix"))
        return result


def scene_params(allocation: BudgetAllocation, base: SceneParams | None = None) -> SceneParams:
    """Return generator parameters that realise the allocation's conditions where ``SceneParams`` has a field for them.

    ``num_distractors`` and ``phrasing`` map to fields; region, colour, shape and size are met by drawing
    scenes until :func:`matches` holds.
    """
    values = {c.key: c.value for c in allocation.conditions}
    params = base or SceneParams()
    changes: dict[str, Any] = {}
    if "num_distractors" in values:
        n = int(values["num_distractors"])
        changes["num_distractors"] = (n, n)
    if "phrasing" in values:
        changes["referring"] = (values["phrasing"].removesuffix("_synonym"),)
    return SceneParams(**{**params.__dict__, **changes})


def matches(scene: Scene, conditions: Sequence[Condition]) -> bool:
    """Tell whether ``scene`` satisfies every condition.

    Conditions are in the vocabulary of ``scene_conditions``; the key ``scene`` names the scene itself.
    """
    have = {c.key: c.value for c in scene_conditions(scene)}
    have["scene"] = scene.scene_id
    return all(have.get(c.key) == c.value for c in conditions)


def replayed_scene(allocation: BudgetAllocation) -> str:
    """Return the scene id a scene-replay allocation plays again ("" for one that generates new scenes)."""
    return next((c.value for c in allocation.conditions if c.key == "scene"), "")


def scene_edits(allocation: BudgetAllocation) -> tuple[str, ...]:
    """Return the edits a scene replay asks for, in the order to try (empty: play the scene exactly)."""
    value = next((c.value for c in allocation.conditions if c.key == "edit"), "")
    return tuple(v for v in value.split(",") if v)
