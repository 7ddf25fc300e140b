# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``generate(family, rng, params) -> Scene``: sample, validate and settle a scene.

Each attempt draws a complete layout from its own generator (``default_rng([seed, attempt])``) and is
rejected, with a recorded reason, when objects overlap (``overlap:a,b``), a family constraint fails
(``push_distance``, ``blocked_path:x``, ``same_color``), the instruction would not name the target or
goal unambiguously (``ambiguous_reference:mode``, ``ambiguous_goal``), the arm cannot reach a key pose
gripper-down (``unreachable:grasp``), or an object drifts while the physics settles
(``unstable:name``). The same seed and parameters always give the same scene.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections import Counter
from collections.abc import Sequence

import mujoco
import numpy as np

from coda_engine.sim import panda
from coda_engine.sim.arm import ArmConfig, DlsIk, SimArm
from coda_engine.sim.families import get_family
from coda_engine.sim.families.base import TaskFamily
from coda_engine.sim.model import scene_mjcf
from coda_engine.sim.scene import (
    MAX_OBJECTS,
    ROLE_DISTRACTOR,
    SHAPE_BIN,
    SHAPE_BOX,
    SHAPE_CYLINDER,
    SHAPE_REGION,
    SHAPE_SPHERE,
    GenerationError,
    GenerationRecord,
    ObjectSpec,
    RenderSettings,
    Scene,
    SceneParams,
    f32,
)
from coda_engine.sim.vocab import Vocabulary, load_vocabulary

WORKSPACE = (0.25, 0.78, -0.40, 0.40)
"""Outer limit of any sampling region: x_min, x_max, y_min, y_max (m)."""
PLACEMENT_TRIES = 12
"""Positions tried for one object before the whole layout is rejected."""
NOUN_KEY = {SHAPE_BOX: "box", SHAPE_CYLINDER: "cylinder", SHAPE_SPHERE: "sphere", SHAPE_BIN: "bin",
            SHAPE_REGION: "region"}


class _RejectError(Exception):
    """A layout is invalid; the message is the recorded reason."""


class Drawer:
    """Samples object attributes from a split's vocabulary (the ``Draw`` protocol of the families)."""

    def __init__(self, rng: np.random.Generator, vocab: Vocabulary, params: SceneParams) -> None:
        """Bind the random generator, vocabulary and parameters; names are made unique per scene."""
        self.rng, self.vocab, self.params = rng, vocab, params
        self.names: set[str] = set()

    def color(self, exclude: tuple[str, ...] = ()) -> str:
        """Return a colour word of the vocabulary (not in ``exclude`` when possible)."""
        options = [c for c in self.vocab.colors if c not in exclude] or list(self.vocab.colors)
        return str(options[int(self.rng.integers(len(options)))])

    def scale(self) -> float:
        """Return a size multiplier (outside the training range for the object split)."""
        lo, hi = self.params.size_scale or self.vocab.size_scale
        excluded = self.vocab.exclude_size_range if self.params.size_scale is None else None
        for _ in range(100):
            value = float(self.rng.uniform(lo, hi))
            if excluded is None or not excluded[0] <= value <= excluded[1]:
                return value
        raise ValueError(f"SceneParams.size_scale={lo, hi} leaves no size outside the training range {excluded}")

    def make(self, shape: int, role: int, nominal: tuple[float, float, float], *, color: str | None = None,
             static: bool = False) -> ObjectSpec:
        """Return an object with sampled colour, size, mass, friction; position at the origin until placed."""
        color = color or self.color()
        base = np.asarray(self.vocab.colors[color][:3])
        rgb = np.clip(base + self.rng.uniform(-self.vocab.color_jitter, self.vocab.color_jitter, 3), 0, 1)
        size = tuple(f32(s) for s in (nominal if static else np.asarray(nominal) * self.scale()))
        mass = 0.0 if static else f32(self.rng.uniform(*self.vocab.mass))
        friction = f32(self.rng.uniform(*self.vocab.friction))
        noun = self.vocab.nouns[NOUN_KEY[shape]][0].replace(" ", "_")
        name = f"{color}_{noun}"
        suffix = 2
        while name in self.names:
            name, suffix = f"{color}_{noun}_{suffix}", suffix + 1
        self.names.add(name)
        yaw = float(self.rng.uniform(-0.35, 0.35)) if shape == SHAPE_BOX else 0.0
        return ObjectSpec(name=name, shape=shape, role=role, color_name=color,
                          rgba=(*(f32(c) for c in rgb), 1.0), size=size, mass=mass,  # type: ignore[arg-type]
                          friction=friction, position=(0.0, 0.0, 0.0),
                          orientation=(0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)))


