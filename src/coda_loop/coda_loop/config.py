# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Settings of a co-evolution run (:class:`LoopConfig`) and the methods it can run.

A *method* decides how a round's generation budget is spent and how the policy is trained; the
paper's table compares them at the same budget. :data:`METHOD_SPECS` is the one table of what each
method turns on (the loop reads it through ``LoopConfig.spec``, never by comparing method names):

==========================  ==========================================  ==========  ==========  ========
method                      generation                                  corrective  RL reward   memory
==========================  ==========================================  ==========  ==========  ========
``sft``                     none: the round-0 SFT policy only           -           -           -
``open_loop``               fixed randomisation (families evenly)       no          sparse      no
``closed_loop``             families / conditions by failure rate       no          sparse      no
``dagger``                  fixed randomisation (families evenly)       progress    sparse      no
``closed_loop_dagger``      by failure rate, ``CODA_PLANNER``'s split   progress    sparse      no
``coda_pass_fail``          critic's pass/fail only -> program          progress    default     yes
``coda_no_potential``       critic diagnoses -> generation program      diagnosis   sparse      yes
``coda_no_memory``          critic diagnoses, no history / retrieval    diagnosis   staged      no
``coda``                    critic diagnoses + memory history           diagnosis   staged      yes
==========================  ==========================================  ==========  ==========  ========

*Corrective*: every generated scene gives one demonstration, as in every method; where the policy failed
the scene, the state-based expert takes over from the policy (``coda_policy.corrective``) instead of demonstrating
the scene from its start, and every policy step before the takeover is kept with the expert's label. Where the
takeover comes from differs, and that is all that differs: *diagnosis*, where the critic says the failure began
(its onset step, else the entry of the failed stage); *progress*, with no critic content, the last step of the
episode's highest recorded progress (the family's default staged potential, which every episode records), so
``dagger`` and ``closed_loop_dagger`` get the same kind of data as the ``coda`` methods. ``coda_pass_fail`` runs the
critic but passes on only success or failure (:func:`coda_critic.diagnosis.pass_fail`): no failure mode, onset or
cause reaches generation, the takeover or Text2potential (its potentials are the families' default programs).
The ``coda`` methods split their budget by ``coda_critic.generation.CODA_PLANNER`` (three quarters broad, a quarter
replaying failed scenes from memory); ``closed_loop_dagger`` uses the same split, whose quarter, without memory,
is targeted at the families and conditions that failed most.

Pure module: no rclpy.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda_critic.generation import CODA_PLANNER, ROUND_BUDGET
from coda_engine.sim.state_expert import DEMONSTRATORS

FAMILIES = ("reach", "pick_place", "push", "stack")
SPLITS = ("id", "position", "instruction", "object", "distractor")
OOD_SPLITS = SPLITS[1:]
CRITICS = ("grounded+learned", "grounded", "learned")
GENERATION_KINDS = ("none", "uniform", "failure_rate", "diagnoses")
DIAGNOSIS_KINDS = ("full", "pass_fail")


@dataclass(frozen=True)
class MethodSpec:
    """What a method turns on (one row of the table in the module docstring)."""

    generation: str
    """How scenes are chosen: ``none`` (no rounds), ``uniform`` (the broad training distribution, families
    evenly), ``failure_rate`` (the planner on last round's success flags: families and scene conditions with the
    highest failure rates, no critic), ``diagnoses`` (the critic's generation program)."""
    critic: bool
    """The critic diagnoses every round's episodes."""
    corrective: bool
    """Failed scenes are demonstrated by the expert taking over at the diagnosed failed stage."""
    potentials: bool
    """RL is shaped by the Text2potential staged potentials (else the sparse success reward)."""
    memory: bool
    """Planning reads the history of earlier rounds from memory."""
    diagnosis: str = "full"
    """With the critic: what its diagnoses pass on: ``full`` (failure mode, failed stage, onset, text, conditions) or
    ``pass_fail`` (success or failure only, :func:`coda_critic.diagnosis.pass_fail`)."""
    focus_share: float = 0.0
    """Share of every behaviour-cloning batch drawn from the round's own demonstrations (0: uniform over all)."""
    planner: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The method's own ``coda_critic.generation.GenerationConfig`` settings (``LoopConfig.planner`` applies on
    top of them); empty: the planner's defaults."""

    def __post_init__(self) -> None:
        """Check that the switches fit together."""
        if self.generation not in GENERATION_KINDS:
            raise ValueError(f"MethodSpec.generation={self.generation!r} must be one of {GENERATION_KINDS}")
        if (self.generation == "diagnoses" or self.potentials) and not self.critic:
            raise ValueError("MethodSpec: diagnosis-driven generation and potentials need the critic")
        if self.diagnosis not in DIAGNOSIS_KINDS:
            raise ValueError(f"MethodSpec.diagnosis={self.diagnosis!r} must be one of {DIAGNOSIS_KINDS}")
        if self.diagnosis != "full" and not self.critic:
            raise ValueError("MethodSpec: reduced diagnoses need the critic")

    @property
    def takeover(self) -> str:
        """Where a corrective demonstration's expert takes over.

        ``diagnosis``: the critic's onset, else its failed stage; ``progress_trace``: the last step of the episode's
        highest recorded progress (no critic content, :func:`coda_policy.corrective.trace_takeover`).
        """
        return "diagnosis" if self.critic and self.diagnosis == "full" else "progress_trace"


