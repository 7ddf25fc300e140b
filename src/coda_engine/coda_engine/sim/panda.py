# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The Franka Panda + hand on a table, built once with ``mujoco.MjSpec`` from dm-robotics-panda assets.

The robot files stay untouched: the arm is parsed, the hand is attached to ``wrist_site`` through a
frame with the prefix ``hand_``, position actuators are added to the seven joints, and the visual
meshes are replaced by simplified copies (about 97% fewer faces) cached outside the source tree, keyed
by the SHA-256 of the original file. Scenes copy the base spec (:func:`base_spec`) and add objects.

World frame = robot base frame: origin at the arm base, z up, the table top at ``z = 0``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

# Joint names of the arm (in actuator order after the hand actuator).
ARM_JOINTS: tuple[str, ...] = tuple(f"panda_joint{i}" for i in range(1, 8))
FINGER_JOINTS: tuple[str, str] = ("hand_panda_finger_joint1", "hand_panda_finger_joint2")
HAND_ACTUATOR = "hand_panda_hand_actuator"
TCP_SITE = "hand_TCP"
SCENE_CAMERA = "scene_cam"
# A comfortable home pose: gripper pointing down above the table, about 0.45 m in front of the base.
HOME_QPOS: tuple[float, ...] = (0.0, -0.3, 0.0, -2.3, 0.0, 2.0, 0.785)
# Collision bits: the robot collides with objects but not with the table or itself.
ROBOT_CONTYPE, ROBOT_CONAFFINITY = 2, 0
TABLE_CONTYPE, TABLE_CONAFFINITY = 1, 1
OBJECT_CONTYPE, OBJECT_CONAFFINITY = 1, 3
MESH_REDUCTION = 0.97
_CACHE_VERSION = "1"


@dataclass(frozen=True)
class ArmGains:
    """Position-servo gains of the arm joints and the physics options of the base model."""

    kp_shoulder: float = 4500.0
    """Stiffness of joints 1-4, N m / rad."""
    kv_shoulder: float = 120
    """Damping of joints 1-4, N m s / rad."""
    kp_wrist: float = 2000.0
    """Stiffness of joints 5-7, N m / rad."""
    kv_wrist: float = 50
    """Damping of joints 5-7, N m s / rad."""
    timestep: float = 0.002
    """Physics time step, seconds."""


def asset_dir() -> Path:
    """Directory of the dm-robotics-panda MJCF and meshes (raises if the package is missing)."""
    spec = importlib.util.find_spec("dm_robotics")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("dm-robotics-panda is not installed (pip install --no-deps dm-robotics-panda)")
    path = Path(next(iter(spec.submodule_search_locations))) / "panda" / "assets" / "panda"
    if not (path / "panda.xml").is_file():
        raise FileNotFoundError(f"no panda.xml under {path}")
    return path


def cache_dir() -> Path:
    """Cache directory for derived assets: ``$CODA_CACHE_DIR`` or ``~/.cache/coda``, created on first use."""
    root = os.environ.get("CODA_CACHE_DIR") or str(Path.home() / ".cache" / "coda")
    path = Path(root) / "sim_meshes"
    path.mkdir(parents=True, exist_ok=True)
    return path


def simplified_mesh(source: Path, reduction: float = MESH_REDUCTION) -> Path:
    """Return a cached copy of ``source`` with ``reduction`` of its faces removed (built on first use)."""
    digest = hashlib.sha256(source.read_bytes() + f"{reduction}:{_CACHE_VERSION}".encode()).hexdigest()[:20]
    target = cache_dir() / f"{source.stem}-{digest}.stl"
    if target.is_file():
        return target
    import fast_simplification

    points, faces = read_obj(source)
    if len(faces) > 2000:  # tiny meshes (the fingers) are kept as they are
        points, faces = fast_simplification.simplify(points, faces, target_reduction=reduction)
    # Atomic write: several worker processes may build the cache at the same time.
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".stl")
    os.close(fd)
    write_stl(Path(tmp), points, faces)
    os.replace(tmp, target)
    return target


