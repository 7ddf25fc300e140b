# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Per-scene model: the base spec (robot, table, camera, light) plus the scene's objects and jitter."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

import mujoco
import numpy as np

from coda_engine.sim import panda
from coda_engine.sim.scene import (
    SHAPE_BIN,
    SHAPE_BOX,
    SHAPE_CYLINDER,
    SHAPE_REGION,
    SHAPE_SPHERE,
    ObjectSpec,
    RenderSettings,
    Scene,
)

BIN_WALL = 0.008
"""Wall and floor thickness of bins, m."""
_GEOM = {SHAPE_BOX: mujoco.mjtGeom.mjGEOM_BOX, SHAPE_CYLINDER: mujoco.mjtGeom.mjGEOM_CYLINDER,
         SHAPE_SPHERE: mujoco.mjtGeom.mjGEOM_SPHERE}


def _wxyz(xyzw: Sequence[float]) -> list[float]:
    x, y, z, w = xyzw
    return [w, x, y, z]


def _add_object(spec: mujoco.MjSpec, obj: ObjectSpec) -> None:
    friction = [obj.friction, 0.005, 0.0001]
    common = {"rgba": list(obj.rgba), "contype": panda.OBJECT_CONTYPE, "conaffinity": panda.OBJECT_CONAFFINITY}
    body = spec.worldbody.add_body(name=obj.name, pos=list(obj.position), quat=_wxyz(obj.orientation))
    hx, hy, hz = obj.size
    if obj.shape == SHAPE_BIN:
        wall = BIN_WALL
        parts = [("floor", [0, 0, wall / 2], [hx, hy, wall / 2]),
                 ("wall_px", [hx - wall / 2, 0, hz], [wall / 2, hy, hz]),
                 ("wall_nx", [-hx + wall / 2, 0, hz], [wall / 2, hy, hz]),
                 ("wall_py", [0, hy - wall / 2, hz], [hx - wall, wall / 2, hz]),
                 ("wall_ny", [0, -hy + wall / 2, hz], [hx - wall, wall / 2, hz])]
        for suffix, pos, size in parts:
            body.add_geom(name=f"{obj.name}_{suffix}", type=mujoco.mjtGeom.mjGEOM_BOX, pos=pos, size=size,
                          friction=friction, **common)
        return
    if obj.shape == SHAPE_REGION:
        body.add_geom(name=obj.name, type=mujoco.mjtGeom.mjGEOM_BOX, pos=[0, 0, 0], size=[hx, hy, hz],
                      rgba=list(obj.rgba), contype=0, conaffinity=0)
        return
    body.add_freejoint(name=f"{obj.name}_joint")
    size = {SHAPE_BOX: [hx, hy, hz], SHAPE_CYLINDER: [hx, hz, 0], SHAPE_SPHERE: [hx, 0, 0]}[obj.shape]
    body.add_geom(name=obj.name, type=_GEOM[obj.shape], size=size, mass=obj.mass, friction=friction,
                  condim=4, **common)


def _look(forward: np.ndarray) -> list[float]:
    """Quaternion (w, x, y, z) of a camera looking along ``forward`` with world z up in the image."""
    back = -forward / np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(back, right)
    mat = np.stack([right, up, back], axis=1)
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, mat.ravel())
    return quat.tolist()


def build_spec(objects: Sequence[ObjectSpec], render: RenderSettings) -> mujoco.MjSpec:
    """Build the base spec + objects + camera/light jitter (not compiled)."""
    spec = panda.base_spec()
    for obj in objects:
        _add_object(spec, obj)
    cam = spec.camera(panda.SCENE_CAMERA)
    base_pos = np.array(cam.pos, dtype=np.float64)
    cam.pos = (base_pos + np.asarray(render.camera_offset)).tolist()
    yaw, pitch = math.pi + render.camera_tilt[0], -math.atan2(0.6, 0.8) + render.camera_tilt[1]
    forward = np.array([math.cos(pitch) * math.cos(yaw), math.cos(pitch) * math.sin(yaw), math.sin(pitch)])
    cam.quat = _look(forward)
    light = spec.light("key_light")
    light.pos = (np.array(light.pos) + np.asarray(render.light_offset)).tolist()
    light.diffuse = (np.array(light.diffuse) * render.light_scale).tolist()
    return spec


def structure_key(objects: Sequence[ObjectSpec], render: RenderSettings) -> str:
    """Hash of everything that shapes the compiled model (poses of movable objects excluded)."""
    items = [(o.name, o.shape, o.rgba, o.size, o.mass, o.friction, o.position if o.is_static else None,
              o.orientation if o.is_static else None) for o in objects]
    text = json.dumps([items, render.__dict__], sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()


_MODEL_CACHE: dict[str, mujoco.MjModel] = {}
_MODEL_CACHE_SIZE = 16


def compile_objects(objects: Sequence[ObjectSpec], render: RenderSettings) -> mujoco.MjModel:
    """Compiled model of the objects (cached by structure; set movable poses through qpos)."""
    key = structure_key(objects, render)
    model = _MODEL_CACHE.pop(key, None)
    if model is None:
        model = build_spec(objects, render).compile()
    _MODEL_CACHE[key] = model  # most recently used last
    while len(_MODEL_CACHE) > _MODEL_CACHE_SIZE:
        _MODEL_CACHE.pop(next(iter(_MODEL_CACHE)))
    return model


def scene_model(scene: Scene) -> mujoco.MjModel:
    """Compiled model of a scene (built from its structured fields, not from its MJCF text)."""
    return compile_objects(scene.objects, RenderSettings.from_meta(scene.meta))


def scene_mjcf(objects: Sequence[ObjectSpec], render: RenderSettings) -> str:
    """Full MJCF text of a scene (mesh files refer to the local mesh cache)."""
    spec = build_spec(objects, render)
    spec.compile()
    return spec.to_xml()