METHOD_SPECS: dict[str, MethodSpec] = {
    "sft": MethodSpec("none", critic=False, corrective=False, potentials=False, memory=False),
    "open_loop": MethodSpec("uniform", critic=False, corrective=False, potentials=False, memory=False),
    "closed_loop": MethodSpec("failure_rate", critic=False, corrective=False, potentials=False, memory=False),
    "dagger": MethodSpec("uniform", critic=False, corrective=True, potentials=False, memory=False),
    "closed_loop_dagger": MethodSpec("failure_rate", critic=False, corrective=True, potentials=False, memory=False,
                                     planner=CODA_PLANNER),
    "coda_pass_fail": MethodSpec("diagnoses", critic=True, corrective=True, potentials=True, memory=True,
                                 planner=CODA_PLANNER, diagnosis="pass_fail"),
    "coda_no_potential": MethodSpec("diagnoses", critic=True, corrective=True, potentials=False, memory=True,
                                    planner=CODA_PLANNER),
    "coda_no_memory": MethodSpec("diagnoses", critic=True, corrective=True, potentials=True, memory=False,
                                 planner=CODA_PLANNER),
    "coda": MethodSpec("diagnoses", critic=True, corrective=True, potentials=True, memory=True, planner=CODA_PLANNER),
}
"""Every method of ``coda experiment`` and what it turns on."""
METHODS = tuple(METHOD_SPECS)


