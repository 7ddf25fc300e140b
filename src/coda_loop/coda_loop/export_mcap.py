# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Episodes of a run as a rosbag2 MCAP file that standard ROS 2 tools read.

Per episode, in time order, the file holds

* ``/coda/trajectory`` (``coda_msgs/msg/TrajectorySample``): every recorded sample (tool position,
  finger opening, applied action, stage, potential, privileged object states);
* ``/coda/commands`` (``coda_msgs/msg/ArmCommand``): the command applied at each sampled step
  (the sample's action: ``delta`` = its first three values, ``gripper`` = the fourth with the message's
  sign, < 0 closes);
* ``/coda/keyframes`` (``sensor_msgs/msg/Image``, rgb8): the stored keyframes, at their control step;
* ``/coda/episodes`` (``coda_msgs/msg/EpisodeResult``): the result at the episode's end, without
  images (``keyframe_uris`` names the stored blobs by sha256);
* ``/coda/diagnoses`` (``coda_msgs/msg/Diagnosis``): each diagnosis at the end of the last exported
  episode it explains (diagnoses of episodes not in the file come after all episodes).

Recorded episodes keep no joint positions (samples describe the tool, not the joints), so there is
no ``joint_states`` topic. Time: episodes are laid end to end from ``start_ns``; a message's time is
its episode's start plus the sample's ``time_from_start`` (keyframes: step / control rate), and
headers carry the same stamp. The file follows the rosbag2 MCAP layout: profile ``ros2``, schemas
in ``ros2msg`` encoding holding the concatenated ``.msg`` text of the type and every type it uses
(read from the installed ``share/<pkg>/msg`` folders, ``MSG: pkg/Name`` separators), CDR
payloads serialised by ``rosbags`` from the same definitions. Pure module: no rclpy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from mcap.writer import CompressionType
from mcap.writer import Writer as McapWriter
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.base import Nodetype

from coda_engine.real.robot import gripper_to_message

TOPIC_TRAJECTORY = "/coda/trajectory"
TOPIC_COMMANDS = "/coda/commands"
TOPIC_KEYFRAMES = "/coda/keyframes"
TOPIC_EPISODES = "/coda/episodes"
TOPIC_DIAGNOSES = "/coda/diagnoses"
TOPIC_TYPES: dict[str, str] = {
    TOPIC_TRAJECTORY: "coda_msgs/msg/TrajectorySample",
    TOPIC_COMMANDS: "coda_msgs/msg/ArmCommand",
    TOPIC_KEYFRAMES: "sensor_msgs/msg/Image",
    TOPIC_EPISODES: "coda_msgs/msg/EpisodeResult",
    TOPIC_DIAGNOSES: "coda_msgs/msg/Diagnosis",
}
"""Every topic of an export and its message type."""
PRIMITIVES = frozenset(
    {
        "bool",
        "byte",
        "char",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "string",
        "wstring",
    }
)
SEPARATOR = "=" * 80
_NUMPY_TYPES = {
    "bool": np.bool_,
    "byte": np.uint8,
    "char": np.uint8,
    "float32": np.float32,
    "float64": np.float64,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "uint32": np.uint32,
    "int64": np.int64,
    "uint64": np.uint64,
}


class ExportError(ValueError):
    """Data that cannot be exported; the message names the record and the field."""


# ---------------------------------------------------------------------------------------------------------------------
# message definitions


def _normalise(type_name: str) -> str:
    """``pkg/Name`` or ``pkg/msg/Name`` -> ``pkg/msg/Name``."""
    parts = type_name.split("/")
    if len(parts) == 2:
        return f"{parts[0]}/msg/{parts[1]}"
    if len(parts) == 3 and parts[1] == "msg":
        return type_name
    raise ExportError(f"not a message type name: {type_name!r} (expected pkg/msg/Name)")


def _search_paths() -> list[Path]:
    return [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]


