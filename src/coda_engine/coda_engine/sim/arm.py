# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The simulated arm: a scene's MuJoCo model driven by end-effector displacements (pure, no ROS).

``SimArm.reset(scene)`` loads the scene; ``SimArm.step(action)`` applies ``(dx, dy, dz, gripper)``:
the displacement (world = base frame, m, clipped to ``max_delta`` per axis) is added to the previous
commanded tool point (to the measured one when the arm lags by more than ``track_tolerance``), one
damped-least-squares IK iteration from ``mj_jacSite`` (position + a fixed gripper-down orientation,
posture in the null space) gives the joint targets, and the physics runs ``physics_steps_per_control``
steps (2 ms each; 50 at the default 10 Hz). ``gripper`` -1 opens, +1 closes. The observation is the
flat float32 vector of :mod:`coda_engine.sim.layout`. Its stage index is always that of the family's
default potential program: the convention every demonstration is recorded in and the policy reads. Another
program given to :meth:`SimArm.reset` (a round's shaping potential) is tracked beside it, in ``stage`` and
``phi``, without changing what the policy sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from coda_engine.sim import panda, stages
from coda_engine.sim.families import WorldState, get_family
from coda_engine.sim.layout import LAYOUT, observation_template, scene_layout
from coda_engine.sim.model import scene_model
from coda_engine.sim.scene import ObjectSpec, Scene


@dataclass(frozen=True)
class ArmConfig:
    """Control settings of the simulated arm."""

    control_hz: float = 10.0
    """Control steps per second; the physics runs ``round(1 / (control_hz * 0.002))`` steps per control step."""
    max_delta: float = 0.05
    """Bound of each displacement component, m per control step."""
    workspace_low: tuple[float, float, float] = (0.15, -0.5, 0.012)
    """Lower corner of the box the commanded tool centre point is clipped to, m."""
    workspace_high: tuple[float, float, float] = (0.85, 0.5, 0.5)
    """Upper corner of that box, m."""
    track_tolerance: float = 0.02
    """While the tool point is within this distance (m, per axis) of the last command, the next displacement is
    added to the command; otherwise to the measured tool point."""
    ik_iterations: int = 1
    """Damped-least-squares iterations per control step (targets are re-based on the measured tool point every
    step, so one iteration per step suffices for displacements within ``max_delta``)."""
    ik_damping: float = 0.03
    """Damping lambda of the least-squares step."""
    orientation_weight: float = 0.5
    """Weight of the orientation error against the position error (m per rad)."""
    posture_gain: float = 0.2
    """Null-space pull toward the home posture per iteration."""

    def __post_init__(self) -> None:
        """Check ranges."""
        if not 0.5 <= self.control_hz <= 100.0:
            raise ValueError(f"ArmConfig.control_hz={self.control_hz} must be in [0.5, 100]")
        if not 0.0 < self.max_delta <= 0.2:
            raise ValueError(f"ArmConfig.max_delta={self.max_delta} must be in (0, 0.2] m")
        if self.ik_iterations < 1:
            raise ValueError(f"ArmConfig.ik_iterations={self.ik_iterations} must be >= 1")


class DlsIk:
    """Damped-least-squares IK of the tool centre point (position + gripper-down orientation) on a model."""

    def __init__(self, model: mujoco.MjModel, config: ArmConfig) -> None:
        """Index the arm joints of ``model``; keep a private MjData for kinematics."""
        m = model
        self.model, self.config = m, config
        self.data = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, self.data, 0)
        self.arm_q = np.array([m.joint(n).qposadr[0] for n in panda.ARM_JOINTS])
        self.arm_v = np.array([m.joint(n).dofadr[0] for n in panda.ARM_JOINTS])
        if not (np.all(np.diff(self.arm_q) == 1) and np.all(np.diff(self.arm_v) == 1)):
            raise ValueError("the arm joints must be contiguous in qpos/qvel")
        self.arm_q_slice = slice(int(self.arm_q[0]), int(self.arm_q[-1]) + 1)
        self.arm_v_slice = slice(int(self.arm_v[0]), int(self.arm_v[-1]) + 1)
        self.jac = np.zeros((6, 7))
        ids = [m.joint(n).id for n in panda.ARM_JOINTS]
        self.q_lo = m.jnt_range[ids, 0] + 0.01
        self.q_hi = m.jnt_range[ids, 1] - 0.01
        self.tcp = m.site(panda.TCP_SITE).id
        self.home = np.array(panda.HOME_QPOS)
        self.jacp = np.zeros((3, m.nv))
        self.jacr = np.zeros((3, m.nv))
        mujoco.mj_kinematics(m, self.data)
        self.rot_home = self.data.site_xmat[self.tcp].reshape(3, 3).copy()

    def solve(self, target: np.ndarray, q_start: np.ndarray, iterations: int | None = None) -> np.ndarray:
        """Joint positions after ``iterations`` DLS steps from ``q_start`` toward ``target`` (m, world)."""
        m, kd, cfg = self.model, self.data, self.config
        q = np.array(q_start, dtype=np.float64)
        lam2 = cfg.ik_damping**2
        w = cfg.orientation_weight
        goal_rot = self.rot_home
        eye = lam2 * np.eye(6)
        k = cfg.posture_gain
        qs, vs = self.arm_q_slice, self.arm_v_slice
        jac = self.jac
        for _ in range(iterations or cfg.ik_iterations):
            kd.qpos[qs] = q
            mujoco.mj_kinematics(m, kd)
            mujoco.mj_comPos(m, kd)
            mujoco.mj_jacSite(m, kd, self.jacp, self.jacr, self.tcp)
            rot = kd.site_xmat[self.tcp].reshape(3, 3)
            err = np.empty(6)
            err[:3] = target - kd.site_xpos[self.tcp]
            # sum_i rot_i x goal_i = vee(G R^T - R G^T): the small-angle rotation error, gripper-down.
            skew = goal_rot @ rot.T
            err[3] = (0.5 * w) * (skew[2, 1] - skew[1, 2])
            err[4] = (0.5 * w) * (skew[0, 2] - skew[2, 0])
            err[5] = (0.5 * w) * (skew[1, 0] - skew[0, 1])
            jac[:3] = self.jacp[:, vs]
            jac[3:] = w * self.jacr[:, vs]
            posture = self.home - q
            # DLS step toward the target, with the posture pull projected into the null space.
            dq = jac.T @ np.linalg.solve(jac @ jac.T + eye, err - k * (jac @ posture)) + k * posture
            q = np.minimum(np.maximum(q + dq, self.q_lo), self.q_hi)
        return q

    def forward(self, q: np.ndarray) -> np.ndarray:
        """Return the tool centre point (3, m, world) at arm joints ``q`` (7, rad)."""
        self.data.qpos[self.arm_q] = q
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.site_xpos[self.tcp].copy()

    def position_error(self, q: np.ndarray, target: np.ndarray) -> float:
        """Distance between the tool centre point at ``q`` and ``target``, m."""
        return float(np.linalg.norm(self.forward(q) - target))

    def reachable(self, target: np.ndarray, iterations: int = 60, tolerance: float = 0.005) -> bool:
        """Tell whether IK from the home posture gets within ``tolerance`` of ``target`` gripper-down."""
        q = self.solve(np.asarray(target, dtype=np.float64), self.home, iterations)
        error = self.position_error(q, target)
        rot = self.data.site_xmat[self.tcp].reshape(3, 3)
        tilt = float(np.arccos(np.clip(rot[:, 2] @ self.rot_home[:, 2], -1, 1)))
        return error < tolerance and tilt < 0.1


