# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What happened in the world: scenes, episodes with their keyframes, and interventions on real arms.

Keyframes are ``.npz`` files under ``<db folder>/blobs/`` named by the SHA-256 of their dtype, shape and bytes; a
file is written to a temporary name, synced and renamed before the transaction that references it commits, so a
record never points to a missing or partial blob, and each is checked against its hash when loaded. Pure: no rclpy.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from coda_loop.memory.records import MemoryRecord, RecordFile, RecordItem, check_round, require_text
from coda_loop.memory.schema import KIND_EPISODE, KIND_INTERVENTION, KIND_SCENE

PURPOSES: tuple[str, ...] = ("probe", "train", "eval", "demo")
"""Why an episode was run."""


def array_sha256(array: np.ndarray) -> str:
    """Content hash of an array: its dtype, shape and C-order bytes."""
    digest = hashlib.sha256(f"{array.dtype.str}|{','.join(map(str, array.shape))}|".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


class EpisodeRecords(RecordFile):
    """Scenes, episodes and keyframe blobs, interventions (part of :class:`~coda_loop.memory.store.MemoryStore`)."""

    def _scene_item(self, round: int, scene: Mapping[str, Any], origin: str, program_id: str) -> RecordItem:
        scene_id = require_text(scene, "scene_id", "scene")
        if not isinstance(origin, str) or not origin:
            raise ValueError(f"origin={origin!r} must be a non-empty string (e.g. generated, probe, eval, open_loop)")
        program = program_id or str(scene.get("generation_program_id", ""))
        family, split = str(scene.get("family", "")), str(scene.get("split", ""))

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute(
                "INSERT INTO scenes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (scene_id, sequence, round, family, split, origin, program, text),
            )

        return RecordItem(KIND_SCENE, scene_id, round, {**scene, "origin": origin, "program_id": program}, insert)

    def put_scene(self, round: int, scene: dict, *, origin: str, program_id: str = "") -> MemoryRecord:
        """Store a scene (``Scene.to_dict()``) with its origin and the program that asked for it.

        ``program_id`` defaults to the scene's ``generation_program_id``; payload = the scene dict plus
        ``origin`` and ``program_id``.
        """
        return self._put([self._scene_item(check_round(round), scene, origin, program_id)])[0]

    def put_episode(
        self,
        round: int,
        result: dict,
        keyframes: Sequence[np.ndarray] = (),
        *,
        purpose: str,
        scene: dict | None = None,
    ) -> MemoryRecord:
        """Store an episode (``RecordedEpisode.to_result_dict()``) and its keyframes as blob files.

        Payload = the result plus ``purpose`` and ``keyframe_hashes`` (the blobs, in order). ``scene``,
        when given, is stored in the same transaction (origin = ``purpose``) unless it is already there.
        """
        round = check_round(round)
        episode_id = require_text(result, "episode_id", "result")
        if purpose not in PURPOSES:
            raise ValueError(f"purpose={purpose!r} must be one of {', '.join(PURPOSES)}")
        if "keyframes" in result:
            raise ValueError("result['keyframes'] cannot go into the payload: pass the frames as `keyframes`")
        scene_id = str(result.get("scene_id", ""))
        items: list[RecordItem] = []
        if scene is not None:
            given = require_text(scene, "scene_id", "scene")
            if scene_id and given != scene_id:
                raise ValueError(f"scene['scene_id']={given!r} is not result['scene_id']={scene_id!r}")
            scene_id = given
            items.append(self._scene_item(round, scene, purpose, ""))
        existing = self.get(KIND_EPISODE, episode_id)
        if existing is not None:
            return existing
        blobs = [self._write_blob(frame, f"keyframes[{i}]") for i, frame in enumerate(keyframes)]
        steps = [int(s) for s in result.get("keyframe_steps", [])]
        steps = steps if len(steps) == len(blobs) else [-1] * len(blobs)
        payload = {**result, "scene_id": scene_id, "purpose": purpose, "keyframe_hashes": [b[0] for b in blobs]}
        success, policy = int(bool(result.get("success", False))), str(result.get("policy_version", ""))

        def before(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?, ?, ?)", [(*b, time.time()) for b in blobs]
            )

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute(
                "INSERT INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (episode_id, sequence, round, scene_id, purpose, success, policy, text),
            )
            conn.executemany(
                "INSERT INTO episode_keyframes VALUES (?, ?, ?, ?)",
                [(episode_id, i, b[0], s) for i, (b, s) in enumerate(zip(blobs, steps, strict=True))],
            )

        items.append(RecordItem(KIND_EPISODE, episode_id, round, payload, insert))
        return self._put(items, before)[-1]

    def _write_blob(self, frame: np.ndarray, what: str) -> tuple[str, str, str, str, int]:
        """Write one keyframe blob atomically (temp file, fsync, rename); return its ``blobs`` row."""
        array = np.asarray(frame)
        if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3 or 0 in array.shape:
            raise ValueError(f"{what} must be a non-empty uint8 (H, W, 3) array, got {array.dtype} {array.shape}")
        sha = array_sha256(array)
        name = f"{sha}.npz"
        target = self.blob_dir / name
        if not target.exists():
            fd, tmp = tempfile.mkstemp(dir=self.blob_dir, prefix=f".{sha[:16]}-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as handle:
                    np.savez_compressed(handle, frame=array)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return sha, name, ",".join(map(str, array.shape)), array.dtype.str, int(array.nbytes)

    def load_keyframes(self, record: MemoryRecord) -> list[np.ndarray]:
        """Return the keyframes of an episode record, each checked against its hash (RuntimeError if one is bad)."""
        if record.kind != KIND_EPISODE:
            raise ValueError(f"load_keyframes needs an episode record, got kind {record.kind!r}")
        frames = []
        for sha in record.payload.get("keyframe_hashes", []):
            file = self.blob_dir / f"{sha}.npz"
            if not file.exists():
                raise RuntimeError(f"episode {record.record_id!r}: keyframe blob {file} is missing")
            try:
                with np.load(file, allow_pickle=False) as data:
                    frame = data["frame"]
            except (OSError, ValueError, KeyError) as exc:
                raise RuntimeError(f"episode {record.record_id!r}: keyframe blob {file} cannot be read: {exc}") from exc
            if array_sha256(frame) != sha:
                raise RuntimeError(f"episode {record.record_id!r}: keyframe blob {file} does not match its hash")
            frames.append(frame)
        return frames

    def put_intervention(self, round: int, *, intervention_id: str, info: dict) -> MemoryRecord:
        """Store an intervention (e.g. a safety stop or an operator's correction on a real arm)."""
        round = check_round(round)
        if not intervention_id:
            raise ValueError("intervention_id must be a non-empty string")
        payload = {"intervention_id": intervention_id, **dict(info)}

        def insert(conn: sqlite3.Connection, sequence: int, text: str) -> None:
            conn.execute("INSERT INTO interventions VALUES (?, ?, ?, ?)", (intervention_id, sequence, round, text))

        return self._put([RecordItem(KIND_INTERVENTION, intervention_id, round, payload, insert)])[0]