def _region(box: tuple[float, float, float, float], grow: float) -> tuple[float, float, float, float]:
    x0, x1, y0, y1 = box
    return (max(x0 - grow, WORKSPACE[0]), min(x1 + grow, WORKSPACE[1]),
            max(y0 - grow, WORKSPACE[2]), min(y1 + grow, WORKSPACE[3]))


def _rest_z(obj: ObjectSpec) -> float:
    if obj.shape == SHAPE_BIN:
        return 0.0
    return float(obj.size[2])


def placement_box(obj: ObjectSpec, vocab: Vocabulary, params: SceneParams, goal: bool
                  ) -> tuple[float, float, float, float]:
    """Return the x_min, x_max, y_min, y_max within which ``obj``'s centre may lie.

    Its footprint stays inside the split's object or goal region, grown by ``params.position_shift`` and cut to the
    workspace.
    """
    box = _region(vocab.goal_region if goal else vocab.object_region, params.position_shift)
    margin = obj.footprint if obj.shape != SHAPE_BIN else max(obj.size[0], obj.size[1])
    return box[0] + margin * 0.5, box[1] - margin * 0.5, box[2] + margin, box[3] - margin


def placement_conflict(obj: ObjectSpec, x: float, y: float, others: Sequence[ObjectSpec], vocab: Vocabulary,
                       params: SceneParams) -> str:
    """Return why ``obj`` cannot stand at (``x``, ``y``) beside ``others`` ("" when it can).

    Inside the split's excluded region: ``position_excluded``; closer than ``params.min_clearance`` to another
    footprint: ``overlap:<other>,<obj>`` (flat regions may touch).
    """
    ex = vocab.exclude_region
    if ex is not None and (ex[0] - vocab.shift_min < x < ex[1] + vocab.shift_min
                           and ex[2] - vocab.shift_min < y < ex[3] + vocab.shift_min):
        return "position_excluded"
    for other in others:
        gap = math.hypot(x - other.position[0], y - other.position[1]) - obj.footprint - other.footprint
        flat = SHAPE_REGION in (obj.shape, other.shape)
        if gap < (params.min_clearance if not flat else 0.0):
            return f"overlap:{other.name},{obj.name}"
    return ""


def unreachable(family: TaskFamily, target: ObjectSpec, goal: ObjectSpec | None, ik: DlsIk) -> str:
    """Return ``unreachable:<key point>`` for the first family key point the arm cannot reach gripper-down.

    "" when it reaches every one.
    """
    for label, point in family.key_points(target, goal):
        if not ik.reachable(point):
            return f"unreachable:{label}"
    return ""


def _place(obj: ObjectSpec, rng: np.random.Generator, vocab: Vocabulary, params: SceneParams, goal: bool,
           placed: list[ObjectSpec]) -> ObjectSpec:
    x0, x1, y0, y1 = placement_box(obj, vocab, params, goal)
    if x0 >= x1 or y0 >= y1:
        box = _region(vocab.goal_region if goal else vocab.object_region, params.position_shift)
        margin = obj.footprint if obj.shape != SHAPE_BIN else max(obj.size[0], obj.size[1])
        raise ValueError(f"SceneParams: sampling region {box} is too small for {obj.name} (footprint {margin:.3f} m)")
    conflict = ""
    for _ in range(PLACEMENT_TRIES):
        x, y = float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1))
        conflict = placement_conflict(obj, x, y, placed, vocab, params)
        if not conflict:
            return dataclasses.replace(obj, position=(x, y, _rest_z(obj)))
    raise _RejectError(conflict)


