# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Held-out evaluation suites: frozen scenes in YAML files, and the success of a policy checkpoint on them.

A suite file (format 1) is a header and a list of entries; each entry is a complete scene written out field by
field, so building its :class:`~coda_engine.sim.scene.Scene` is deterministic and never calls the scene
generator (the suite is frozen data; the data engine never reads these files)::

    format: 1                  # suite file format version
    name: id                   # suite name (used in default scene ids and in result rows)
    split: id                  # evaluation split: id | position | instruction | object | distractor
    description: "..."         # optional free text
    provenance: {...}          # optional mapping: how the file was made (not interpreted)
    entries:
      - id: id-pick_place-000  # optional; default "<name>-<index:03d>"; unique in the file
        family: pick_place     # reach | pick_place | push | stack
        instruction: put the red cube in the white bin
        target: red_cube       # the object the instruction names
        goal: white_bin        # pick_place: a bin, push: a region, stack: a box; reach: none (omit)
        seed: 0                # optional provenance (generator seed the entry came from); default 0
        tags: []               # optional perturbation tags
        render: {}             # optional camera/light jitter (RenderSettings fields); default none
        objects:               # 1..7 objects, in observation-slot order after target and goal
          - name: red_cube     # lower_snake_case, unique
            shape: box         # box | cylinder | sphere | bin | region
            color: red         # colour word of the instruction (optional)
            rgba: [0.85, 0.12, 0.1, 1.0]   # optional when color is a known colour word of the engine
            size: [0.022, 0.022, 0.022]    # half extents, m (cylinder: r, r, half height; sphere: r, r, r)
            mass: 0.12         # kg; optional (0.15 for movable objects); bins and regions have none
            friction: 0.8      # optional (0.9)
            position: [0.5, 0.1, 0.022]    # m, world frame; z optional (resting on the table)
            orientation: [0, 0, 0, 1]      # optional quaternion x, y, z, w; or yaw: rad (about z)

``src/coda_policy/coda_policy/suites/README.md`` documents the format for users. :func:`load_suite` validates
every field; a :class:`SuiteError` names the file, the entry index (and id) and the field.
:func:`coda_policy.evaluation.evaluate_suites` runs a checkpoint's policy on them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import yaml

from coda_engine.real.robot import brief, read_yaml
from coda_engine.sim.scene import (
    MAX_OBJECTS,
    ROLE_DISTRACTOR,
    ROLE_GOAL,
    ROLE_TARGET,
    SHAPE_BIN,
    SHAPE_BOX,
    SHAPE_CODES,
    SHAPE_NAMES,
    SHAPE_REGION,
    SPLITS,
    ObjectSpec,
    RenderSettings,
    Scene,
    f32,
)

FORMAT = 1
"""Suite file format version this module reads and writes."""
SUITES_DIR = Path(__file__).resolve().parent / "suites"
SUITE_KINDS = ("test", "validation")
"""The shipped suite sets: held-out test suites, and validation suites to choose designs on."""
"""The shipped suites: ``<split>.yaml`` for every split of ``SPLITS``."""
FAMILY_ORDER: tuple[str, ...] = ("reach", "pick_place", "push", "stack")
"""Order of families in results and tables (families outside it follow, sorted)."""
GOAL_SHAPES: dict[str, int | None] = {"reach": None, "pick_place": SHAPE_BIN, "push": SHAPE_REGION, "stack": SHAPE_BOX}
"""Shape the goal object of each family must have (None: the family has no goal)."""
DEFAULT_MASS = 0.15
"""kg, for movable objects without ``mass`` (middle of the training range)."""
DEFAULT_FRICTION = 0.9
"""Sliding friction for objects without ``friction`` (middle of the training range)."""
WORKSPACE_XY = (0.25, 0.78, -0.40, 0.40)
"""Where object centres may be: x_min, x_max, y_min, y_max, m (the generator's outer sampling limit)."""

_HEADER_KEYS = ("format", "name", "split", "description", "provenance", "entries")
_ENTRY_KEYS = ("id", "family", "instruction", "target", "goal", "seed", "tags", "render", "objects")
_OBJECT_KEYS = ("name", "shape", "color", "rgba", "size", "mass", "friction", "position", "orientation", "yaw")
_RENDER_KEYS = {"camera_offset": (3, 0.1), "camera_tilt": (2, 0.1), "light_offset": (3, 0.5)}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
MAX_PLAIN_DEPTH = 16
"""Deepest nesting of the free-form ``provenance``."""