class EndEffectorCommander:
    """The end-effector action space shared by simulated and real arms: displacement -> tool point -> joint targets.

    A displacement (clipped to ``max_delta`` per axis) is added to the previous commanded tool point while the
    arm tracks it within ``track_tolerance`` (so servo lag does not shrink displacements), otherwise to the measured
    tool point (contact, blocking); the result is clipped to the workspace box and turned into joint targets by one
    warm-started :class:`DlsIk` solve.
    """

    def __init__(self, ik: DlsIk, config: ArmConfig) -> None:
        """Use ``ik`` (the arm's kinematic model) with the limits of ``config``."""
        self.ik, self.config = ik, config
        self._low = np.asarray(config.workspace_low, dtype=np.float64)
        self._high = np.asarray(config.workspace_high, dtype=np.float64)
        self.tcp_target = np.zeros(3)
        """Last commanded tool point, m."""
        self.q_target = np.zeros(7)
        """Joint targets of the last command, rad."""

    def reset(self, tcp: np.ndarray, q: np.ndarray) -> None:
        """Start from the measured tool point ``tcp`` and arm joints ``q``."""
        self.tcp_target = np.array(tcp, dtype=np.float64)
        self.q_target = np.array(q, dtype=np.float64)

    def command(self, delta: np.ndarray, tcp_measured: np.ndarray, q_measured: np.ndarray) -> np.ndarray:
        """Joint targets (7) for displacement ``delta`` (3, m) given the measured tool point and joints."""
        cfg = self.config
        step = np.minimum(np.maximum(delta, -cfg.max_delta), cfg.max_delta)
        if np.abs(self.tcp_target - tcp_measured).max() < cfg.track_tolerance:
            base, q_start = self.tcp_target, self.q_target
        else:
            base, q_start = tcp_measured, q_measured
        target = np.minimum(np.maximum(base + step, self._low), self._high)
        self.q_target = self.ik.solve(target, q_start)
        self.tcp_target = target
        return self.q_target