def _phrase(obj: ObjectSpec, mode: str, vocab: Vocabulary) -> str:
    noun = vocab.nouns[NOUN_KEY[obj.shape]][0]
    if mode == "color":
        return f"{obj.color_name} object"
    if mode == "shape":
        return noun
    return f"{obj.color_name} {noun}"


def _matches(obj: ObjectSpec, ref: ObjectSpec, mode: str) -> bool:
    if mode == "color":
        return obj.color_name == ref.color_name
    if mode == "shape":
        return obj.shape == ref.shape
    return obj.color_name == ref.color_name and obj.shape == ref.shape


def _target_phrase(target: ObjectSpec, objects: list[ObjectSpec], mode: str, vocab: Vocabulary,
                   rng: np.random.Generator) -> str:
    others = [o for o in objects if o is not target and o.shape not in (SHAPE_REGION,)]
    if mode != "relative":
        if any(_matches(o, target, mode) for o in others):
            raise _RejectError(f"ambiguous_reference:{mode}")
        return _phrase(target, mode, vocab)
    anchors = [o for o in others if not any(_matches(p, o, "color_shape") for p in objects if p is not o)]
    if not anchors:
        raise _RejectError("ambiguous_reference:relative")
    anchor = anchors[int(rng.integers(len(anchors)))]
    dy = target.position[1] - anchor.position[1]
    if abs(dy) < 0.04:
        raise _RejectError("ambiguous_reference:relative")
    side, sign = ("left", 1.0) if dy > 0 else ("right", -1.0)
    rivals = [o for o in others if o is not anchor and o.shape == target.shape
              and sign * (o.position[1] - anchor.position[1]) > 0]
    if rivals:
        raise _RejectError("ambiguous_reference:relative")
    return f"{_phrase(target, 'shape', vocab)} to the {side} of the {_phrase(anchor, 'color_shape', vocab)}"


def _goal_phrase(goal: ObjectSpec | None, objects: list[ObjectSpec], vocab: Vocabulary) -> str:
    if goal is None:
        return ""
    if goal.shape == SHAPE_REGION:
        return vocab.nouns["region"][0]
    if any(_matches(o, goal, "color_shape") for o in objects if o is not goal):
        raise _RejectError("ambiguous_goal")
    return _phrase(goal, "color_shape", vocab)


def _synonymise(text: str, vocab: Vocabulary, rng: np.random.Generator) -> str:
    for word, options in sorted(vocab.synonyms.items(), key=lambda kv: -len(kv[0])):
        if f" {word}" in f" {text}" and rng.random() < 0.5:
            text = text.replace(word, options[int(rng.integers(len(options)))])
    return text


def _distractors(drawer: Drawer, target: ObjectSpec, count: int, confusable: bool) -> list[ObjectSpec]:
    result = []
    shapes = [SHAPE_BOX, SHAPE_CYLINDER, SHAPE_SPHERE]
    nominal = {SHAPE_BOX: (0.022, 0.022, 0.022), SHAPE_CYLINDER: (0.02, 0.02, 0.03), SHAPE_SPHERE: (0.024,) * 3}
    for i in range(count):
        rng = drawer.rng
        if confusable and i % 2 == 0:
            # Share the colour or the shape of the target, never both.
            if rng.random() < 0.5:
                shape = int(rng.choice([s for s in shapes if s != target.shape]))
                color = target.color_name
            else:
                shape = target.shape if target.shape in shapes else SHAPE_BOX
                color = drawer.color(exclude=(target.color_name,))
        else:
            shape = int(rng.choice(shapes))
            color = drawer.color(exclude=(target.color_name,) if shape == target.shape else ())
        result.append(drawer.make(shape, ROLE_DISTRACTOR, nominal[shape], color=color))
    return result