class SuiteError(ValueError):
    """A suite file or entry is malformed; the message names the file, entry and field."""


@dataclass
class Suite:
    """A loaded, validated suite: the header and the entries in canonical form (see :func:`entry_from_scene`)."""

    name: str
    """Suite name."""
    split: str
    """Evaluation split every entry belongs to (one of ``SPLITS``)."""
    entries: list[dict[str, Any]]
    """Entries in canonical form (every field explicit), in file order."""
    description: str = ""
    """Free text from the header."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """How the file was made (free mapping from the header)."""
    path: Path | None = None
    """File it was loaded from (None when built in memory)."""

    @property
    def families(self) -> list[str]:
        """Families present, in ``FAMILY_ORDER``."""
        return ordered_families({e["family"] for e in self.entries})

    def count(self, family: str) -> int:
        """Return the number of entries of ``family``."""
        return sum(e["family"] == family for e in self.entries)

    def select(self, per_family: int = 0) -> list[int]:
        """Return the indices of the first ``per_family`` entries of each family in file order (all when 0)."""
        if per_family < 0:
            raise ValueError(f"per_family={per_family} must be >= 0")
        seen: dict[str, int] = {}
        chosen = []
        for i, entry in enumerate(self.entries):
            n = seen.get(entry["family"], 0)
            if per_family == 0 or n < per_family:
                chosen.append(i)
            seen[entry["family"]] = n + 1
        return chosen

    def scene(self, index: int) -> Scene:
        """Return the scene of entry ``index`` (built from its fields; no random generator involved)."""
        return scene_from_entry(self.entries[index], split=self.split, suite_name=self.name, index=index)

    def scenes(self, per_family: int = 0) -> list[Scene]:
        """Scenes of :meth:`select`."""
        return [self.scene(i) for i in self.select(per_family)]

    def to_dict(self) -> dict[str, Any]:
        """Return the file content as a mapping (what :func:`save_suite` writes)."""
        data: dict[str, Any] = {"format": FORMAT, "name": self.name, "split": self.split}
        if self.description:
            data["description"] = self.description
        if self.provenance:
            data["provenance"] = self.provenance
        data["entries"] = self.entries
        return data


def ordered_families(families: set[str] | Sequence[str]) -> list[str]:
    """Return the distinct ``families`` in ``FAMILY_ORDER`` (others after them, sorted)."""
    rank = {f: i for i, f in enumerate(FAMILY_ORDER)}
    return sorted(set(families), key=lambda f: (rank.get(f, len(rank)), f))


# ---------------------------------------------------------------------------------------------- validation
class _Checker:
    """Reads typed values out of a parsed entry; every failure raises a SuiteError naming where and what."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, fld: str, problem: str) -> NoReturn:
        raise SuiteError(f"{self.where}: {fld}: {problem}")

    def keys(self, data: Any, allowed: Sequence[str], fld: str, required: Sequence[str] = ()) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            self.fail(fld or "content", f"expected a mapping, got {type(data).__name__}")
        prefix = f"{fld}." if fld else ""
        for key in data:
            if key not in allowed:
                self.fail(f"{prefix}{key if isinstance(key, str) else brief(key)}"[:120],
                          f"unknown field; expected one of {list(allowed)}")
        for key in required:
            if key not in data:
                self.fail(f"{prefix}{key}", "missing (required)")
        return data

    def text(self, value: Any, fld: str, allow_empty: bool = False) -> str:
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            self.fail(fld, f"expected a non-empty string, got {brief(value)}")
        return value

    def number(self, value: Any, fld: str, lo: float, hi: float, *, open_lo: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
            self.fail(fld, f"expected a finite number, got {brief(value)}")
        if value < lo or value > hi or (open_lo and value == lo):
            self.fail(fld, f"{brief(value)} outside {'(' if open_lo else '['}{lo:g}, {hi:g}]")
        return float(value)

    def vector(
        self, value: Any, fld: str, lengths: tuple[int, ...], lo: float, hi: float, open_lo: bool = False
    ) -> tuple[float, ...]:
        if not isinstance(value, list | tuple) or len(value) not in lengths:
            want = " or ".join(str(n) for n in lengths)
            self.fail(fld, f"expected a list of {want} numbers, got {brief(value)}")
        return tuple(self.number(v, f"{fld}[{i}]", lo, hi, open_lo=open_lo) for i, v in enumerate(value))


def _finite(value: float) -> bool:
    """Tell whether ``value`` is a finite number (an integer beyond the float range is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _check_plain(value: Any, fld: str, check: _Checker, depth: int = 0) -> None:
    """Free-form data (``provenance``): text, finite numbers, booleans, null, lists and text-keyed mappings, 16 deep."""
    if depth > MAX_PLAIN_DEPTH:
        check.fail(fld, f"nested more than {MAX_PLAIN_DEPTH} levels deep")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                check.fail(fld, f"keys must be text, got {brief(key)}")
            _check_plain(item, f"{fld}.{key[:80]}", check, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_plain(item, f"{fld}[{i}]", check, depth + 1)
    elif isinstance(value, float | int) and not isinstance(value, bool) and not _finite(value):
        check.fail(fld, f"expected a finite number, got {brief(value)}")
    elif value is not None and not isinstance(value, str | int | float | bool):
        check.fail(fld, f"expected text, a number, true/false, a list or a mapping, got {type(value).__name__}")


def _known_colors() -> dict[str, tuple[float, ...]]:
    """Colour words of the engine's vocabularies (training and the object split) -> RGBA."""
    from coda_engine.sim.vocab import load_vocabulary

    return {**load_vocabulary("id").colors, **load_vocabulary("object").colors}


def _parse_object(data: Any, fld: str, check: _Checker) -> ObjectSpec:
    obj = check.keys(data, _OBJECT_KEYS, fld, required=("name", "shape", "size", "position"))
    name = check.text(obj["name"], f"{fld}.name")
    if not _NAME.match(name):
        check.fail(f"{fld}.name", f"{brief(name)} must be lower_snake_case (a-z, 0-9, _; starting with a letter)")
    shape_name = obj["shape"]
    if not isinstance(shape_name, str) or shape_name not in SHAPE_CODES:
        check.fail(f"{fld}.shape", f"{brief(shape_name)} is not one of {list(SHAPE_CODES)}")
    shape = SHAPE_CODES[shape_name]
    static = shape in (SHAPE_BIN, SHAPE_REGION)
    color = check.text(obj.get("color", ""), f"{fld}.color", allow_empty=True)
    if "rgba" in obj:
        rgba = check.vector(obj["rgba"], f"{fld}.rgba", (3, 4), 0.0, 1.0)
        rgba = (*rgba, 1.0) if len(rgba) == 3 else rgba
    else:
        colors = _known_colors()
        if color not in colors:
            check.fail(f"{fld}.rgba", f"missing, and color {brief(color)} is not a known colour word {sorted(colors)}")
        rgba = tuple(colors[color])
    size = check.vector(obj["size"], f"{fld}.size", (3,), 0.0, 0.2, open_lo=True)
    if static:
        if obj.get("mass", 0.0) != 0.0:
            check.fail(f"{fld}.mass", f"{shape_name} objects are fixed to the table: omit mass or use 0")
        mass = 0.0
    else:
        mass = check.number(obj.get("mass", DEFAULT_MASS), f"{fld}.mass", 0.0, 10.0, open_lo=True)
    friction = check.number(obj.get("friction", DEFAULT_FRICTION), f"{fld}.friction", 0.1, 2.0)
    position = check.vector(obj["position"], f"{fld}.position", (2, 3), -10.0, 10.0)
    x0, x1, y0, y1 = WORKSPACE_XY
    if not (x0 <= position[0] <= x1 and y0 <= position[1] <= y1):
        check.fail(
            f"{fld}.position", f"x, y = {position[:2]} outside the workspace x in [{x0}, {x1}], y in [{y0}, {y1}] m"
        )
    if len(position) == 2:
        rest = 0.0 if shape == SHAPE_BIN else float(f32(size[2]))
        position = (*position, rest)
    elif not 0.0 <= position[2] <= 0.3:
        check.fail(f"{fld}.position", f"z = {position[2]} outside [0, 0.3] m")
    if "orientation" in obj and "yaw" in obj:
        check.fail(f"{fld}.yaw", "give orientation or yaw, not both")
    if "yaw" in obj:
        yaw = check.number(obj["yaw"], f"{fld}.yaw", -math.pi, math.pi)
        orientation: tuple[float, ...] = (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))
    else:
        orientation = check.vector(obj.get("orientation", [0.0, 0.0, 0.0, 1.0]), f"{fld}.orientation", (4,), -1.0, 1.0)
        norm = math.sqrt(sum(q * q for q in orientation))
        if abs(norm - 1.0) > 1e-3:
            check.fail(f"{fld}.orientation", f"quaternion norm {norm:.4f} must be 1 (x, y, z, w)")
    return ObjectSpec(
        name=name,
        shape=shape,
        role=ROLE_DISTRACTOR,
        color_name=color,
        rgba=tuple(f32(c) for c in rgba),  # type: ignore[arg-type]
        size=tuple(f32(s) for s in size),  # type: ignore[arg-type]
        mass=f32(mass),
        friction=f32(friction),
        position=position,  # type: ignore[arg-type]
        orientation=orientation,
    )  # type: ignore[arg-type]