def find_msg_file(type_name: str, search_paths: Sequence[Path] | None = None) -> Path:
    """Return the installed ``.msg`` file of ``pkg/msg/Name`` (first hit on the prefix paths)."""
    pkg, _, name = _normalise(type_name).split("/")
    paths = list(search_paths) if search_paths is not None else _search_paths()
    for prefix in paths:
        candidate = prefix / "share" / pkg / "msg" / f"{name}.msg"
        if candidate.is_file():
            return candidate
    raise ExportError(
        f"message definition {pkg}/msg/{name} not found under share/{pkg}/msg of "
        f"{[str(p) for p in paths] or 'an empty AMENT_PREFIX_PATH'} (source scripts/env.sh)"
    )


def _field_types(text: str, package: str) -> list[str]:
    """Complex (non-primitive) field types of one ``.msg`` text, as ``pkg/msg/Name``, in order."""
    found: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        type_token = line.split()[0]
        base = re.sub(r"<=\d+$", "", re.sub(r"\[.*\]$", "", type_token))
        if base in PRIMITIVES:  # constants are always primitive
            continue
        found.append(_normalise(base if "/" in base else f"{package}/{base}"))
    return found


@dataclass(frozen=True)
class MessageDefinitions:
    """The ``.msg`` texts of a set of types and everything they use."""

    texts: dict[str, str]
    """``pkg/msg/Name`` -> the installed ``.msg`` text."""
    dependencies: dict[str, list[str]]
    """``pkg/msg/Name`` -> the complex types it uses directly, in order of appearance."""

    @classmethod
    def load(cls, type_names: Iterable[str], search_paths: Sequence[Path] | None = None) -> MessageDefinitions:
        """Read the definitions of ``type_names`` and, transitively, of every type they use."""
        texts: dict[str, str] = {}
        deps: dict[str, list[str]] = {}
        pending = [_normalise(t) for t in type_names]
        while pending:
            name = pending.pop()
            if name in texts:
                continue
            text = find_msg_file(name, search_paths).read_text(encoding="utf-8")
            texts[name] = text
            deps[name] = _field_types(text, name.split("/")[0])
            pending.extend(d for d in deps[name] if d not in texts)
        return cls(texts=texts, dependencies=deps)

    def closure(self, type_name: str) -> list[str]:
        """``type_name``'s dependencies, depth first in order of first use, each once (itself excluded)."""
        order: list[str] = []

        def visit(name: str) -> None:
            for dep in self.dependencies[name]:
                if dep not in order and dep != type_name:
                    order.append(dep)
                    visit(dep)

        visit(_normalise(type_name))
        return order

    def schema_text(self, type_name: str) -> str:
        """Return the concatenated definition in the ROS 2 MCAP schema format (``ros2msg``)."""
        name = _normalise(type_name)
        parts = [self.texts[name].rstrip("\n")]
        for dep in self.closure(name):
            pkg, _, short = dep.split("/")
            parts.append(f"{SEPARATOR}\nMSG: {pkg}/{short}\n{self.texts[dep].rstrip(chr(10))}")
        return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# dict -> CDR