class SimArm:
    """One simulated Panda in one scene at a time."""

    joint_names: tuple[str, ...] = (*panda.ARM_JOINTS, *panda.FINGER_JOINTS)
    """Names of the joints reported by :meth:`joint_positions` (the hand's as in the attached model)."""

    def __init__(self, config: ArmConfig | None = None) -> None:
        """Create an arm; call :meth:`reset` with a scene before stepping."""
        self.config = config or ArmConfig()
        self.model: mujoco.MjModel | None = None
        self.data: mujoco.MjData | None = None
        self.scene: Scene | None = None
        self.stage = 0
        """Stage of the active program (``reset``'s ``program``, else the family's default)."""
        self.phi = 0.0
        """Potential of the active program."""
        self.input_stage = 0
        """Stage of the family's default program: the observation's ``stage_index``."""
        self.steps = 0
        self._input_program: object | None = None
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._programs: dict[tuple[str, int], object] = {}

    # ------------------------------------------------------------------ set-up
    @property
    def physics_steps_per_control(self) -> int:
        """Physics steps in one control step."""
        assert self.model is not None
        return max(1, round(1.0 / (self.config.control_hz * self.model.opt.timestep)))

    @property
    def layout(self) -> dict[str, tuple[int, int]]:
        """Observation layout of the current scene (``LAYOUT`` + the scene's object-name aliases)."""
        return scene_layout(self.scene) if self.scene is not None else dict(LAYOUT)

    def reset(self, scene: Scene, program: str | None = None) -> np.ndarray:
        """Load ``scene`` (arm at home, objects at their scene poses); return the first observation.

        ``program`` is the staged potential program whose stage and potential are tracked in ``stage`` and
        ``phi`` (default: the family's). The observation's stage index follows the family's default program in
        either case: a program with stages inserted or split would otherwise shift the index the policy was
        trained on (a policy cloned from default-program demonstrations would read "lift" as "place").
        """
        scene.validate()
        family = get_family(scene.family)
        model = scene_model(scene)
        if model is not self.model:
            self._renderers.clear()
            self.model = model
            self.data = mujoco.MjData(model)
            self._ik = DlsIk(model, self.config)
            self._commander = EndEffectorCommander(self._ik, self.config)
            self._index(model)
        m, d = self.model, self.data
        assert d is not None
        mujoco.mj_resetDataKeyframe(m, d, 0)
        for obj in scene.objects:
            jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"{obj.name}_joint")
            if jid >= 0:
                adr = int(m.jnt_qposadr[jid])
                d.qpos[adr:adr + 3] = obj.position
                x, y, z, w = obj.orientation
                d.qpos[adr + 3:adr + 7] = (w, x, y, z)
        mujoco.mj_forward(m, d)
        self._ik.data.qpos[:] = d.qpos
        self._commander.reset(d.site_xpos[self._ik.tcp], d.qpos[self._ik.arm_q_slice])
        self.scene, self.family = scene, family
        self.steps = 0
        self._obs, slots = observation_template(scene)
        self._slot_bodies = [(base, m.body(name).id) for base, name in slots]
        self._slot_index = np.array([b + i for b, _ in self._slot_bodies for i in range(3)], dtype=np.intp)
        self._slot_body_ids = np.array([body for _, body in self._slot_bodies], dtype=np.intp)
        self._substeps = self.physics_steps_per_control
        self._target_body = m.body(scene.target_object).id
        self._goal_body = m.body(scene.goal_object).id if scene.goal_object else -1
        self.program = self._compiled(program, family.program)
        self._input_program = None if program is None else self._compiled(None, family.program)
        self.stage = self.input_stage = 0
        obs = self._observe()
        self._track_stage(obs)
        return obs

    def _compiled(self, program: str | None, default: str) -> object:
        """Compile ``program`` against this scene's layout (``default`` against ``LAYOUT`` when None), cached."""
        source = program if program is not None else default
        layout = LAYOUT if program is None else self.layout
        key = (source, id(layout) if program is not None else 0)
        if key not in self._programs:
            self._programs[key] = stages.compile_program(source, layout)
        return self._programs[key]

    def _index(self, m: mujoco.MjModel) -> None:
        self._arm_q = np.array([m.joint(n).qposadr[0] for n in panda.ARM_JOINTS])
        self._arm_v = np.array([m.joint(n).dofadr[0] for n in panda.ARM_JOINTS])
        self._finger_q = np.array([m.joint(n).qposadr[0] for n in panda.FINGER_JOINTS])
        self._finger_v = np.array([m.joint(n).dofadr[0] for n in panda.FINGER_JOINTS])
        self._arm_act = np.array([m.actuator(f"{n}_pos").id for n in panda.ARM_JOINTS])
        self._hand_act = m.actuator(panda.HAND_ACTUATOR).id
        self._tcp = m.site(panda.TCP_SITE).id
        self._q_lo, self._q_hi = self._ik.q_lo, self._ik.q_hi

    # ------------------------------------------------------------------ control
    def ik(self, target: np.ndarray, q_start: np.ndarray, iterations: int | None = None) -> np.ndarray:
        """Joint targets putting the tool centre point at ``target`` gripper-down (DLS from ``q_start``)."""
        return self._ik.solve(target, q_start, iterations)

    def tcp_position(self) -> np.ndarray:
        """Return the current tool centre point, world frame, m."""
        assert self.data is not None
        return self.data.site_xpos[self._tcp].copy()

    def step(self, action: np.ndarray) -> np.ndarray:
        """Apply ``(dx, dy, dz, gripper)`` for one control step; return the observation.

        Raises ValueError for a wrong shape or a non-finite value (nothing is applied then).
        """
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (4,) or not math.isfinite(a.sum()):
            raise ValueError(f"action must be 4 finite numbers (dx, dy, dz, gripper), got {action!r}")
        d = self.data
        assert d is not None
        q = self._commander.command(a[:3], d.site_xpos[self._tcp], d.qpos[self._ik.arm_q_slice])
        return self._advance(q, float(a[3]))

    def step_joint_targets(self, q: np.ndarray, gripper: float) -> np.ndarray:
        """One control step toward joint targets ``q`` (7 arm joints, rad) with gripper command in [-1, 1]."""
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (7,) or not np.all(np.isfinite(q)) or not math.isfinite(gripper):
            raise ValueError("joint targets must be 7 finite numbers and the gripper command finite")
        return self._advance(np.minimum(np.maximum(q, self._q_lo), self._q_hi), gripper)

    def _advance(self, q: np.ndarray, gripper: float) -> np.ndarray:
        d = self.data
        d.ctrl[self._arm_act] = q
        d.ctrl[self._hand_act] = 0.5 * (1.0 - min(max(gripper, -1.0), 1.0))
        mujoco.mj_step(self.model, d, self._substeps)
        self.steps += 1
        obs = self._observe()
        self._track_stage(obs)
        return obs

    # ------------------------------------------------------------------ state
    def _observe(self) -> np.ndarray:
        d = self.data
        assert d is not None
        obs = self._obs
        # Mean tool velocity over the last control step (zero after reset).
        obs[3:6] = (d.site_xpos[self._tcp] - obs[0:3]) * self.config.control_hz if self.steps else 0.0
        obs[0:3] = d.site_xpos[self._tcp]
        obs[6] = d.qpos[self._finger_q[0]] + d.qpos[self._finger_q[1]]
        obs[self._slot_index] = d.xpos[self._slot_body_ids].ravel()
        return obs.copy()

    def _track_stage(self, obs: np.ndarray) -> None:
        column = LAYOUT["stage_index"][0]
        obs[column] = self.stage
        self.phi, self.stage = self.program.evaluate(obs, self.stage)
        self.phi = float(self.phi)
        if self._input_program is None:
            self.input_stage = self.stage
        else:
            obs[column] = self.input_stage
            _, self.input_stage = self._input_program.evaluate(obs, self.input_stage)
        obs[column] = self.input_stage
        self._obs[column] = self.input_stage

    def world_state(self) -> WorldState:
        """Privileged state for success checks and experts."""
        d, scene = self.data, self.scene
        assert d is not None and scene is not None
        positions = {o.name: d.xpos[self.model.body(o.name).id].copy() for o in scene.objects}
        return WorldState(
            ee_pos=d.site_xpos[self._tcp].copy(),
            gripper=float(d.qpos[self._finger_q[0]] + d.qpos[self._finger_q[1]]),
            target=scene.target,
            target_pos=d.xpos[self._target_body].copy(),
            goal=scene.goal,
            goal_pos=d.xpos[self._goal_body].copy() if self._goal_body >= 0 else None,
            positions=positions,
        )

    def success(self) -> bool:
        """Task success of the current scene's family from the privileged state."""
        return self.family.success(self.world_state())

    def joint_positions(self) -> np.ndarray:
        """Positions of ``joint_names`` (rad for the arm, m for the fingers)."""
        assert self.data is not None
        return self.data.qpos[np.concatenate([self._arm_q, self._finger_q])].copy()

    def joint_velocities(self) -> np.ndarray:
        """Velocities of ``joint_names``."""
        assert self.data is not None
        return self.data.qvel[np.concatenate([self._arm_v, self._finger_v])].copy()

    def joint_efforts(self) -> np.ndarray:
        """Actuator forces of the arm joints and the finger tendon force split on both fingers (N m, N)."""
        assert self.data is not None
        hand = self.data.actuator_force[self._hand_act] / 2
        return np.concatenate([self.data.actuator_force[self._arm_act], [hand, hand]])

    def object_states(self) -> list[ObjectSpec]:
        """Return the scene's objects with their current poses and twists (world frame)."""
        d, m, scene = self.data, self.model, self.scene
        assert d is not None and m is not None and scene is not None
        states = []
        vel = np.zeros(6)
        for obj in scene.objects:
            body = m.body(obj.name).id
            w, x, y, z = d.xquat[body]
            mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_BODY, body, vel, 0)
            states.append(ObjectSpec(**{**obj.__dict__, "position": tuple(map(float, d.xpos[body])),
                                        "orientation": (float(x), float(y), float(z), float(w)),
                                        "linear": tuple(map(float, vel[3:])),
                                        "angular": tuple(map(float, vel[:3]))}))
        return states

    def render(self, width: int = 128, height: int = 128, camera: str = panda.SCENE_CAMERA) -> np.ndarray:
        """RGB keyframe (height x width x 3, uint8) from the scene camera (headless: set MUJOCO_GL=egl)."""
        assert self.model is not None and self.data is not None
        renderer = self._renderers.get((width, height))
        if renderer is None:
            renderer = mujoco.Renderer(self.model, height, width)
            self._renderers[(width, height)] = renderer
        renderer.update_scene(self.data, camera)
        return renderer.render()

    def close(self) -> None:
        """Release renderers."""
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