def _parse_render(data: Any, check: _Checker) -> RenderSettings:
    render = check.keys(data, (*_RENDER_KEYS, "light_scale"), "render")
    values: dict[str, Any] = {}
    for key, (n, bound) in _RENDER_KEYS.items():
        if key in render:
            values[key] = check.vector(render[key], f"render.{key}", (n,), -bound, bound)
    if "light_scale" in render:
        values["light_scale"] = check.number(render["light_scale"], "render.light_scale", 0.5, 1.5)
    return RenderSettings(**values)


def _check_overlaps(objects: list[ObjectSpec], check: _Checker) -> None:
    """Reject movable objects whose inscribed footprints intersect at overlapping heights (certain collision)."""
    movable = [(i, o) for i, o in enumerate(objects) if not o.is_static]
    for a, (i, p) in enumerate(movable):
        for j, q in movable[a + 1 :]:
            dist = math.hypot(p.position[0] - q.position[0], p.position[1] - q.position[1])
            z_overlap = abs(p.position[2] - q.position[2]) < p.size[2] + q.size[2]
            if z_overlap and dist < min(p.size[:2]) + min(q.size[:2]):
                check.fail(
                    f"objects[{j}].position", f"{q.name} intersects {p.name} (objects[{i}]); centres {dist:.3f} m apart"
                )