@dataclass
class LoopConfig:
    """Everything a ``coda run`` needs; every field has an embedded default (the ``make run`` budget)."""

    method: str = "coda"
    """One of ``METHODS`` (see the module docstring)."""
    rounds: int = 3
    """Co-evolution rounds after the round-0 SFT policy."""
    budget: int = ROUND_BUDGET
    """Scenes the data engine generates per round (the generation budget)."""
    workers: int = 2
    """Local simulation worker processes for episodes and evaluation (0: only ROS workers on the domain)."""
    remote_workers: bool = True
    """Also send episodes to ``sim_bridge`` workers found on the ROS domain (one that does not see the run's
    checkpoint folder fetches each policy version from the run over ROS, ``GetCheckpoint``)."""
    seed: int = 0
    """Seeds every random choice of the run (scene seeds, training, evaluation order)."""
    families: tuple[str, ...] = FAMILIES
    """Task families of the run."""
    base_demos_per_family: int = 40
    """Expert demonstrations per family of the round-0 SFT policy."""
    base_sft_steps: int = 2500
    """Gradient steps of the round-0 SFT policy."""
    position_shift: float = 0.06
    """Generated scenes: metres by which the object and goal sampling regions grow outward (the engine's position
    axis; 0 keeps the training regions)."""
    size_scale: tuple[float, float] = (0.8, 1.2)
    """Generated scenes: range of the multiplier on nominal object sizes (the engine's appearance axis)."""
    num_distractors: tuple[int, int] = (0, 4)
    """Generated scenes: range of the number of distractor objects (a targeted count overrides it)."""
    referring: tuple[str, ...] = ("color_shape",)
    """Generated scenes: how instructions may name the target (the engine's language axis, a subset of
    ``color_shape``, ``color``, ``shape``, ``relative``; a targeted phrasing overrides it). The round-0
    demonstrations use ``color_shape`` only, like the ``id`` split."""
    probe_per_family: int = 2
    """Probe scenes per family run every round besides the generated ones (the same scenes every round)."""
    finetune_steps: int = 2500
    """Behaviour-cloning steps per round on all demonstrations so far (continues from the current policy)."""
    finetune_lr: float = 1e-3
    """Peak learning rate of each round's behaviour cloning (measured, 3 rounds from the same SFT policy, whole
    held-out suites: 1e-3 with warm-up gave OOD .372, 5e-4 without .295, 2.5e-4 with .245; the SFT policy .245)."""
    finetune_warmup: int = 100
    """Steps over which each round's behaviour-cloning rate ramps up from 0 (its optimizer starts fresh)."""
    bc_potential_weight: float = 0.0
    """Methods with Text2potential: each round's behaviour cloning draws its rows in proportion to ``1 + w *
    gain / mean gain``, gain the step's rise in the round's staged potential of its family
    (``coda_policy.finetune``'s ``potential-gain`` batches), so the diagnoses' potentials also weight the cloning
    that carries most of the learning. 0: uniform rows (the measured tables). Screened on two development seeds'
    recorded steps, level within its interval (``docs/results.md``)."""
    bc_gate_episodes: int = 0
    """Episodes per family of the BC gate: a round's behaviour-cloning update replaces the policy only if its mean
    success over families on new ``id`` scenes (the same scenes for both) is at most ``bc_gate_tolerance`` below the
    policy it started from; else the round keeps that policy (and PPO starts from it). 0: always kept, as in the
    measured tables."""
    bc_gate_tolerance: float = 0.1
    """How far below its parent (mean success over families) a BC update may score and still be kept."""
    corrective: bool | None = None
    """Corrective demonstrations for the scenes the policy failed (the expert takes over at the diagnosed failed
    stage, or without the critic at the peak of its recorded progress); None: the method's default
    (``METHOD_SPECS``)."""
    focus_share: float | None = None
    """Share of every behaviour-cloning batch drawn from the round's own demonstrations; None: the method's
    default (``METHOD_SPECS``)."""
    planner: dict[str, Any] = field(default_factory=dict)
    """Settings of the generation planner that differ from the method's (``MethodSpec.planner``: ``CODA_PLANNER``
    for the ``coda`` methods, else ``coda_critic.generation.GenerationConfig``'s defaults), e.g.
    ``{"exploration_share": 0.5, "scene_replay_share": 0.0}``; used by every method that plans (``closed_loop`` and
    the ``coda`` methods). A run folder's ``config.json`` holds every field written out (:meth:`pinned`)."""
    corrective_margin: int = 2
    """Control steps before the entry of the failed stage at which the expert takes over."""
    corrective_relabel: int = 1000
    """Policy steps before the takeover that a corrective demonstration also keeps, labelled by the expert (1000,
    longer than any episode: every step the policy took, DAgger labels on the states it reached; the design chosen
    on the development seeds' validation scenes, ``docs/results.md``)."""
    corrective_beside_start: bool = False
    """With corrective demonstrations: a failed scene keeps both its corrective demonstration and the expert's
    demonstration from the start (False: the corrective one replaces it, one demonstration per scene)."""
    corrective_skip_families: tuple[str, ...] = ("push",)
    """With corrective demonstrations: families whose failed scenes are demonstrated by the expert from the start
    instead (as without corrective demonstrations); empty: every family gets corrective ones. ``push`` by default:
    the expert's recovery labels climb away from a policy's own pushes, and without corrective push data ``coda``
    gained +4.4 validation OOD points [+0.3, +8.7] on two seeds (8, 9) kept for that check, the rule fixed before
    those runs (``docs/results.md``, "No corrective push data on new seeds 8 and 9")."""
    corrective_push_realign: bool = False
    """With corrective demonstrations: the expert that labels and finishes them, in a push, takes a tool point low
    behind the target back down to the push's start instead of climbing to re-approach
    (``coda_engine.sim.state_expert.StateExpert``'s ``realign_push``); demonstrations from the start keep the
    shipped phase rules. False: the shipped labels, which climb away from most of a policy's own pushes. Level with
    them on validation over two development seeds (-1.5 points, ``docs/results.md``), so off by default."""
    relabel_successes: bool = False
    """With corrective demonstrations: a scene the policy solved is demonstrated by the policy's own run, every step
    labelled with the expert's action (DAgger labels on the states it reached), in place of the expert's
    demonstration from the start (beside it with ``corrective_beside_start``). Lowered ``coda`` on validation by
    17 points on a development seed (``docs/results.md``, "Four knobs of the corrective data")."""
    max_new_demos: int = 0
    """Most new expert demonstrations per round (0: one per generated scene)."""
    demonstrator: str = "state_expert"
    """Who demonstrates scenes from their start (round 0's demonstrations and every round's new ones):
    ``state_expert``, the expert with its phase read from the state at every step (``coda_engine.sim.state_expert``),
    which also labels corrective and on-policy steps, so every label of the cloning set comes from the same function
    of the state; or ``expert``, the family's scripted state machine (its phase follows the path it drove, so its
    labels disagree with the corrective ones on a fifth of the steps; mixed with them it lost up to 17 validation
    points, ``docs/results.md``). A run reusing ``base_from`` must use the base run's demonstrator."""
    rl_env_steps: int = 1024
    """PPO environment steps per round on the family with the most diagnosed failures (0: no RL)."""
    rl_learner: str = "ppo"
    """The round's RL learner: ``ppo`` (:mod:`coda_policy.rl`; Text2potential shapes its reward) or ``residual``
    (:mod:`coda_policy.residual_rl`: a bounded residual head on the frozen cloned policy, off-policy; Text2potential
    warms its critics up, staged value learning; methods without potentials get the sparse reward and no warm-up)."""
    rl_stage_share: float = 0.5
    """Methods with the critic: share of PPO's episodes that start where the scripted expert enters the stage the
    RL family fails in most often (the diagnosed stage), so PPO practises it (0: every episode from the start)."""
    rl_eval_episodes: int = 12
    """Episodes of the RL gate: the RL result replaces the policy only if it does better than the policy it started
    from on the same new scenes of its family (0: always kept)."""
    rl_success_demos: int = 0
    """The last this many successful episodes of a round's PPO rollouts (sampled actions, whatever the gate decides)
    become demonstrations of every later round's behaviour cloning (``demos/r00k.ppo.npz``), so what PPO found,
    and the reward that shaped it, outlives the next cloning (0: none)."""
    eval_per_family: int = 4
    """Held-out suite entries per family and split evaluated after rounds 1 .. ``rounds`` - 1 (the progress
    between the ends)."""
    final_eval_per_family: int = 20
    """Entries per family and split evaluated after round 0 and after the last round, the run's before / after
    figures (0: every entry of the shipped suites, 25 per family and split)."""
    validation: bool = False
    """Also score every evaluated version on the validation suites (``coda_policy/suites/validation/``, the same
    entries per family as the test suites), the data designs and hyperparameters are chosen on."""
    eval_splits: tuple[str, ...] = SPLITS
    """Held-out splits evaluated."""
    critic: str = "grounded+learned"
    """Critic of the diagnose step. ``grounded+learned``: the grounded critic (privileged simulator state) diagnoses
    and steers; the learned critic (keyframes, instruction, tool trajectory: what a real arm offers) diagnoses the
    same episodes, its agreement with the grounded labels is recorded, and it is fine-tuned on them every round
    (a new critic version when it does better on held-out episodes). ``grounded``: the grounded critic alone.
    ``learned``: the learned critic ``critic_model`` diagnoses and steers, never fine-tuned."""
    critic_model: str = ""
    """Learned critic folder (``coda critic train``) the run starts from; empty: the embedded critic
    (``coda_critic/models/``)."""
    critic_epochs: int = 10
    """Epochs of each round's fine-tuning of the learned critic (``grounded+learned``; 0: never fine-tuned)."""
    critic_lr: float = 2e-4
    """Learning rate of that fine-tuning (small: a few hundred episodes must not undo what the critic knows)."""
    base_from: str = ""
    """Run folder whose round-0 SFT policy and demonstrations this run reuses (``coda experiment`` trains them
    once per seed); empty trains them."""
    torch_threads: int = 1
    """torch intra-op threads of the training steps (1: the small network gains nothing from a second thread, and
    with the simulation workers on the other core two threads oversubscribe and slow every step several-fold).
    Episodes run in the loop's own process (``workers: 0`` and no ROS worker) compute at one thread
    (``coda_policy.serving.SERVING_THREADS``), like every worker, and the step goes on at one thread after them."""
    progress: bool = True
    """Show a progress bar per round (training steps run without their own bars)."""

    def __post_init__(self) -> None:
        """Check the fields; the error names every bad one."""
        self.families = tuple(self.families)
        self.corrective_skip_families = tuple(self.corrective_skip_families)
        self.eval_splits = tuple(self.eval_splits)
        self.referring = tuple(self.referring)
        self.size_scale = (float(self.size_scale[0]), float(self.size_scale[1]))
        self.num_distractors = (int(self.num_distractors[0]), int(self.num_distractors[1]))
        errors = []
        if self.method not in METHODS:
            errors.append(f"method={self.method!r} must be one of {METHODS}")
        for name in ("budget", "base_demos_per_family", "base_sft_steps", "eval_per_family", "torch_threads"):
            if getattr(self, name) < 1:
                errors.append(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("rounds", "workers", "probe_per_family", "finetune_steps", "finetune_warmup", "max_new_demos",
                     "rl_env_steps", "rl_eval_episodes", "rl_success_demos", "critic_epochs", "final_eval_per_family",
                     "bc_gate_episodes"):
            if getattr(self, name) < 0:
                errors.append(f"{name}={getattr(self, name)} must be >= 0")
        if not 0.0 < self.critic_lr < 1.0:
            errors.append(f"critic_lr={self.critic_lr} must be in (0, 1)")
        if not 0.0 <= self.bc_potential_weight <= 100.0:
            errors.append(f"bc_potential_weight={self.bc_potential_weight} must be in [0, 100]")
        if self.bc_potential_weight and self.method in METHOD_SPECS and not METHOD_SPECS[self.method].potentials:
            errors.append(f"bc_potential_weight={self.bc_potential_weight} needs a method with Text2potential, "
                          f"not {self.method!r}")
        if not 0.0 <= self.bc_gate_tolerance <= 1.0:
            errors.append(f"bc_gate_tolerance={self.bc_gate_tolerance} must be in [0, 1]")
        if not 0.0 < self.finetune_lr < 1.0:
            errors.append(f"finetune_lr={self.finetune_lr} must be in (0, 1)")
        try:
            self.generation_config()
        except (TypeError, ValueError) as error:
            errors.append(f"planner={self.planner!r}: {error}")
        if self.rl_learner not in ("ppo", "residual"):
            errors.append(f"rl_learner={self.rl_learner!r} must be ppo or residual")
        if not 0.0 <= self.rl_stage_share <= 1.0:
            errors.append(f"rl_stage_share={self.rl_stage_share} must be in [0, 1]")
        if self.focus_share is not None and not 0.0 <= self.focus_share < 1.0:
            errors.append(f"focus_share={self.focus_share} must be in [0, 1)")
        if self.corrective_margin < 0 or self.corrective_relabel < 0:
            errors.append(f"corrective_margin={self.corrective_margin} and corrective_relabel="
                          f"{self.corrective_relabel} must be >= 0")
        if self.base_demos_per_family < 2:
            errors.append(f"base_demos_per_family={self.base_demos_per_family} must be >= 2 (one is held out)")
        bad = [f for f in self.families if f not in FAMILIES]
        if not self.families or bad:
            errors.append(f"families={self.families} must be a non-empty subset of {FAMILIES}")
        if any(f not in FAMILIES for f in self.corrective_skip_families):
            errors.append(f"corrective_skip_families={self.corrective_skip_families} must be a subset of {FAMILIES}")
        bad = [s for s in self.eval_splits if s not in SPLITS]
        if not self.eval_splits or bad:
            errors.append(f"eval_splits={self.eval_splits} must be a non-empty subset of {SPLITS}")
        if self.critic not in CRITICS:
            errors.append(f"critic={self.critic!r} must be one of {CRITICS}")
        if self.demonstrator not in DEMONSTRATORS:
            errors.append(f"demonstrator={self.demonstrator!r} must be one of {DEMONSTRATORS}")
        elif self.base_from and (Path(self.base_from) / "config.json").is_file():
            held = json.loads((Path(self.base_from) / "config.json").read_text())
            base = held.get("demonstrator", BEFORE_THE_KEY["demonstrator"])
            if base != self.demonstrator:
                errors.append(f"demonstrator={self.demonstrator!r} but base_from={self.base_from!r} was demonstrated "
                              f"by {base!r} (the cloning set would mix two experts' labels)")
        if self.critic_model and not (Path(self.critic_model) / "config.json").is_file():
            errors.append(f"critic_model={self.critic_model!r} is not a critic folder (no config.json; "
                          "`coda critic train` writes one)")
        if not errors:
            try:
                self.scene_params()
            except ValueError as error:
                errors.append(f"position_shift / size_scale / num_distractors / referring: {error}")
        if errors:
            raise ValueError("LoopConfig: " + "; ".join(errors))

    def scene_params(self) -> Any:
        """Return the generator parameters of the scenes the loop generates (before an allocation's conditions)."""
        from coda_engine.sim.scene import SceneParams

        return SceneParams(split="id", position_shift=self.position_shift, size_scale=self.size_scale,
                           num_distractors=self.num_distractors, referring=self.referring)

    def generation_config(self) -> Any:
        """Return the generation planner's settings: its defaults with ``planner`` applied."""
        from coda_critic.generation import GenerationConfig

        if not isinstance(self.planner, Mapping):
            raise TypeError(f"must be a mapping of GenerationConfig fields, not {type(self.planner).__name__}")
        known = {f.name for f in dataclasses.fields(GenerationConfig)}
        unknown = sorted(set(self.planner) - known)
        if unknown:
            raise ValueError(f"unknown GenerationConfig fields {unknown}; known: {sorted(known)}")
        method = METHOD_SPECS[self.method].planner if self.method in METHOD_SPECS else {}
        fields = {**method, **self.planner}  # a pinned planner read back from JSON holds lists where tuples were
        return GenerationConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})

    def pinned(self) -> LoopConfig:
        """Return this config with every planner field, ``corrective`` and ``focus_share`` written out.

        A run folder's ``config.json`` holds this form, so a resumed run plans and trains as it started even after
        a method's defaults (``METHOD_SPECS``, ``CODA_PLANNER``, ``GenerationConfig``) have changed.
        """
        spec = self.spec
        planner = {k: list(v) if isinstance(v, tuple) else v
                   for k, v in dataclasses.asdict(self.generation_config()).items()}
        return dataclasses.replace(self, planner=planner, corrective=spec.corrective, focus_share=spec.focus_share)

    @property
    def spec(self) -> MethodSpec:
        """What the method turns on, with this config's overrides (``corrective``)."""
        spec = METHOD_SPECS[self.method]
        if self.corrective is not None:
            spec = dataclasses.replace(spec, corrective=self.corrective)
        if self.focus_share is not None:
            spec = dataclasses.replace(spec, focus_share=self.focus_share)
        return spec

    @property
    def uses_critic(self) -> bool:
        """Generation is steered by diagnoses."""
        return self.spec.generation == "diagnoses"

    @property
    def uses_potentials(self) -> bool:
        """RL uses the staged potentials of Text2potential (else the sparse success reward)."""
        return self.spec.potentials

    @property
    def uses_memory(self) -> bool:
        """Planning reads the history of earlier rounds from memory."""
        return self.spec.memory

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict."""
        data = dataclasses.asdict(self)
        data["families"] = list(self.families)
        data["corrective_skip_families"] = list(self.corrective_skip_families)
        data["eval_splits"] = list(self.eval_splits)
        data["size_scale"] = list(self.size_scale)
        data["num_distractors"] = list(self.num_distractors)
        data["referring"] = list(self.referring)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error that names them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"LoopConfig: unknown keys {unknown}; known keys are {sorted(known)}")
        return cls(**dict(data))


RUN_CONFIG = "config.json"
"""The file of a run folder holding the run's :class:`LoopConfig` (written out: :meth:`LoopConfig.pinned`)."""

