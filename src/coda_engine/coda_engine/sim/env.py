# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Gymnasium API of the simulated arm: one :class:`CodaSimEnv`, and a batch of them in one process.

Observation: the flat float32 vector of :mod:`coda_engine.sim.layout` (the instruction is in ``info`` and
``env.instruction``). Action: ``[-1, 1]^4``, scaled to ``(dx, dy, dz) * max_delta`` m and the gripper
command (-1 open, +1 close). Reward: 1 on the step the task succeeds (sparse), which also terminates;
the family's ``max_steps`` truncates. ``info``: ``stage`` and ``phi`` of the tracked program (``program``, else the
family's default; the observation's stage index is always the default program's), ``success``, ``instruction``,
``scene_id``.
``reset(options={"scene": scene})`` runs a given scene; otherwise a new one is generated from the
env's ``np_random`` with ``params``. ``reset(options={"start_stage": k})`` starts the episode where the
family's scripted expert first enters stage ``k`` of the family's default program (the stages a critic's
diagnosis names; the expert drives there from the scene's start and its steps count toward ``max_steps``),
so that learning can concentrate on a later stage.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from coda_engine.sim.arm import ArmConfig, SimArm
from coda_engine.sim.families import get_family
from coda_engine.sim.generator import generate
from coda_engine.sim.layout import OBS_DIM
from coda_engine.sim.scene import Scene, SceneParams

OBS_BOUND = 10.0
"""Observation space bound: positions (m), sizes, colours, shape codes and stage indices all lie well within."""


class CodaSimEnv(gym.Env):
    """One simulated Panda; each reset generates (or receives) a scene of ``family``."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, family: str = "reach", params: SceneParams | None = None, config: ArmConfig | None = None,
                 render_mode: str | None = None, render_size: int = 64, program: str | None = None) -> None:
        """Choose the family, generation parameters, arm settings and (optionally) the tracked program."""
        self.family = get_family(family)
        self.params = params or SceneParams()
        self.arm = SimArm(config)
        self.render_mode = render_mode
        self.render_size = render_size
        self.program = program
        self.observation_space = gym.spaces.Box(-OBS_BOUND, OBS_BOUND, (OBS_DIM,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.scene: Scene | None = None
        self.instruction = ""
        self._steps = 0
        self._default: Any = None  # the family's default program (start-stage tracking), compiled on first use

    def _info(self, success: bool) -> dict[str, Any]:
        assert self.scene is not None
        return {"stage": int(self.arm.stage), "phi": float(self.arm.phi), "success": bool(success),
                "instruction": self.scene.instruction, "scene_id": self.scene.scene_id}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode in ``options["scene"]`` or in a newly generated scene."""
        super().reset(seed=seed)
        scene = (options or {}).get("scene")
        if scene is None:
            scene = generate(self.family.name, self.np_random, self.params)
        self.scene = scene
        self.instruction = scene.instruction
        self._steps = 0
        obs = self.arm.reset(scene, self.program)
        start_stage = int((options or {}).get("start_stage", 0))
        if start_stage > 0:
            obs = self._drive_to_stage(start_stage, obs)
        return obs, self._info(self.arm.success())

    def _drive_to_stage(self, stage: int, obs: np.ndarray) -> np.ndarray:
        """Let the scripted expert act until the default program's stage reaches ``stage``.

        The expert gets at most half the family's step limit; its steps count toward the episode's.
        """
        from coda_engine.sim.layout import LAYOUT
        from coda_engine.sim.stages import compile_program

        if self._default is None:
            self._default = compile_program(self.family.program, LAYOUT)
        expert = self.family.expert()
        expert.reset()
        limit = self.family.max_steps // 2
        _, reached = self._default.evaluate(obs, 0)
        while reached < stage and self._steps < limit and not self.arm.success():
            obs = self.arm.step(np.asarray(expert.act(self.arm.world_state()), dtype=np.float64))
            _, reached = self._default.evaluate(obs, reached)
            self._steps += 1
        return obs

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Apply a normalised action for one control step."""
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(4), -1.0, 1.0)
        scaled = np.concatenate([a[:3] * self.arm.config.max_delta, a[3:]])
        obs = self.arm.step(scaled)
        self._steps += 1
        success = self.arm.success()
        truncated = self._steps >= self.family.max_steps and not success
        return obs, float(success), bool(success), bool(truncated), self._info(success)

    def render(self) -> np.ndarray | None:
        """RGB frame of the scene camera (``render_mode="rgb_array"``)."""
        if self.render_mode != "rgb_array":
            return None
        return self.arm.render(self.render_size, self.render_size)

    def close(self) -> None:
        """Release the renderers."""
        self.arm.close()


def make_batch(num_envs: int, family: str = "reach", params: SceneParams | None = None,
               config: ArmConfig | None = None) -> gym.vector.SyncVectorEnv:
    """``num_envs`` environments stepped together in this process (gymnasium's synchronous vector env)."""
    if num_envs < 1:
        raise ValueError(f"num_envs={num_envs} must be >= 1")
    return gym.vector.SyncVectorEnv([lambda: CodaSimEnv(family, params, config) for _ in range(num_envs)])


def register() -> None:
    """Register ``coda/Sim-v0`` with gymnasium (keyword ``family`` etc. passed to ``gym.make``)."""
    if "coda/Sim-v0" not in gym.registry:
        gym.register(id="coda/Sim-v0", entry_point="coda_engine.sim.env:CodaSimEnv")