def scene_from_entry(
    entry: Mapping[str, Any], *, split: str, suite_name: str = "suite", index: int = 0, where: str = ""
) -> Scene:
    """Validate one entry and build its scene (deterministic: no random generator is called).

    ``where`` prefixes error messages (default ``entry <index>``); :class:`SuiteError` names the field.
    """
    entry_id = entry.get("id") if isinstance(entry, Mapping) else None
    label = f"entry {index}" + (f" ({entry_id})" if isinstance(entry_id, str) else "")
    check = _Checker(f"{where}: {label}" if where else label)
    from coda_engine.sim.families import FAMILIES

    data = check.keys(entry, _ENTRY_KEYS, "", required=("family", "instruction", "target", "objects"))
    scene_id = check.text(data.get("id", f"{suite_name}-{index:03d}"), "id")
    family = data["family"]
    if not isinstance(family, str) or family not in FAMILIES:
        check.fail("family", f"{brief(family)} is not one of {sorted(FAMILIES)}")
    instruction = check.text(data["instruction"], "instruction")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        check.fail("seed", f"expected an integer in [0, 2**64), got {brief(seed)}")
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        check.fail("tags", f"expected a list of strings, got {brief(tags)}")
    render = _parse_render(data.get("render", {}), check)
    raw_objects = data["objects"]
    if not isinstance(raw_objects, list) or not 1 <= len(raw_objects) <= MAX_OBJECTS:
        check.fail("objects", f"expected a list of 1..{MAX_OBJECTS} objects, got {brief(raw_objects)}")
    objects = [_parse_object(o, f"objects[{i}]", check) for i, o in enumerate(raw_objects)]
    names = [o.name for o in objects]
    for i, name in enumerate(names):
        if name in names[:i]:
            check.fail(f"objects[{i}].name", f"{brief(name)} is used twice")
    target = check.text(data["target"], "target")
    if target not in names:
        check.fail("target", f"{brief(target)} is not one of the objects {names}")
    goal = check.text(data.get("goal", ""), "goal", allow_empty=True)
    goal_shape = GOAL_SHAPES.get(family)
    if goal and goal not in names:
        check.fail("goal", f"{brief(goal)} is not one of the objects {names}")
    if goal_shape is None and goal:
        check.fail("goal", f"{family} has no goal object; omit goal")
    if goal_shape is not None:
        if not goal:
            check.fail("goal", f"missing: {family} needs a goal object ({SHAPE_NAMES[goal_shape]})")
        if goal == target:
            check.fail("goal", "the goal must differ from the target")
        if objects[names.index(goal)].shape != goal_shape:
            check.fail(
                "goal",
                f"{family} needs a {SHAPE_NAMES[goal_shape]} as goal, {brief(goal)} is a "
                f"{SHAPE_NAMES[objects[names.index(goal)].shape]}",
            )
    if objects[names.index(target)].is_static:
        shape = SHAPE_NAMES[objects[names.index(target)].shape]
        check.fail("target", f"{brief(target)} is fixed to the table ({shape})")
    objects = [
        dataclasses.replace(
            o, role=ROLE_TARGET if o.name == target else ROLE_GOAL if o.name == goal else ROLE_DISTRACTOR
        )
        for o in objects
    ]
    _check_overlaps(objects, check)
    meta = {"render": dataclasses.asdict(render), "suite": {"name": suite_name, "entry": index}}
    scene = Scene(
        scene_id=scene_id,
        family=family,
        instruction=instruction,
        seed=seed,
        split=split,
        perturbation_tags=list(tags),
        objects=objects,
        target_object=target,
        goal_object=goal,
        params_json=json.dumps(meta, sort_keys=True),
    )
    try:
        scene.validate()
    except ValueError as exc:
        check.fail("scene", str(exc))
    return scene