class Generator:
    """Scene generator with its reusable pieces (IK model, settling arm); :func:`generate` uses one."""

    def __init__(self) -> None:
        """Build the kinematics used for reachability checks."""
        self.ik = DlsIk(panda.base_model(), ArmConfig())
        self.arm = SimArm()

    def check_params(self, family: TaskFamily, vocab: Vocabulary, params: SceneParams) -> None:
        """Raise ValueError naming the parameter when ``params`` cannot give a valid scene."""
        if params.synonyms and not vocab.synonyms:
            raise ValueError(f"SceneParams.synonyms=True but split {params.split!r} has no synonyms "
                             "(use split='instruction')")
        lo = (params.num_distractors or vocab.num_distractors)[0]
        fixed = 2 if family.name != "reach" else 1
        if lo + fixed > MAX_OBJECTS:
            raise ValueError(f"SceneParams.num_distractors={params.num_distractors}: {family.name} needs {fixed} "
                             f"objects, at most {MAX_OBJECTS} fit")
        box = _region(vocab.object_region, params.position_shift)
        area = (box[1] - box[0]) * (box[3] - box[2])
        need = (lo + fixed) * math.pi * (0.035 + params.min_clearance / 2) ** 2 * 1.6
        if need > area:
            raise ValueError(f"SceneParams.num_distractors={params.num_distractors} with "
                             f"min_clearance={params.min_clearance}: {lo + fixed} objects cannot fit in the "
                             f"{area:.3f} m^2 region {box}")

    def draft(self, family: TaskFamily, vocab: Vocabulary, params: SceneParams, rng: np.random.Generator
              ) -> tuple[list[ObjectSpec], str, str, list[str]]:
        """One candidate layout + instruction; raises ``_RejectError`` with the reason."""
        drawer = Drawer(rng, vocab, params)
        target, goal = family.make_objects(drawer)
        lo, hi = params.num_distractors or vocab.num_distractors
        count = int(rng.integers(lo, hi + 1))
        distractors = _distractors(drawer, target, count, vocab.confusable_distractors)
        placed: list[ObjectSpec] = []
        if goal is not None:
            goal = _place(goal, rng, vocab, params, True, placed)
            placed.append(goal)
        target = _place(target, rng, vocab, params, False, placed)
        placed.append(target)
        for i, obj in enumerate(distractors):
            distractors[i] = _place(obj, rng, vocab, params, False, placed)
            placed.append(distractors[i])
        reason = family.check_layout(target, goal, distractors)
        if reason:
            raise _RejectError(reason)
        objects = [target, *([goal] if goal is not None else []), *distractors]
        modes = params.referring or vocab.referring
        mode = str(modes[int(rng.integers(len(modes)))])
        target_text = _target_phrase(target, objects, mode, vocab, rng)
        goal_text = _goal_phrase(goal, objects, vocab)
        templates = vocab.templates[family.name]
        instruction = templates[int(rng.integers(len(templates)))].format(target=target_text, goal=goal_text)
        tags = [f"referring:{mode}"]
        use_synonyms = params.synonyms if params.synonyms is not None else bool(vocab.synonyms)
        if use_synonyms:
            instruction = _synonymise(instruction, vocab, rng)
            tags.append("instruction:synonym")
        reason = unreachable(family, target, goal, self.ik)
        if reason:
            raise _RejectError(reason)
        return objects, instruction, target.name, tags + ([f"goal:{goal.name}"] if goal is not None else [])

    def settle(self, scene: Scene, params: SceneParams) -> list[ObjectSpec]:
        """Run the physics with the arm at home; return settled objects or raise ``_RejectError('unstable:...')``."""
        arm = self.arm
        arm.reset(scene)
        steps = max(1, round(params.settle_time * arm.config.control_hz))
        for _ in range(steps):
            arm.step_joint_targets(np.array(panda.HOME_QPOS), -1.0)
        settled = arm.object_states()
        result = []
        for before, after in zip(scene.objects, settled, strict=True):
            drift = float(np.linalg.norm(np.subtract(after.position, before.position)))
            if drift > params.stability_tolerance:
                raise _RejectError(f"unstable:{before.name}")
            if before.is_static:
                result.append(before)
            else:
                result.append(dataclasses.replace(before, position=after.position, orientation=after.orientation))
        return result

    def generate_seeded(self, family_name: str, seed: int, params: SceneParams, *, scene_id: str = "",
                        round_index: int = 0, generation_program_id: str = "") -> Scene:
        """Return the scene of ``seed``: tries layouts until one is valid (see the module docstring)."""
        family = get_family(family_name)
        vocab = load_vocabulary(params.split)
        self.check_params(family, vocab, params)
        record = GenerationRecord()
        for attempt in range(params.max_attempts):
            rng = np.random.default_rng([seed, attempt])
            record.attempts = attempt + 1
            try:
                objects, instruction, target, tags = self.draft(family, vocab, params, rng)
                goal = next((t.split(":", 1)[1] for t in tags if t.startswith("goal:")), "")
                tags = [t for t in tags if not t.startswith("goal:")]
                render = RenderSettings.sample(rng, params.camera_jitter, params.light_jitter)
                scene = Scene(scene_id=scene_id or f"{family_name}-{seed:016x}", family=family_name,
                              instruction=instruction, seed=seed, split=params.split,
                              perturbation_tags=_tags(params, vocab) + tags, objects=objects,
                              target_object=target, goal_object=goal, round=round_index,
                              generation_program_id=generation_program_id)
                scene.params_json = _meta(params, render, record)
                scene.objects = self.settle(scene, params)
            except _RejectError as reject:
                record.rejections.append(str(reject))
                continue
            scene.params_json = _meta(params, render, record)
            scene.mjcf = scene_mjcf(scene.objects, render)
            scene.mjcf_sha256 = hashlib.sha256(scene.mjcf.encode()).hexdigest()
            return scene
        counts = Counter(r.split(":", 1)[0] for r in record.rejections)
        raise GenerationError(f"no valid {family_name} layout for split {params.split!r} in {params.max_attempts} "
                              f"attempts; rejections: {dict(counts)} (check num_distractors, position_shift, "
                              f"min_clearance, referring)")