BEFORE_THE_KEY: dict[str, Any] = {"demonstrator": "expert", "corrective_skip_families": []}
"""Settings whose default changed after run folders without them were written: what such a run ran with (the
scripted expert demonstrating; corrective demonstrations for every family). :func:`run_config` fills them in, so an
older run resumes, is compared and serves as ``base_from`` as it ran."""


def run_config(run_dir: str | Path) -> LoopConfig | None:
    """Return the config a run folder holds, None when ``run_dir`` holds no run; ValueError names a broken file."""
    path = Path(run_dir) / RUN_CONFIG
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a mapping of LoopConfig keys, not {type(data).__name__}")
    return LoopConfig.from_dict({**BEFORE_THE_KEY, **data})


def load_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> LoopConfig:
    """Read a YAML or JSON config file (keys of :class:`LoopConfig`) and apply ``overrides``."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise ValueError(f"config file {path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {error}") from error
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of LoopConfig keys, not {type(data).__name__}")
    return LoopConfig.from_dict({**data, **(overrides or {})})


@dataclass
class Preset:
    """A named experiment size of ``coda experiment``."""

    rounds: int
    """Rounds per method and seed."""
    budget: int
    """Scenes per round."""
    loop: dict[str, Any] = field(default_factory=dict)
    """Other :class:`LoopConfig` fields."""


PRESETS: dict[str, Preset] = {
    "small": Preset(rounds=2, budget=16, loop={"base_sft_steps": 2000, "base_demos_per_family": 30,
                                               "finetune_steps": 1000, "rl_env_steps": 1024, "eval_per_family": 4,
                                               "final_eval_per_family": 10,
                                               "probe_per_family": 1, "rl_eval_episodes": 8}),
    "paper": Preset(rounds=15, budget=64, loop={"base_sft_steps": 6000, "base_demos_per_family": 100,
                                                "finetune_steps": 2000, "rl_env_steps": 8192,
                                                "eval_per_family": 8, "final_eval_per_family": 0,
                                                "probe_per_family": 4}),
    "bench": Preset(rounds=8, budget=64, loop={"base_sft_steps": 6000, "base_demos_per_family": 100,
                                               "finetune_steps": 5000, "rl_env_steps": 8192,
                                               "eval_per_family": 4, "final_eval_per_family": 0,
                                               "probe_per_family": 4, "validation": True, "critic": "grounded"}),
}
"""``small`` fits the experiment in well under an hour on 2 cores; ``bench`` is the paired protocol of the
method comparison (8 rounds of 5,000 behaviour-cloning steps each; the records made before its final table at 5,000
used 2,000, which ``--set finetune_steps=2000`` reproduces; round 0 and the last round scored on all 25 entries per
family and split of the test suites, 400 OOD episodes, and of the validation suites; the grounded critic alone,
since the learned critic's fine-tuning changes no decision of the loop); ``paper`` is the 15-round protocol
(rounds in between are evaluated on 8 scenes per family and split to follow progress; round 0 and the last
round on all 25)."""