def _f32_text(value: float) -> float:
    """Return the shortest decimal that is the same float32 as ``value`` (so files stay readable and trips exact)."""
    return float(np.format_float_positional(np.float32(value), unique=True, trim="0"))


def entry_from_scene(scene: Scene) -> dict[str, Any]:
    """Return the canonical entry of ``scene`` (inverse of :func:`scene_from_entry` on canonical entries).

    Float32 fields (rgba, size, mass, friction) are written as their shortest decimal, positions and
    orientations exactly, so ``scene_from_entry(entry_from_scene(s))`` reproduces ``s``'s objects.
    """

    def rnd(values: Sequence[float]) -> list[float]:
        return [float(v) + 0.0 for v in values]  # + 0.0 writes -0.0 as 0.0

    objects = []
    for o in scene.objects:
        item: dict[str, Any] = {"name": o.name, "shape": SHAPE_NAMES[o.shape]}
        if o.color_name:
            item["color"] = o.color_name
        item["rgba"] = [_f32_text(c) for c in o.rgba]
        item["size"] = [_f32_text(s) for s in o.size]
        if not o.is_static:
            item["mass"] = _f32_text(o.mass)
        item["friction"] = _f32_text(o.friction)
        item["position"] = rnd(o.position)
        item["orientation"] = rnd(o.orientation)
        objects.append(item)
    entry: dict[str, Any] = {
        "id": scene.scene_id,
        "family": scene.family,
        "instruction": scene.instruction,
        "target": scene.target_object,
    }
    if scene.goal_object:
        entry["goal"] = scene.goal_object
    entry["seed"] = int(scene.seed)
    if scene.perturbation_tags:
        entry["tags"] = list(scene.perturbation_tags)
    render = RenderSettings.from_meta(scene.meta)
    changed = {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in dataclasses.asdict(render).items()
        if v != getattr(RenderSettings(), k)
    }
    if changed:
        entry["render"] = changed
    entry["objects"] = objects
    return entry