def _tags(params: SceneParams, vocab: Vocabulary) -> list[str]:
    tags = [] if params.split == "id" else [f"split:{params.split}"]
    if params.position_shift:
        tags.append(f"position:shift={params.position_shift:g}")
    if params.num_distractors is not None:
        tags.append(f"distractors:{params.num_distractors[0]}-{params.num_distractors[1]}")
    if params.size_scale is not None:
        tags.append(f"appearance:size_scale={params.size_scale[0]:g}-{params.size_scale[1]:g}")
    if params.camera_jitter:
        tags.append(f"camera:jitter={params.camera_jitter:g}")
    if params.light_jitter:
        tags.append(f"lighting:jitter={params.light_jitter:g}")
    return tags


def _meta(params: SceneParams, render: RenderSettings, record: GenerationRecord) -> str:
    return json.dumps({"params": params.to_json_dict(), "render": dataclasses.asdict(render),
                       "generation": {"attempts": record.attempts, "rejections": list(record.rejections)}},
                      sort_keys=True)


_DEFAULT: Generator | None = None


def default_generator() -> Generator:
    """Return the process-wide generator (built on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Generator()
    return _DEFAULT


def draw_seed(rng: np.random.Generator) -> int:
    """Draw a scene seed from ``rng``: what ``generate`` and the loop's generate step pass to ``generate_seeded``."""
    return int(rng.integers(0, 2**63 - 1))


def generate(family: str, rng: np.random.Generator, params: SceneParams | None = None, **kwargs: object) -> Scene:
    """Return a valid scene of ``family``; the scene seed is drawn from ``rng`` (keywords as ``generate_seeded``)."""
    return default_generator().generate_seeded(family, draw_seed(rng), params or SceneParams(), **kwargs)  # type: ignore[arg-type]


def generate_seeded(family: str, seed: int, params: SceneParams | None = None, **kwargs: object) -> Scene:
    """Return the scene ``seed`` gives (``Scene.seed`` of a generated scene reproduces it)."""
    return default_generator().generate_seeded(family, seed, params or SceneParams(), **kwargs)  # type: ignore[arg-type]


def scenes_of_seeds(family: str, seeds: Sequence[int], params: SceneParams, round_index: int = 0) -> list[Scene]:
    """Return one scene per seed (``generate_seeded``, recording ``round_index``).

    The loop's in-process scene source and the ``scene_generator`` node's ``GenerateScenes`` with explicit seeds
    both call this, so both deployments give the same scenes.
    """
    return [generate_seeded(family, int(seed), params, round_index=round_index) for seed in seeds]


__all__ = ["Generator", "draw_seed", "generate", "generate_seeded", "mujoco", "scenes_of_seeds"]
