# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The serving logic of the ``policy`` node, without ROS: observation assembly, guards, version swaps.

- :class:`PandaKinematics`: tool centre point and finger opening from Panda joint positions (MuJoCo FK of the
  engine's Panda model).
- :class:`ObservationBuilder`: the flat observation of the engine's layout from the latest joint positions
  and object states (target in slot 0, goal in slot 1, distractors after them, as in simulation), with the
  end-effector velocity over the last control tick and the stage tracked by the active potential program.
- :class:`PolicyController`: one :meth:`~PolicyController.tick` per control period returns a
  :class:`Command`: the clipped action of the loaded version, or *hold* with a reason when an input is
  missing, stale (older than ``max_input_age``) or not finite, or no version is loaded. Versions are loaded
  off the control path and swapped in with a single reference assignment (atomic for the tick).
- The action mean: :func:`coda_policy.action_mean.action_means` builds one per (version, instruction) off the
  control path, checked against the network: C++ (``coda_core_cpp.ObjectTokenActor``), else NumPy, else the eager
  network.
- The same tick in C++ (``coda_core_cpp._rt.ControlTick``, run by the ``policy`` node's default control path on a
  thread of its own over rcl): :func:`native_tick_spec` describes the kinematics, the observation layout, the stage
  program and the limits for it, and :meth:`PolicyController.native_model` hands over the current version and
  instruction (the C++ action mean's spec, or why there is none). This module's tick is the reference it is tested
  against, command for command.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda_engine.digests import file_sha256
from coda_policy.action_mean import action_means
from coda_policy.checkpoint import MODEL_FILE, check_control_hz, load_policy
from coda_policy.config import default_layout
from coda_policy.model import CodaPolicyNet

ROLE_TARGET, ROLE_GOAL = 1, 2


@dataclass
class ControlConfig:
    """Settings of the control loop."""

    control_rate_hz: float = 10.0
    """Ticks per second (the rate the policy was trained at: the engine's arm runs at 10 Hz)."""
    max_input_age: float = 0.5
    """Joint and object inputs older than this (s) make the controller hold."""
    max_delta: float = 0.05
    """Largest commanded end-effector displacement per tick and axis, m (the arm's limit)."""
    family: str = "reach"
    """Task family whose default potential program tracks the stage (when ``program`` is empty)."""
    program: str = ""
    """Staged potential program source that tracks the stage index; empty uses the family's. The policy reads this
    index, so a program other than the one its training observations were tracked with (the family default for every
    policy the loop trains) shifts its input."""
    use_compiled: bool = True
    """Run the action mean through :mod:`coda_policy.action_mean` (C++ or NumPy, built per version and instruction
    off the control path); False, or when building it fails (reported in ``PolicyController.compile_error``):
    the eager network."""

    def __post_init__(self) -> None:
        """Check the fields; errors name the field."""
        errors = []
        if not 0.5 <= self.control_rate_hz <= 1000.0:
            errors.append(f"ControlConfig.control_rate_hz={self.control_rate_hz} must be in [0.5, 1000]")
        if not self.max_input_age > 0:
            errors.append(f"ControlConfig.max_input_age={self.max_input_age} must be > 0 s")
        if not 0.0 < self.max_delta <= 0.2:
            errors.append(f"ControlConfig.max_delta={self.max_delta} must be in (0, 0.2] m")
        if errors:
            raise ValueError("; ".join(errors))


@dataclass
class ObjectInfo:
    """One object as the controller needs it (from coda_msgs/ObjectState)."""

    position: tuple[float, float, float]
    """World position, m."""
    rgb: tuple[float, float, float]
    """Colour in [0, 1]."""
    shape: int
    """Shape code."""
    size: tuple[float, float, float]
    """Half extents, m."""
    role: int
    """Role code: 0 distractor, 1 target, 2 goal."""


@dataclass
class Command:
    """What the controller asks of the arm for one tick."""

    delta: np.ndarray
    """(3,) end-effector displacement, m, within ``max_delta``; zeros when holding."""
    gripper: float
    """Policy gripper command in [-1, 1] (+1 closes); 0 when holding."""
    hold: bool
    """True: keep the current position."""
    reason: str
    """Why it holds (empty otherwise)."""
    stage: int
    """Tracked stage index."""
    version: str
    """Policy version that produced it (empty if none)."""
    sha256: str = ""
    """SHA-256 of that version's model file (empty if none): names the exact weights, whatever the version id."""


class PandaKinematics:
    """Forward kinematics of the engine's Panda model: joint positions -> tool centre point, finger opening."""

    def __init__(self, joint_names: Sequence[str] = (), finger_joints: Sequence[str] = ()) -> None:
        """Build the model once (no objects).

        ``joint_names`` (7) and ``finger_joints`` (2) are the names a driver reports in ``joint_states`` for the
        model's arm joints 1..7 and fingers (a robot file's fields); empty: the engine model's own names.
        """
        import mujoco

        from coda_engine.real.robot import JointOrder
        from coda_engine.sim import panda

        self._mj = mujoco
        self.model = panda.base_model()
        self.data = mujoco.MjData(self.model)
        self.arm_q = [int(self.model.joint(n).qposadr[0]) for n in panda.ARM_JOINTS]
        self.finger_q = [int(self.model.joint(n).qposadr[0]) for n in panda.FINGER_JOINTS]
        arm = list(joint_names) or list(panda.ARM_JOINTS)
        fingers = list(finger_joints) or list(panda.FINGER_JOINTS)
        if len(arm) != len(panda.ARM_JOINTS) or len(fingers) != len(panda.FINGER_JOINTS):
            raise ValueError(f"PandaKinematics needs {len(panda.ARM_JOINTS)} arm and {len(panda.FINGER_JOINTS)} "
                             f"finger joint names, got {len(arm)} and {len(fingers)}")
        self.names = arm + fingers
        """The driver's names of arm joints 1..7 then the two fingers, in the model's order."""
        self.tcp = self.model.site(panda.TCP_SITE).id
        self._qpos_adr = np.array(self.arm_q + self.finger_q)
        self._order = JointOrder(self.names)

    def chain_spec(self) -> dict[str, Any]:
        """Return the kinematic chain from the world to the tool centre point for ``coda_core_cpp``'s ``SerialChain``.

        Each body from the world down to the tool site's body: its rest pose relative to its parent and its hinges
        (anchor, axis, reference position, which of the 7 arm joints drives it); the site's offset in the last body.
        NotImplementedError when the chain has a joint other than one of the arm's hinges.
        """
        mj, model = self._mj, self.model
        arm_adr = {adr: i for i, adr in enumerate(self.arm_q)}
        chain = []
        body = int(model.site_bodyid[self.tcp])
        while body != 0:
            chain.append(body)
            body = int(model.body_parentid[body])
        bodies = []
        for body in reversed(chain):
            hinges = []
            for j in range(int(model.body_jntadr[body]), int(model.body_jntadr[body] + model.body_jntnum[body])):
                adr = int(model.jnt_qposadr[j])
                if model.jnt_type[j] != mj.mjtJoint.mjJNT_HINGE or adr not in arm_adr:
                    name = model.joint(j).name
                    raise NotImplementedError(f"joint {name!r} on the way to the tool is not an arm hinge")
                hinges.append({"anchor": model.jnt_pos[j].tolist(), "axis": model.jnt_axis[j].tolist(),
                               "reference": float(model.qpos0[adr]), "q_index": arm_adr[adr]})
            bodies.append({"pos": model.body_pos[body].tolist(), "quat": model.body_quat[body].tolist(),
                           "hinges": hinges})
        return {"bodies": bodies, "point": model.site_pos[self.tcp].tolist(), "num_q": len(self.arm_q)}

    def forward(self, names: Sequence[str], positions: Sequence[float]) -> tuple[np.ndarray, float]:
        """Return the TCP position (3,) and the finger opening (m); KeyError naming a missing joint."""
        q = self._order.pick(names, positions)
        self.data.qpos[self._qpos_adr] = q
        self._mj.mj_kinematics(self.model, self.data)
        return self.data.site_xpos[self.tcp].copy(), float(q[7] + q[8])


class ObservationBuilder:
    """Assembles the flat observation (engine layout) from the latest inputs; tracks the stage."""

    def __init__(self, cfg: ControlConfig, max_objects: int = 7) -> None:
        """Compile the stage program and prepare the buffers."""
        from coda_core_cpp import PotentialProgram
        from coda_engine.sim.families import get_family

        self.layout = default_layout(max_objects)
        self.max_objects = max_objects
        self.obs_dim = self.layout["stage_index"][0] + 1
        source = cfg.program or get_family(cfg.family).program
        aliases = dict(self.layout)
        for alias, slot in (("target", 0), ("goal", 1)):
            for name in ("pos", "rgb", "shape", "size"):
                aliases[f"{alias}_{name}"] = self.layout[f"obj{slot}_{name}"]
        self.program = PotentialProgram.compile(source, aliases)
        self.program_layout = aliases
        """The layout the stage program was compiled with (the observation layout plus target/goal aliases)."""
        self.control_hz = cfg.control_rate_hz
        self.reset()

    def reset(self) -> None:
        """Forget the episode: stage 0, no previous end-effector position."""
        self.stage = 0
        self._prev_ee: np.ndarray | None = None

    def object_slots(self, objects: list[ObjectInfo]) -> np.ndarray:
        """Return an observation with only the object slots filled (target, goal, then the distractors)."""
        obs = np.zeros(self.obs_dim, dtype=np.float32)
        order = ([o for o in objects if o.role == ROLE_TARGET][:1] or [None]) + \
                ([o for o in objects if o.role == ROLE_GOAL][:1] or [None]) + \
                [o for o in objects if o.role not in (ROLE_TARGET, ROLE_GOAL)]
        for slot, obj in enumerate(order[:self.max_objects]):
            if obj is None:
                continue
            base = self.layout[f"obj{slot}_pos"][0]
            obs[base:base + 3] = obj.position
            obs[base + 3:base + 6] = obj.rgb
            obs[base + 6] = obj.shape
            obs[base + 7:base + 10] = obj.size
            obs[base + 10] = 1.0
        return obs

    def build(self, ee_pos: np.ndarray, gripper: float, objects: list[ObjectInfo],
              slots: np.ndarray | None = None) -> np.ndarray:
        """Return the observation for this tick and advance the stage (call once per tick).

        ``slots``: :meth:`object_slots` of ``objects`` when already computed (objects change less often than
        the arm state).
        """
        obs = (self.object_slots(objects) if slots is None else slots).copy()
        obs[0:3] = ee_pos
        obs[3:6] = 0.0 if self._prev_ee is None else (ee_pos - self._prev_ee) * self.control_hz
        obs[6] = gripper
        stage_col = self.layout["stage_index"][0]
        obs[stage_col] = self.stage
        if np.all(np.isfinite(obs)):
            _, self.stage = self.program.evaluate(obs, self.stage)
            obs[stage_col] = self.stage
        self._prev_ee = np.asarray(ee_pos, dtype=np.float64).copy()
        return obs


@dataclass(frozen=True)
class LoadedPolicy:
    """A loaded version: swapped as one reference."""

    version: str
    """Version id."""
    net: CodaPolicyNet
    """The network in eval mode."""
    sha256: str = ""
    """SHA-256 of the model file it was loaded from (empty: not known); travels with every command it makes."""


def load_version(folder: Path, expected_sha256: str = "", control_hz: float | None = None) -> LoadedPolicy:
    """Load a version folder, checking what is given (ValueError on a mismatch).

    ``expected_sha256``: the weights' SHA-256; ``control_hz``: the rate the version was trained at.
    """
    folder = Path(folder)
    actual = file_sha256(folder / MODEL_FILE)
    if expected_sha256 and actual != expected_sha256.lower():
        raise ValueError(f"{folder / MODEL_FILE}: sha256 {actual} != announced {expected_sha256}")
    net, config = load_policy(folder)
    if control_hz is not None:
        check_control_hz(config, control_hz)
    return LoadedPolicy(str(config["version_id"]), net, actual)


class PolicyController:
    """The control step: inputs in, one guarded and clipped :class:`Command` out per tick."""

    def __init__(self, cfg: ControlConfig) -> None:
        """Set up kinematics-free state; inputs arrive through the ``set_*`` methods."""
        self.cfg = cfg
        self.builder = ObservationBuilder(cfg)
        self.policy: LoadedPolicy | None = None
        self._instruction = ""
        self._embedding: torch.Tensor | None = None
        self._joints: tuple[float, np.ndarray, float] | None = None  # stamp, ee_pos, gripper
        self._objects: tuple[float, list[ObjectInfo], np.ndarray] | None = None  # stamp, objects, slots
        self._lock = threading.Lock()
        self._compile_lock = threading.Lock()
        self._compiled: tuple[LoadedPolicy, torch.Tensor, Callable[[np.ndarray], np.ndarray],
                              dict[str, Any] | None] | None = None
        """(version, embedding, action mean, the C++ action mean's spec or None) for the current pair."""
        self._episode = 0
        """Counts instructions: a new one restarts the task (the stage and the velocity)."""
        self.compile_error = ""
        """Why the last compilation failed (empty if it did not); ticks then run the eager network."""
        self.backend = "eager"
        """What computes the action mean: 'cpp', 'numpy' or 'eager' (the network itself)."""
        self.backend_note = ""
        """Why the C++ action mean is not in use when the NumPy one is (empty otherwise)."""

    def _compile(self, policy: LoadedPolicy | None, embedding: torch.Tensor | None) -> None:
        """Build the compiled action mean for this pair (call with ``_compile_lock`` held, before publishing it)."""
        if not self.cfg.use_compiled or policy is None or embedding is None:
            return
        if embedding.shape[1] != policy.net.cfg.instruction_dim:
            return  # tick holds with a reason
        try:
            reference, actor, note = action_means(policy.net, embedding)
        except Exception as exc:  # any failure leaves the (correct) eager path in use
            self.compile_error = f"{type(exc).__name__}: {exc}"
            self.backend, self.backend_note = "eager", ""
            return
        self.compile_error = ""
        if actor is not None:
            self.backend, self.backend_note = "cpp", ""
            self._compiled = (policy, embedding, actor, reference.spec())
        else:
            self.backend, self.backend_note = "numpy", note
            self._compiled = (policy, embedding, reference, None)

    def swap(self, policy: LoadedPolicy) -> None:
        """Make ``policy`` the one used from the next tick on (a single reference assignment).

        The compiled action mean for the current instruction is built first, so the new version runs compiled
        from its first tick. ``policy.net`` must not be modified afterwards.
        """
        with self._compile_lock:
            with self._lock:
                embedding = self._embedding
            self._compile(policy, embedding)
            self.policy = policy

    def set_instruction(self, text: str, embedding: np.ndarray) -> None:
        """Start a new task with this instruction and embedding; the stage restarts at 0."""
        tensor = torch.from_numpy(np.asarray(embedding, dtype=np.float32).reshape(1, -1).copy())
        with self._compile_lock:
            self._compile(self.policy, tensor)
            with self._lock:
                self._instruction = text
                self._embedding = tensor
                self._episode += 1
                self.builder.reset()

    @property
    def compiled(self) -> bool:
        """True when the next tick with the current version and instruction runs the compiled action mean."""
        compiled = self._compiled
        return compiled is not None and compiled[0] is self.policy and compiled[1] is self._embedding

    def native_model(self) -> dict[str, Any]:
        """Return the current version and instruction as the C++ tick's model (``coda_core_cpp._rt``'s hand-over).

        The same holds as :meth:`tick` (no version, no instruction, an embedding that does not fit); the action mean
        is the C++ one built for this pair (its spec), or None with the reason the C++ tick then holds with (the
        C++ action mean failed to build or its check, or ``use_compiled`` is off). Call it after :meth:`swap` and
        :meth:`set_instruction`, from the thread that calls them.
        """
        with self._lock:
            policy, embedding, episode = self.policy, self._embedding, self._episode
        compiled = self._compiled
        fits = policy is None or embedding is None or embedding.shape[1] == policy.net.cfg.instruction_dim
        spec, unavailable = None, ""
        if policy is not None and embedding is not None and fits:
            if compiled is not None and compiled[0] is policy and compiled[1] is embedding and compiled[3] is not None:
                spec = compiled[3]
            else:
                why = self.backend_note or self.compile_error or "compiled action means are off (use_compiled)"
                unavailable = f"no C++ action mean for this version: {why}"
        return {
            "has_policy": policy is not None, "has_instruction": embedding is not None, "instruction_fits": fits,
            "episode": episode, "version": policy.version if policy else "", "sha256": policy.sha256 if policy else "",
            "net_max_delta": float(policy.net.cfg.max_delta) if policy else 0.05, "actor": spec,
            "unavailable": unavailable,
        }

    def set_arm(self, stamp: float, ee_pos: np.ndarray, gripper: float) -> None:
        """Latest arm state (stamp in s) as tool centre point and finger opening."""
        self._joints = (stamp, np.asarray(ee_pos, dtype=np.float64), float(gripper))

    def set_objects(self, stamp: float, objects: list[ObjectInfo]) -> None:
        """Latest object states (stamp in s); their observation slots are filled here, not at every tick."""
        objects = list(objects)
        self._objects = (stamp, objects, self.builder.object_slots(objects))

    def _hold(self, reason: str, policy: LoadedPolicy | None) -> Command:
        version, sha256 = (policy.version, policy.sha256) if policy is not None else ("", "")
        return Command(np.zeros(3), 0.0, True, reason, int(self.builder.stage), version, sha256)

    def tick(self, now: float) -> Command:
        """Compute this tick's command at time ``now`` (s, same clock as the stamps)."""
        policy = self.policy  # read once: a swap during the tick takes effect next tick
        with self._lock:
            embedding = self._embedding
        if policy is None:
            return self._hold("no policy version loaded", policy)
        if embedding is None:
            return self._hold("no instruction", policy)
        joints, objects = self._joints, self._objects
        if joints is None or objects is None:
            return self._hold("waiting for " + ("joint_states" if joints is None else "object_states"), policy)
        for name, stamp in (("joint_states", joints[0]), ("object_states", objects[0])):
            if now - stamp > self.cfg.max_input_age:
                return self._hold(f"{name} stale: {now - stamp:.3f} s old > {self.cfg.max_input_age} s", policy)
        obs = self.builder.build(joints[1], joints[2], objects[1], objects[2])
        if not np.all(np.isfinite(obs)):
            return self._hold("non-finite input in the observation", policy)
        if embedding.shape[1] != policy.net.cfg.instruction_dim:
            return self._hold("instruction embedding does not fit the policy", policy)
        compiled = self._compiled
        if compiled is not None and compiled[0] is policy and compiled[1] is embedding:
            action = np.asarray(compiled[2](obs), dtype=np.float64)
        else:
            with torch.inference_mode():
                mean, _ = policy.net(torch.from_numpy(obs)[None], embedding)
            action = mean[0].numpy().astype(np.float64)
        if not np.all(np.isfinite(action)):
            return self._hold("policy output not finite", policy)
        limit = min(self.cfg.max_delta, policy.net.cfg.max_delta)
        delta = np.clip(action[:3] * policy.net.cfg.max_delta, -limit, limit)
        gripper = float(np.clip(action[3], -1.0, 1.0))
        return Command(delta, gripper, False, "", int(self.builder.stage), policy.version, policy.sha256)


def native_tick_spec(cfg: ControlConfig, builder: ObservationBuilder, kinematics: PandaKinematics) -> dict[str, Any]:
    """Return the spec of ``coda_core_cpp._rt.ControlTick`` (and ``ControlLoop``) for this configuration.

    The settings of ``cfg``, the observation layout and stage program of ``builder`` and the kinematic chain and
    joint names of ``kinematics``: with it the C++ tick decides as :meth:`PolicyController.tick` does.
    """
    layout = builder.layout
    return {
        "control_rate_hz": float(cfg.control_rate_hz), "max_input_age": float(cfg.max_input_age),
        "max_delta": float(cfg.max_delta), "obs_dim": int(builder.obs_dim),
        "slot_base": [int(layout[f"obj{k}_pos"][0]) for k in range(builder.max_objects)],
        "stage_col": int(layout["stage_index"][0]), "program": builder.program.source,
        "program_layout": {name: (int(o), int(n)) for name, (o, n) in builder.program_layout.items()},
        "chain": kinematics.chain_spec(), "joint_names": list(kinematics.names),
    }