def parse_suite(data: Any, path: Path | str | None = None) -> Suite:
    """Validate a parsed suite mapping; entries become canonical. ``path`` names the source in errors."""
    source = str(path) if path is not None else "<suite>"
    check = _Checker(source)
    header = check.keys(data, _HEADER_KEYS, "", required=("format", "name", "split", "entries"))
    if isinstance(header["format"], bool) or header["format"] != FORMAT:
        check.fail("format", f"{header['format']!r} is not a supported format version (expected {FORMAT})")
    name = check.text(header["name"], "name")
    split = header["split"]
    if split not in SPLITS:
        check.fail("split", f"{brief(split)} is not one of {list(SPLITS)}")
    description = check.text(header.get("description", ""), "description", allow_empty=True)
    provenance = header.get("provenance", {})
    if not isinstance(provenance, Mapping):
        check.fail("provenance", f"expected a mapping, got {type(provenance).__name__}")
    _check_plain(provenance, "provenance", check)
    entries = header["entries"]
    if not isinstance(entries, list) or not entries:
        check.fail("entries", "expected a non-empty list of entries")
    canonical, ids = [], {}
    for i, entry in enumerate(entries):
        scene = scene_from_entry(entry, split=split, suite_name=name, index=i, where=source)
        if scene.scene_id in ids:
            _Checker(f"{source}: entry {i} ({scene.scene_id})").fail(
                "id", f"{brief(scene.scene_id)} is also the id of entry {ids[scene.scene_id]}"
            )
        ids[scene.scene_id] = i
        canonical.append(entry_from_scene(scene))
    return Suite(
        name=name,
        split=split,
        entries=canonical,
        description=description,
        provenance=dict(provenance),
        path=Path(path) if path is not None else None,
    )


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite file; :class:`SuiteError` names the file, entry index and field.

    Bytes that are not UTF-8 text, YAML that does not parse and nesting too deep to build are refused like a bad
    field (``coda_engine.real.robot.read_yaml``, the reader of every configuration file users write).
    """
    path = Path(path)
    if not path.is_file():
        raise SuiteError(f"{path}: no such suite file")
    return parse_suite(read_yaml(path, "suite file", SuiteError), path)


def default_suites(splits: Sequence[str] = SPLITS, kind: str = "test") -> dict[str, Suite]:
    """Return the shipped suites of ``splits``, by split.

    ``kind`` ``test``: the held-out test suites (``suites/<split>.yaml``), which report results; ``validation``:
    the validation suites (``suites/validation/<split>.yaml``, the same generators with other seeds), on which
    designs and hyperparameters are chosen.
    """
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ValueError(f"unknown splits {unknown}; expected some of {list(SPLITS)}")
    if kind not in SUITE_KINDS:
        raise ValueError(f"unknown suite kind {brief(kind)}; expected one of {SUITE_KINDS}")
    folder = SUITES_DIR if kind == "test" else SUITES_DIR / "validation"
    return {s: load_suite(folder / f"{s}.yaml") for s in splits}


class _SuiteDumper(yaml.SafeDumper):
    """Block style for mappings and entry lists, flow style for lists of numbers."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = bool(data) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_SuiteDumper.add_representer(list, _represent_list)


def dump_suite(suite: Suite, comment: str = "") -> str:
    """YAML text of ``suite`` (``comment`` lines go first, each prefixed with ``# ``)."""
    head = "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines())
    body = yaml.dump(suite.to_dict(), Dumper=_SuiteDumper, sort_keys=False, allow_unicode=True, width=120)
    return head + body


def save_suite(suite: Suite, path: Path | str, comment: str = "") -> Path:
    """Write ``suite`` to ``path`` (it loads back to an equal suite)."""
    path = Path(path)
    path.write_text(dump_suite(suite, comment))
    return path


__all__ = [
    "FORMAT",
    "SPLITS",
    "SUITES_DIR",
    "SUITE_KINDS",
    "Suite",
    "SuiteError",
    "default_suites",
    "dump_suite",
    "entry_from_scene",
    "load_suite",
    "ordered_families",
    "parse_suite",
    "save_suite",
    "scene_from_entry",
]