class CdrEncoder:
    """Serialises nested dicts (message field names) to CDR with a typestore built from given definitions."""

    def __init__(self, definitions: MessageDefinitions) -> None:
        """Register every definition in a fresh typestore (so payloads match the embedded schemas exactly)."""
        self.store = get_typestore(Stores.EMPTY)
        types: dict[str, Any] = {}
        for name, text in definitions.texts.items():
            types.update(get_types_from_msg(text, name))
        self.store.register(types)

    def _base(self, value: Any, type_name: str, where: str) -> Any:
        try:
            if type_name in ("string", "wstring"):
                if not isinstance(value, str):
                    raise TypeError(f"expected str, got {type(value).__name__}")
                return value
            if type_name == "bool":
                return bool(value)
            if type_name.startswith("float"):
                return float(value)
            return int(value)
        except (TypeError, ValueError) as exc:
            raise ExportError(f"{where}: {exc}") from exc

    def _value(self, value: Any, node: tuple[Any, Any], where: str) -> Any:
        kind, detail = node
        if kind == Nodetype.BASE:
            return self._base(value, detail[0], where)
        if kind == Nodetype.NAME:
            return self.build(detail, value, where)
        inner, _length = detail
        if value is None:
            value = []
        if inner[0] == Nodetype.BASE and inner[1][0] not in ("string", "wstring"):
            if isinstance(value, bytes | bytearray | memoryview):
                return np.frombuffer(bytes(value), dtype=np.uint8).copy()
            try:
                return np.asarray(value, dtype=_NUMPY_TYPES[inner[1][0]]).reshape(-1)
            except (TypeError, ValueError) as exc:
                raise ExportError(f"{where}: not an array of {inner[1][0]} ({exc})") from exc
        if not isinstance(value, list | tuple):
            raise ExportError(f"{where}: expected a list, got {type(value).__name__}")
        return [self._value(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]

    def build(self, type_name: str, data: Mapping[str, Any], where: str = "") -> Any:
        """Turn ``data`` into a typestore message of ``type_name``; every field must be present."""
        where = where or type_name.rsplit("/", 1)[-1]
        if not isinstance(data, Mapping):
            raise ExportError(f"{where}: expected a dict for {type_name}, got {type(data).__name__}")
        _consts, fields = self.store.fielddefs[type_name]
        kwargs = {}
        for fname, node in fields:
            if fname not in data:
                raise ExportError(f"{where}.{fname}: missing (type {type_name})")
            kwargs[fname] = self._value(data[fname], node, f"{where}.{fname}")
        return self.store.types[type_name](**kwargs)

    def encode(self, type_name: str, data: Mapping[str, Any], where: str = "") -> bytes:
        """CDR bytes of ``data`` as ``type_name``."""
        msg = self.build(type_name, data, where)
        return bytes(self.store.serialize_cdr(msg, type_name))


# ---------------------------------------------------------------------------------------------------------------------
# episodes -> timeline


@dataclass
class EpisodeExport:
    """One episode to export: its result dict and its keyframes."""

    result: dict[str, Any]
    """``RecordedEpisode.to_result_dict()`` (extra keys are ignored)."""
    keyframes: list[np.ndarray] = field(default_factory=list)
    """RGB uint8 (H, W, 3) frames, one per ``result["keyframe_steps"]`` entry."""
    keyframe_uris: list[str] = field(default_factory=list)
    """References to the stored keyframes (e.g. sha256 blob names)."""
    frame_id: str = ""
    """Camera frame of the keyframes; empty: ``<robot_id>/scene_camera``."""
    model_sha256: str = ""
    """SHA-256 of the acting version's model file (``ArmCommand.policy_sha256``); empty for the expert or unknown."""


@dataclass(frozen=True)
class TimedMessage:
    """One message of the timeline."""

    time_ns: int
    """Log and publish time."""
    topic: str
    """One of ``TOPIC_TYPES``."""
    data: dict[str, Any]
    """Message fields."""
    where: str
    """Which record it came from (for error messages)."""


def _stamp(ns: int) -> dict[str, int]:
    return {"sec": ns // 1_000_000_000, "nanosec": ns % 1_000_000_000}


def _duration_ns(d: Mapping[str, Any]) -> int:
    return int(d["sec"]) * 1_000_000_000 + int(d["nanosec"])


def _image(frame: np.ndarray, stamp_ns: int, frame_id: str, where: str) -> dict[str, Any]:
    frame = np.asarray(frame)
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise ExportError(f"{where}: expected an (H, W, 3) uint8 keyframe, got {frame.dtype} {frame.shape}")
    h, w = int(frame.shape[0]), int(frame.shape[1])
    return {
        "header": {"stamp": _stamp(stamp_ns), "frame_id": frame_id},
        "height": h,
        "width": w,
        "encoding": "rgb8",
        "is_bigendian": 0,
        "step": w * 3,
        "data": np.ascontiguousarray(frame).tobytes(),
    }


def episode_messages(ep: EpisodeExport, start_ns: int) -> tuple[list[TimedMessage], int]:
    """Messages of one episode from ``start_ns``; returns them (time order) and the episode's end time."""
    r = ep.result
    eid = str(r.get("episode_id", "?"))
    where = f"episode {eid!r}"
    try:
        rate = float(r["control_rate_hz"])
        samples = list(r["trajectory"])
        steps = [int(s) for s in r.get("keyframe_steps", [])]
        length = int(r["length"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ExportError(f"{where}: result lacks {exc} (need control_rate_hz, trajectory, length)") from exc
    if rate <= 0:
        raise ExportError(f"{where}: control_rate_hz={rate} must be > 0")
    if len(ep.keyframes) != len(steps):
        raise ExportError(f"{where}: {len(ep.keyframes)} keyframes for {len(steps)} keyframe_steps")
    duration = round(length / rate * 1e9)
    messages: list[TimedMessage] = []
    for i, sample in enumerate(samples):
        t = start_ns + _duration_ns(sample["time_from_start"])
        duration = max(duration, t - start_ns)
        messages.append(TimedMessage(t, TOPIC_TRAJECTORY, sample, f"{where} trajectory[{i}]"))
        if int(sample["step"]) > 0:
            action = [float(a) for a in sample["action"]]
            if len(action) != 4:
                raise ExportError(f"{where} trajectory[{i}].action: {len(action)} values, expected 4")
            command = {
                "header": {"stamp": _stamp(t), "frame_id": "world"},
                "policy_version": str(r.get("policy_version", "")),
                "policy_sha256": ep.model_sha256,
                "delta": {"x": action[0], "y": action[1], "z": action[2]},
                "gripper": gripper_to_message(action[3]),
                "hold": False,
                "hold_reason": "",
                "stage": int(sample["stage"]),
            }
            messages.append(TimedMessage(t, TOPIC_COMMANDS, command, f"{where} command at step {sample['step']}"))
    frame_id = ep.frame_id or f"{r.get('robot_id', '') or 'sim'}/scene_camera"
    for i, (step, frame) in enumerate(zip(steps, ep.keyframes, strict=True)):
        t = start_ns + round(step / rate * 1e9)
        duration = max(duration, t - start_ns)
        messages.append(
            TimedMessage(
                t, TOPIC_KEYFRAMES, _image(frame, t, frame_id, f"{where} keyframe {i}"), f"{where} keyframe {i}"
            )
        )
    end = start_ns + duration
    result = {
        **r,
        "header": {"stamp": _stamp(end), "frame_id": ""},
        "keyframes": [],
        "keyframe_steps": steps,
        "keyframe_uris": list(ep.keyframe_uris),
    }
    messages.append(TimedMessage(end, TOPIC_EPISODES, result, where))
    messages.sort(key=lambda m: m.time_ns)  # stable: samples before their commands
    return messages, end


def timeline(
    episodes: Sequence[EpisodeExport], diagnoses: Sequence[Mapping[str, Any]], start_ns: int
) -> list[TimedMessage]:
    """Every message of the export in time order (see the module docstring for the placement rules)."""
    messages: list[TimedMessage] = []
    ends: dict[str, int] = {}
    t = start_ns
    for ep in episodes:
        episode, t = episode_messages(ep, t)
        messages.extend(episode)
        ends[str(ep.result.get("episode_id", ""))] = t
    for d in diagnoses:
        ids = [str(e) for e in d.get("episode_ids", [])]
        when = max((ends[e] for e in ids if e in ends), default=t)
        stamped = {**d, "header": {"stamp": _stamp(when), "frame_id": ""}}
        messages.append(TimedMessage(when, TOPIC_DIAGNOSES, stamped, f"diagnosis {d.get('diagnosis_id', '?')!r}"))
    messages.sort(key=lambda m: m.time_ns)
    return messages


@dataclass
class ExportSummary:
    """What a file holds."""

    path: Path
    """The MCAP file."""
    counts: dict[str, int]
    """Messages per topic."""
    episodes: int
    """Episodes exported."""
    start_ns: int
    """Time of the first message."""
    end_ns: int
    """Time of the last message."""
    bytes: int = 0
    """File size."""


def write_mcap(
    output: Path | BinaryIO,
    messages: Sequence[TimedMessage],
    *,
    definitions: MessageDefinitions | None = None,
    metadata: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Write ``messages`` (time order) as a rosbag2 MCAP; returns the count per topic (every topic gets a channel)."""
    defs = definitions or MessageDefinitions.load(TOPIC_TYPES.values())
    encoder = CdrEncoder(defs)
    counts = dict.fromkeys(TOPIC_TYPES, 0)
    stream: BinaryIO
    if isinstance(output, Path):
        output.parent.mkdir(parents=True, exist_ok=True)
        stream = output.open("wb")
    else:
        stream = output
    try:
        writer = McapWriter(stream, compression=CompressionType.ZSTD)
        writer.start(profile="ros2", library="coda_engine export_mcap")
        channels = {}
        for topic, type_name in TOPIC_TYPES.items():
            schema_id = writer.register_schema(
                name=type_name, encoding="ros2msg", data=defs.schema_text(type_name).encode()
            )
            channels[topic] = writer.register_channel(topic=topic, message_encoding="cdr", schema_id=schema_id)
        for m in messages:
            if m.topic not in channels:
                raise ExportError(f"{m.where}: unknown topic {m.topic!r} (known: {sorted(channels)})")
            data = encoder.encode(TOPIC_TYPES[m.topic], m.data, m.where)
            writer.add_message(
                channel_id=channels[m.topic],
                log_time=m.time_ns,
                publish_time=m.time_ns,
                sequence=counts[m.topic],
                data=data,
            )
            counts[m.topic] += 1
        if metadata:
            writer.add_metadata("coda", {str(k): str(v) for k, v in metadata.items()})
        writer.finish()
    finally:
        if isinstance(output, Path):
            stream.close()
    return counts


def export_episodes(
    path: Path,
    episodes: Sequence[EpisodeExport],
    diagnoses: Sequence[Mapping[str, Any]],
    *,
    start_ns: int,
    metadata: Mapping[str, str] | None = None,
) -> ExportSummary:
    """Lay out the episodes and diagnoses from ``start_ns`` and write them to ``path``."""
    messages = timeline(episodes, diagnoses, start_ns)
    tmp = path.with_name(path.name + ".part")
    try:
        counts = write_mcap(tmp, messages, metadata=metadata)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportSummary(
        path=path,
        counts=counts,
        episodes=len(episodes),
        start_ns=messages[0].time_ns if messages else start_ns,
        end_ns=messages[-1].time_ns if messages else start_ns,
        bytes=path.stat().st_size,
    )


# ---------------------------------------------------------------------------------------------------------------------
# run folder -> file


def export_run(run_dir: Path, out: Path, *, round_index: int = -1) -> ExportSummary:
    """Export the episodes and diagnoses of ``run_dir/memory.db`` (one round, or all with -1) to ``out``.

    Episodes are laid out in the order they were written, from the first one's write time.
    Raises ``ReportError`` for a bad run folder and :class:`ExportError` when there is nothing to export.
    """
    from coda_loop.report.data import all_records, open_store

    store = open_store(run_dir)
    db = Path(store.path)
    try:
        episodes = all_records(store, "episode", round_min=round_index, round_max=round_index)
        diagnoses = all_records(store, "diagnosis", round_min=round_index, round_max=round_index)
        which = f"round {round_index}" if round_index >= 0 else "any round"
        if not episodes and not diagnoses:
            raise ExportError(f"{run_dir}: no episodes or diagnoses in {which} (nothing to export)")
        models = {str(v.payload.get("version_id", "")): str(v.payload.get("model_sha256", ""))
                  for v in all_records(store, "policy_version")}
        exports = []
        for rec in episodes:
            hashes = [str(h) for h in rec.payload.get("keyframe_hashes", [])]
            frames = store.load_keyframes(rec) if hashes else []
            exports.append(EpisodeExport(result=dict(rec.payload), keyframes=list(frames), keyframe_uris=hashes,
                                         model_sha256=models.get(str(rec.payload.get("policy_version", "")), "")))
        start = min([r.created for r in episodes] or [r.created for r in diagnoses])
        metadata = {
            "run_dir": str(run_dir.resolve()),
            "memory": str(db.resolve()),
            "round": str(round_index),
            "episodes": str(len(episodes)),
            "diagnoses": str(len(diagnoses)),
        }
        return export_episodes(
            out, exports, [dict(r.payload) for r in diagnoses], start_ns=round(start * 1e9), metadata=metadata
        )
    finally:
        store.close()
