# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Scenes: the data types (aligned with ``coda_msgs/SceneSpec`` and ``ObjectState``) and the parameters.

:class:`Scene.to_dict` mirrors the message structure field by field (nested ``header``, ``rgba``,
``size``, ``pose``, ``twist``), so ``coda_engine/ros/convert.py`` can fill messages one to one, and
``Scene.from_dict(scene.to_dict()) == scene`` holds exactly. Values carried as float32 in the messages
(rgba, mass, friction) are rounded to float32 when a scene is generated, so a trip through the
message is exact as well.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SHAPE_BOX, SHAPE_CYLINDER, SHAPE_SPHERE, SHAPE_BIN, SHAPE_REGION = 0, 1, 2, 3, 4
SHAPE_NAMES: dict[int, str] = {0: "box", 1: "cylinder", 2: "sphere", 3: "bin", 4: "region"}
SHAPE_CODES: dict[str, int] = {v: k for k, v in SHAPE_NAMES.items()}
ROLE_DISTRACTOR, ROLE_TARGET, ROLE_GOAL = 0, 1, 2
SPLITS: tuple[str, ...] = ("id", "position", "instruction", "object", "distractor")
REFERRING_MODES: tuple[str, ...] = ("color_shape", "color", "shape", "relative")
MAX_OBJECTS = 7
"""Object slots of the observation: target, goal and up to five distractors."""
MAX_DISTRACTORS = MAX_OBJECTS - 2


def f32(value: float) -> float:
    """Round a float to the nearest float32 value (what a float32 message field carries)."""
    return float(np.float32(value))