def read_obj(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (float32, n x 3) and triangles (int32, m x 3) of a Wavefront OBJ file (polygons fanned)."""
    vertices: list[list[float]] = []
    faces: list[list[int]] = []
    for line in path.read_text().splitlines():
        if line.startswith("v "):
            vertices.append([float(x) for x in line.split()[1:4]])
        elif line.startswith("f "):
            idx = [int(tok.split("/")[0]) for tok in line.split()[1:]]
            idx = [i - 1 if i > 0 else len(vertices) + i for i in idx]
            faces.extend([idx[0], idx[k], idx[k + 1]] for k in range(1, len(idx) - 1))
    return np.asarray(vertices, dtype=np.float32), np.asarray(faces, dtype=np.int32)


def write_stl(path: Path, points: np.ndarray, faces: np.ndarray) -> None:
    """Write a binary STL file of the triangles ``faces`` over ``points``."""
    tri = np.asarray(points, dtype=np.float32)[np.asarray(faces)]
    normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    record = np.zeros(len(tri), dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
    record["n"], record["v"] = normals, tri
    with path.open("wb") as stream:
        stream.write(b"coda simplified mesh".ljust(80, b" "))
        stream.write(np.uint32(len(tri)).tobytes())
        stream.write(record.tobytes())


def _simplify_meshes(spec: mujoco.MjSpec, folder: Path) -> None:
    for mesh in spec.meshes:
        mesh.file = str(simplified_mesh(folder / mesh.file))


def _plain_materials(spec: mujoco.MjSpec) -> None:
    # Simplified meshes have no texture coordinates: use flat colours instead of the texture.
    for material in spec.materials:
        material.textures = [""] * len(material.textures)
        material.rgba = [0.92, 0.92, 0.92, 1.0] if "white" in material.name else [0.35, 0.35, 0.38, 1.0]
    for texture in list(spec.textures):
        spec.delete(texture)


def _robot_collisions(spec: mujoco.MjSpec) -> None:
    for geom in spec.geoms:
        if geom.contype or geom.conaffinity:
            geom.contype, geom.conaffinity = ROBOT_CONTYPE, ROBOT_CONAFFINITY


def _build() -> mujoco.MjSpec:
    folder = asset_dir()
    gains = ArmGains()
    arm = mujoco.MjSpec.from_file(str(folder / "panda.xml"))
    hand = mujoco.MjSpec.from_file(str(folder / "panda_hand.xml"))
    for part in (arm, hand):
        _simplify_meshes(part, folder)
        _plain_materials(part)
        _robot_collisions(part)
    # Finger pads: more friction (sliding and torsional) than the default, and a stiffer grip (the
    # same 0..0.04 m opening per unit of command, 2.5x the squeeze), so balls and cylinders stay put.
    for geom in hand.geoms:
        if geom.name.endswith("finger_collision"):
            geom.friction = [2.0, 0.05, 0.001]
            geom.condim = 4
            geom.solref = [0.004, 1.0]  # stiffer than the default 0.02 s: millimetre, not centimetre, squeeze
    grip = hand.actuator("panda_hand_actuator")
    grip.gainprm[0] = 60.0
    grip.biasprm[1:3] = [-1500.0, -80.0]
    wrist = arm.site("wrist_site")
    frame = arm.body("panda_link8").add_frame(pos=wrist.pos, quat=wrist.quat)
    frame.attach_body(hand.body("panda_hand"), "hand_", "")
    for i, name in enumerate(ARM_JOINTS):
        joint = arm.joint(name)
        act = arm.add_actuator(name=f"{name}_pos", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        kp, kv = (gains.kp_shoulder, gains.kv_shoulder) if i < 4 else (gains.kp_wrist, gains.kv_wrist)
        act.set_to_position(kp=kp, kv=kv)
        act.ctrlrange = joint.range
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-87.0, 87.0] if i < 4 else [-12.0, 12.0]
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        joint.armature = 0.1
        joint.damping = np.maximum(joint.damping, 0.05)  # the asset's joint 6 has a negative damping
    # The scene around the robot.
    spec = arm
    spec.modelname = "coda_panda_table"
    spec.option.timestep = gains.timestep
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.visual.global_.offwidth = 640
    spec.visual.global_.offheight = 480
    spec.visual.quality.shadowsize = 0
    spec.visual.headlight.ambient = [0.35, 0.35, 0.35]
    spec.visual.headlight.diffuse = [0.5, 0.5, 0.5]
    world = spec.worldbody
    table = world.add_body(name="table", pos=[0.35, 0.0, -0.025])
    table.add_geom(
        name="table_top",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[0.6, 0.65, 0.025],
        rgba=[0.55, 0.45, 0.35, 1.0],
        contype=TABLE_CONTYPE,
        conaffinity=TABLE_CONAFFINITY,
        friction=[0.8, 0.005, 0.0001],
    )
    world.add_light(name="key_light", pos=[0.5, -0.4, 1.6], dir=[-0.1, 0.3, -1.0], diffuse=[0.6, 0.6, 0.6],
                    castshadow=False)
    world.add_camera(name=SCENE_CAMERA, pos=[1.45, 0.0, 0.95], xyaxes=[0, 1, 0, -0.6, 0, 0.8], fovy=45)
    key = spec.add_key(name="home")
    key.qpos = [*HOME_QPOS, 0.04, 0.04]
    key.ctrl = [1.0, *HOME_QPOS]
    return spec


@functools.cache
def _base_spec() -> mujoco.MjSpec:
    return _build()


def base_spec() -> mujoco.MjSpec:
    """Return a fresh copy of the base spec (robot + table + camera + light), built once per process."""
    return _base_spec().copy()


def base_model() -> mujoco.MjModel:
    """Compile the base spec alone (no objects)."""
    return base_spec().compile()