@dataclass
class ObjectSpec:
    """One object of a scene; the fields of ``coda_msgs/ObjectState`` in flat form."""

    name: str
    """Unique in the scene, lower_snake_case (e.g. ``red_cube``); also the layout prefix."""
    shape: int
    """One of ``SHAPE_*``."""
    role: int
    """One of ``ROLE_*``."""
    color_name: str
    """Colour word used by instructions; empty if unnamed."""
    rgba: tuple[float, float, float, float]
    """Rendered colour, each channel in [0, 1]."""
    size: tuple[float, float, float]
    """Half extents, m (box: x, y, z; cylinder: r, r, half height; sphere: r, r, r; bin: outer x, y, half height)."""
    mass: float
    """kg, > 0; 0 for static objects (bins, regions)."""
    friction: float
    """Sliding friction coefficient in [0.1, 2.0]."""
    position: tuple[float, float, float]
    """World frame (= robot base frame), m."""
    orientation: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)
    """Quaternion x, y, z, w (message order)."""
    linear: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Linear velocity, m/s."""
    angular: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Angular velocity, rad/s."""
    visible: bool = True
    """Always true in simulation."""

    @property
    def is_static(self) -> bool:
        """Bins and marked regions are fixed to the table."""
        return self.shape in (SHAPE_BIN, SHAPE_REGION)

    @property
    def noun(self) -> str:
        """Canonical shape word of the name."""
        return {SHAPE_BOX: "cube", SHAPE_CYLINDER: "cylinder", SHAPE_SPHERE: "ball", SHAPE_BIN: "bin",
                SHAPE_REGION: "marked_area"}[self.shape]

    @property
    def footprint(self) -> float:
        """Radius of the object's footprint on the table, m."""
        return float(math.hypot(self.size[0], self.size[1])) if self.shape != SHAPE_SPHERE else self.size[0]

    def to_dict(self) -> dict[str, Any]:
        """Nested dict with the field names and structure of ``coda_msgs/ObjectState``."""
        x, y, z = self.position
        qx, qy, qz, qw = self.orientation
        return {
            "name": self.name,
            "shape": int(self.shape),
            "role": int(self.role),
            "color_name": self.color_name,
            "rgba": dict(zip("rgba", map(float, self.rgba), strict=True)),
            "size": dict(zip("xyz", map(float, self.size), strict=True)),
            "mass": float(self.mass),
            "friction": float(self.friction),
            "pose": {"position": {"x": float(x), "y": float(y), "z": float(z)},
                     "orientation": {"x": float(qx), "y": float(qy), "z": float(qz), "w": float(qw)}},
            "twist": {"linear": dict(zip("xyz", map(float, self.linear), strict=True)),
                      "angular": dict(zip("xyz", map(float, self.angular), strict=True))},
            "visible": bool(self.visible),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ObjectSpec:
        """Inverse of :meth:`to_dict`."""
        pose, twist = data["pose"], data["twist"]
        return cls(
            name=str(data["name"]),
            shape=int(data["shape"]),
            role=int(data["role"]),
            color_name=str(data["color_name"]),
            rgba=tuple(float(data["rgba"][k]) for k in "rgba"),  # type: ignore[arg-type]
            size=tuple(float(data["size"][k]) for k in "xyz"),  # type: ignore[arg-type]
            mass=float(data["mass"]),
            friction=float(data["friction"]),
            position=tuple(float(pose["position"][k]) for k in "xyz"),  # type: ignore[arg-type]
            orientation=tuple(float(pose["orientation"][k]) for k in "xyzw"),  # type: ignore[arg-type]
            linear=tuple(float(twist["linear"][k]) for k in "xyz"),  # type: ignore[arg-type]
            angular=tuple(float(twist["angular"][k]) for k in "xyz"),  # type: ignore[arg-type]
            visible=bool(data["visible"]),
        )


@dataclass
class Scene:
    """A generated scene; the fields of ``coda_msgs/SceneSpec`` (header split into frame_id and stamp)."""

    scene_id: str
    """Unique id, e.g. ``r003-pick_place-000017``."""
    family: str
    """``reach`` | ``pick_place`` | ``push`` | ``stack``."""
    instruction: str
    """The natural-language task."""
    seed: int
    """Seed the generator used: ``generate_seeded(family, seed, params)`` rebuilds the scene."""
    split: str
    """Evaluation split (one of ``SPLITS``)."""
    perturbation_tags: list[str]
    """Perturbation axes applied, e.g. ``["position:shift=0.05", "instruction:synonym"]``."""
    objects: list[ObjectSpec]
    """Initial (settled) object layout."""
    target_object: str
    """Name of the object the instruction refers to."""
    goal_object: str
    """Name of the goal object; empty for reach."""
    mjcf: str = ""
    """The full generated MJCF text (mesh files refer to the local mesh cache)."""
    mjcf_uri: str = ""
    """Reference to the MJCF instead of inline text."""
    mjcf_sha256: str = ""
    """Hex SHA-256 of the MJCF text."""
    params_json: str = "{}"
    """JSON: ``params`` (SceneParams), ``render`` (camera/light jitter), ``generation`` (attempts, rejections)."""
    round: int = 0
    """Co-evolution round that generated the scene."""
    generation_program_id: str = ""
    """GenerationProgram that asked for the scene."""
    frame_id: str = "world"
    """Header frame of the object poses."""
    stamp_sec: int = 0
    """Header stamp, seconds."""
    stamp_nanosec: int = 0
    """Header stamp, nanoseconds."""

    def object(self, name: str) -> ObjectSpec:
        """Return the object called ``name`` (KeyError if absent)."""
        for obj in self.objects:
            if obj.name == name:
                return obj
        raise KeyError(f"scene {self.scene_id!r} has no object {name!r}")

    @property
    def target(self) -> ObjectSpec:
        """The object the instruction refers to."""
        return self.object(self.target_object)

    @property
    def goal(self) -> ObjectSpec | None:
        """The goal object, or None (reach)."""
        return self.object(self.goal_object) if self.goal_object else None

    @property
    def distractors(self) -> list[ObjectSpec]:
        """Objects not named by the instruction, in scene order."""
        return [o for o in self.objects if o.role == ROLE_DISTRACTOR]

    @property
    def slots(self) -> list[ObjectSpec | None]:
        """Objects in observation-slot order: target, goal (or None), distractors."""
        return [self.target, self.goal, *self.distractors]

    @property
    def meta(self) -> dict[str, Any]:
        """``params_json`` parsed."""
        return json.loads(self.params_json or "{}")

    @property
    def rejections(self) -> list[str]:
        """Why earlier layouts of this scene's generation were rejected (one reason per rejected attempt)."""
        return list(self.meta.get("generation", {}).get("rejections", []))

    def to_dict(self) -> dict[str, Any]:
        """Nested dict with the field names and structure of ``coda_msgs/SceneSpec``."""
        return {
            "header": {"stamp": {"sec": int(self.stamp_sec), "nanosec": int(self.stamp_nanosec)},
                       "frame_id": self.frame_id},
            "scene_id": self.scene_id,
            "family": self.family,
            "instruction": self.instruction,
            "seed": int(self.seed),
            "split": self.split,
            "perturbation_tags": list(self.perturbation_tags),
            "objects": [o.to_dict() for o in self.objects],
            "target_object": self.target_object,
            "goal_object": self.goal_object,
            "mjcf": self.mjcf,
            "mjcf_uri": self.mjcf_uri,
            "mjcf_sha256": self.mjcf_sha256,
            "params_json": self.params_json,
            "round": int(self.round),
            "generation_program_id": self.generation_program_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scene:
        """Inverse of :meth:`to_dict`; validates names and roles."""
        header = data.get("header", {})
        stamp = header.get("stamp", {})
        scene = cls(
            scene_id=str(data["scene_id"]),
            family=str(data["family"]),
            instruction=str(data["instruction"]),
            seed=int(data["seed"]),
            split=str(data["split"]),
            perturbation_tags=[str(t) for t in data["perturbation_tags"]],
            objects=[ObjectSpec.from_dict(o) for o in data["objects"]],
            target_object=str(data["target_object"]),
            goal_object=str(data["goal_object"]),
            mjcf=str(data.get("mjcf", "")),
            mjcf_uri=str(data.get("mjcf_uri", "")),
            mjcf_sha256=str(data.get("mjcf_sha256", "")),
            params_json=str(data.get("params_json", "{}")),
            round=int(data.get("round", 0)),
            generation_program_id=str(data.get("generation_program_id", "")),
            frame_id=str(header.get("frame_id", "world")),
            stamp_sec=int(stamp.get("sec", 0)),
            stamp_nanosec=int(stamp.get("nanosec", 0)),
        )
        scene.validate()
        return scene

    def validate(self) -> None:
        """Raise ValueError if the scene is malformed (unknown family/split, names, roles, sizes)."""
        from coda_engine.sim.families import FAMILIES

        problems = []
        if self.family not in FAMILIES:
            problems.append(f"family {self.family!r} is not one of {sorted(FAMILIES)}")
        if self.split not in SPLITS:
            problems.append(f"split {self.split!r} is not one of {SPLITS}")
        names = [o.name for o in self.objects]
        if len(set(names)) != len(names):
            problems.append(f"object names are not unique: {names}")
        if self.target_object not in names:
            problems.append(f"target_object {self.target_object!r} is not an object")
        if self.goal_object and self.goal_object not in names:
            problems.append(f"goal_object {self.goal_object!r} is not an object")
        if len(self.objects) > MAX_OBJECTS:
            problems.append(f"{len(self.objects)} objects, at most {MAX_OBJECTS}")
        for o in self.objects:
            values = [*o.size, *o.position, *o.orientation, *o.rgba, o.mass, o.friction]
            if not all(math.isfinite(v) for v in values):
                problems.append(f"{o.name}: non-finite value")
            if o.shape not in SHAPE_NAMES or o.role not in (0, 1, 2):
                problems.append(f"{o.name}: shape {o.shape} / role {o.role} unknown")
            if not all(0 < s <= 0.2 for s in o.size):
                problems.append(f"{o.name}: size {o.size} outside (0, 0.2]")
            if not 0.1 <= o.friction <= 2.0:
                problems.append(f"{o.name}: friction {o.friction} outside [0.1, 2]")
            if (o.mass <= 0) != o.is_static:
                problems.append(f"{o.name}: mass {o.mass} (must be > 0 unless static)")
        if problems:
            raise ValueError(f"malformed scene {self.scene_id!r}: " + "; ".join(problems))


@dataclass(frozen=True)
class SceneParams:
    """Generation parameters: the perturbation axes. ``None`` fields take the split's default."""

    split: str = "id"
    """Named split whose vocabularies/regions are used: ``id`` reads only the training data file;
    ``position`` | ``instruction`` | ``object`` | ``distractor`` add their OOD data file."""
    position_shift: float = 0.0
    """Object positions: metres by which the sampling regions grow outward (0 = the split's regions)."""
    num_distractors: tuple[int, int] | None = None
    """Number of distractor objects, inclusive range (at most ``MAX_DISTRACTORS``)."""
    referring: tuple[str, ...] | None = None
    """Instruction: how the target may be named, subset of ``REFERRING_MODES`` (colour+shape, colour only,
    shape only, by its position relative to another object)."""
    synonyms: bool | None = None
    """Instruction: replace nouns by synonyms of the split's vocabulary (probability 0.5 per noun); True needs a
    split with synonyms (``instruction``)."""
    size_scale: tuple[float, float] | None = None
    """Appearance: multiplier range on the families' nominal object sizes."""
    camera_jitter: float = 0.0
    """Camera position noise, m (uniform per axis), and view-direction noise (the same number in rad)."""
    light_jitter: float = 0.0
    """Light position noise, m, and intensity noise (fraction of the nominal diffuse light)."""
    settle_time: float = 0.4
    """Seconds of physics run after placement; objects must stay within ``stability_tolerance``."""
    stability_tolerance: float = 0.01
    """Largest allowed drift of an object during settling, m."""
    min_clearance: float = 0.02
    """Smallest gap between object footprints, m."""
    max_attempts: int = 200
    """Layouts tried before generation gives up with :class:`GenerationError`."""

    def __post_init__(self) -> None:
        """Check ranges and cross-field constraints; the error names the offending field."""
        errors = []
        if self.split not in SPLITS:
            errors.append(f"split={self.split!r} is not one of {SPLITS}")
        if not 0.0 <= self.position_shift <= 0.2:
            errors.append(f"position_shift={self.position_shift} must be in [0, 0.2] m")
        if self.num_distractors is not None:
            lo, hi = self.num_distractors
            if not 0 <= lo <= hi:
                errors.append(f"num_distractors={self.num_distractors} must satisfy 0 <= min <= max")
            elif hi > MAX_DISTRACTORS:
                errors.append(f"num_distractors={self.num_distractors}: at most {MAX_DISTRACTORS} distractors fit "
                              f"the observation ({MAX_OBJECTS} object slots)")
        if self.referring is not None:
            bad = [r for r in self.referring if r not in REFERRING_MODES]
            if bad or not self.referring:
                errors.append(f"referring={self.referring}: must be a non-empty subset of {REFERRING_MODES}")
        if self.size_scale is not None:
            lo, hi = self.size_scale
            if not 0.5 <= lo <= hi <= 1.5:
                errors.append(f"size_scale={self.size_scale} must satisfy 0.5 <= min <= max <= 1.5")
        if not 0.0 <= self.camera_jitter <= 0.1:
            errors.append(f"camera_jitter={self.camera_jitter} must be in [0, 0.1]")
        if not 0.0 <= self.light_jitter <= 0.5:
            errors.append(f"light_jitter={self.light_jitter} must be in [0, 0.5]")
        if not 0.0 <= self.settle_time <= 5.0:
            errors.append(f"settle_time={self.settle_time} must be in [0, 5] s")
        if not 0.001 <= self.stability_tolerance <= 0.1:
            errors.append(f"stability_tolerance={self.stability_tolerance} must be in [0.001, 0.1] m")
        if not 0.0 <= self.min_clearance <= 0.1:
            errors.append(f"min_clearance={self.min_clearance} must be in [0, 0.1] m")
        if self.max_attempts < 1:
            errors.append(f"max_attempts={self.max_attempts} must be >= 1")
        if errors:
            raise ValueError("invalid SceneParams: " + "; ".join(errors))

    @classmethod
    def for_split(cls, split: str, **overrides: Any) -> SceneParams:
        """Return the named split's parameters (its defaults come from the split's data file)."""
        return cls(split=split, **overrides)

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of the fields."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> SceneParams:
        """Inverse of :meth:`to_json_dict` (unknown keys raise)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown SceneParams fields: {sorted(unknown)}")
        problems = [p for name, value in data.items() if (p := _json_type_problem(name, value))]
        if problems:  # JSON from elsewhere: the types first, so the range checks compare numbers with numbers
            raise ValueError("invalid SceneParams: " + "; ".join(problems))
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()})


def _json_type_problem(name: str, value: Any) -> str:
    """'' when ``value`` has the JSON type of the SceneParams field ``name``, else what is wrong (naming the field)."""

    def number(v: Any, integer: bool = False) -> bool:
        return not isinstance(v, bool) and isinstance(v, int if integer else (int, float))

    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    if name == "split":
        ok, want = isinstance(value, str), "a split name"
    elif name in ("num_distractors", "size_scale"):
        ok = value is None or (isinstance(value, list) and len(value) == 2
                               and all(number(v, name == "num_distractors") for v in value))
        want = "null or [min, max] " + ("integers" if name == "num_distractors" else "numbers")
    elif name == "referring":
        ok, want = value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value)), \
            "null or a list of referring kinds"
    elif name == "synonyms":
        ok, want = value is None or isinstance(value, bool), "null, true or false"
    elif name == "max_attempts":
        ok, want = number(value, integer=True), "an integer"
    else:
        ok, want = number(value), "a number"
    return "" if ok else f"{name}={shown} must be {want}"


@dataclass
class RenderSettings:
    """Per-scene camera and light (the jitter applied to the base model's scene camera and light)."""

    camera_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Added to the camera position, m."""
    camera_tilt: tuple[float, float] = (0.0, 0.0)
    """Yaw and pitch added to the camera view direction, rad."""
    light_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Added to the key light position, m."""
    light_scale: float = 1.0
    """Multiplier on the key light's diffuse intensity."""

    @classmethod
    def sample(cls, rng: np.random.Generator, camera_jitter: float, light_jitter: float) -> RenderSettings:
        """Draw jitter uniformly within the given magnitudes."""
        cam = rng.uniform(-camera_jitter, camera_jitter, 5) if camera_jitter > 0 else np.zeros(5)
        light = rng.uniform(-light_jitter, light_jitter, 4) if light_jitter > 0 else np.zeros(4)
        return cls(
            camera_offset=tuple(float(v) for v in cam[:3]),  # type: ignore[arg-type]
            camera_tilt=(float(cam[3]), float(cam[4])),
            light_offset=tuple(float(v) for v in light[:3]),  # type: ignore[arg-type]
            light_scale=float(1.0 + light[3]),
        )

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> RenderSettings:
        """Read from a scene's parsed ``params_json``."""
        data = meta.get("render") or {}
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()})


@dataclass
class GenerationRecord:
    """How a scene came about: attempts and the reason each rejected layout was rejected."""

    attempts: int = 0
    """Layouts tried (the last one accepted)."""
    rejections: list[str] = field(default_factory=list)
    """One reason per rejected layout, e.g. ``overlap:red_cube,blue_ball``, ``unreachable:grasp``."""

    def reasons(self) -> dict[str, int]:
        """Rejection counts by kind (the part before the first colon)."""
        counts: dict[str, int] = {}
        for reason in self.rejections:
            kind = reason.split(":", 1)[0]
            counts[kind] = counts.get(kind, 0) + 1
        return counts


class GenerationError(RuntimeError):
    """No valid layout was found within ``max_attempts``; the message lists the rejection reasons."""


def positions_of(objects: Sequence[ObjectSpec]) -> np.ndarray:
    """Positions of ``objects`` as an (n, 3) array."""
    return np.array([o.position for o in objects], dtype=np.float64).reshape(-1, 3)
