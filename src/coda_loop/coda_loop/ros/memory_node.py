# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``memory`` node: announces every write to a run's memory and answers queries about it.

    ros2 run coda_loop memory --ros-args -p db_path:=runs/<id>/memory.db
    ros2 service call /query_memory coda_msgs/srv/QueryMemory "{query: progress}"
    ros2 service call /query_memory coda_msgs/srv/QueryMemory "{query: records, kind: diagnosis, round_min: 2}"

(``round_min``/``round_max`` default to -1, no bound.)

Interfaces (relative to the node's namespace):

- ``memory_events`` (coda_msgs/MemoryEvent) out, durable (reliable, transient-local, keep last
  ``history_depth``): one message per record written to the file by any process (the loop, tools),
  found by tailing the memory's ``events`` table every 1/``poll_hz`` s; at start the last
  ``history_depth`` events already in the file are announced, so late joiners get recent history
- ``query_memory`` (coda_msgs/srv/QueryMemory): :meth:`MemoryStore.query`; a bad query answers
  ``success: false`` with the error naming the field, and the node keeps serving

Every event carries ``payload_json`` (the write's JSON summary) and ``uri`` (the full record). The
typed ``payload`` is the CDR of the record's message for diagnoses (``Diagnosis``), generation,
training and potential programs, policy versions (``PolicyVersion``) and scenes (``SceneSpec``, with
the MJCF text left out: ``mjcf_uri`` then names the record). Episodes, progress rows, critic versions
and interventions carry none: an ``EpisodeResult`` needs the keyframe images (blob files) and would
make the durable history heavy; the others have no one-to-one message. Their full record is at
``uri`` and in QueryMemory's ``result_json``.

The node opens the file as a reader (it creates and migrates a missing file, as any store does); the
store lives in :mod:`coda_loop.memory` and this node only converts and publishes.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from builtin_interfaces.msg import Time
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.exceptions import InvalidParameterValueException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import serialize_message

from coda_engine.ros.convert import ConversionError, dict_to_msg
from coda_engine.ros.spin import run_node, shutdown_context
from coda_loop.memory import MemoryQueryError, MemoryRecord, MemoryStore, record_uri
from coda_loop.memory.records import summarize, to_json
from coda_msgs.msg import (
    Diagnosis,
    GenerationProgram,
    MemoryEvent,
    PolicyVersion,
    PotentialProgram,
    SceneSpec,
    TrainingProgram,
)
from coda_msgs.srv import QueryMemory

PARAMETERS: dict[str, tuple[Any, str]] = {
    "db_path": ("", "memory file of the run (SQLite), e.g. runs/<id>/memory.db; required"),
    "poll_hz": (20.0, "how often the memory's events table is read for new writes, Hz (> 0)"),
    "history_depth": (1000, "events kept for late joiners (memory_events keep-last depth) and announced at start"),
}
MAX_HISTORY = 100_000
"""Largest ``history_depth``."""
POLL_BATCH = 1000
"""Most events published per poll (the rest follow on the next polls)."""


class MemoryNodeError(ValueError):
    """A parameter the node cannot start with; the message names it."""


def parameter_problems(values: Mapping[str, Any]) -> list[str]:
    """List what is wrong with a full set of parameter values (an empty ``db_path`` is checked at start)."""
    problems = []
    try:
        if not float(values["poll_hz"]) > 0.0:
            problems.append(f"poll_hz={values['poll_hz']} must be > 0")
    except (TypeError, ValueError):
        problems.append(f"poll_hz={values['poll_hz']!r} must be a number > 0")
    depth = values["history_depth"]
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_HISTORY:
        problems.append(f"history_depth={depth!r} must be an integer in [1, {MAX_HISTORY}]")
    if not isinstance(values["db_path"], str):
        problems.append(f"db_path={values['db_path']!r} must be a string")
    return problems


def _stamp(created: float) -> Time:
    sec = int(created)
    return Time(sec=sec, nanosec=min(round((created - sec) * 1e9), 999_999_999))


def _message_from_fields(msg_type: type) -> Callable[[MemoryRecord], Any]:
    """Build ``msg_type`` from the payload keys that are fields of it (the store adds a few of its own)."""

    def build(record: MemoryRecord) -> Any:
        fields = msg_type.get_fields_and_field_types()
        return dict_to_msg(msg_type, {k: v for k, v in record.payload.items() if k in fields})

    return build


def _scene(record: MemoryRecord) -> SceneSpec:
    msg = _message_from_fields(SceneSpec)(record)
    if msg.mjcf:
        msg.mjcf, msg.mjcf_uri = "", record.uri
    return msg


def _policy_version(record: MemoryRecord) -> PolicyVersion:
    payload = record.payload
    return PolicyVersion(
        version_id=str(payload["version_id"]),
        round=record.round,
        checkpoint_uri=f"file://{payload['checkpoint_dir']}",
        checkpoint_sha256=str(payload.get("model_sha256", "")),
        sim_success_rate=float(payload.get("metrics", {}).get("sim_success_rate", 0.0)),
    )


MESSAGES: dict[str, tuple[str, Callable[[MemoryRecord], Any]]] = {
    "diagnosis": ("coda_msgs/msg/Diagnosis", _message_from_fields(Diagnosis)),
    "generation_program": ("coda_msgs/msg/GenerationProgram", _message_from_fields(GenerationProgram)),
    "training_program": ("coda_msgs/msg/TrainingProgram", _message_from_fields(TrainingProgram)),
    "potential_program": ("coda_msgs/msg/PotentialProgram", _message_from_fields(PotentialProgram)),
    "policy_version": ("coda_msgs/msg/PolicyVersion", _policy_version),
    "scene": ("coda_msgs/msg/SceneSpec", _scene),
}
"""Record kinds with a message form: the ROS type name and the builder from a record."""


class MemoryNode(Node):
    """Publishes the memory's events on ``memory_events`` and serves ``query_memory``."""

    def __init__(
        self,
        *,
        db_path: str | None = None,
        poll_hz: float | None = None,
        history_depth: int | None = None,
        **node_kwargs: Any,
    ) -> None:
        """Declare and check parameters, open the memory, announce its history, start tailing it.

        ``db_path``, ``poll_hz`` and ``history_depth`` override the parameters of the same name (for a node
        made in-process); ``node_kwargs`` go to ``rclpy.node.Node`` (e.g. ``context``).
        """
        given = {"db_path": db_path, "poll_hz": poll_hz, "history_depth": history_depth}
        overrides = [Parameter(n, value=v) for n, v in given.items() if v is not None]
        super().__init__("memory", parameter_overrides=overrides, **node_kwargs)
        self._started = False
        self.add_on_set_parameters_callback(self.check_parameters)
        for name, (default, text) in PARAMETERS.items():
            self.declare_parameter(
                name, default, ParameterDescriptor(description=text, dynamic_typing=name == "poll_hz")
            )
        db_path = str(self.param("db_path"))
        if not db_path:
            raise MemoryNodeError(
                "parameter db_path is empty: set it to the run's memory file, e.g. "
                "--ros-args -p db_path:=runs/<id>/memory.db"
            )
        try:
            self.store = MemoryStore(db_path)
        except (OSError, RuntimeError, sqlite3.Error) as exc:
            raise MemoryNodeError(f"db_path={db_path!r} cannot be opened as a memory: {exc}") from exc
        self._started = True
        depth = int(self.param("history_depth"))
        durable = QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=depth,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.publisher = self.create_publisher(MemoryEvent, "memory_events", durable)
        self.service = self.create_service(QueryMemory, "query_memory", self.on_query)
        self.last_sequence = max(0, self.store.last_sequence() - depth)
        self._failing = ""
        announced = self.poll(limit=depth)
        self.timer = self.create_timer(1.0 / float(self.param("poll_hz")), self.poll)
        self.get_logger().info(
            f"memory ready on {self.store.path} (schema v{self.store.schema_version}, {announced} earlier events "
            "announced): topic memory_events, service query_memory"
        )

    def destroy_node(self) -> None:
        """Close the memory file, then destroy the node."""
        if getattr(self, "store", None) is not None:
            self.store.close()
        super().destroy_node()

    # ---------------------------------------------------------------- parameters
    def param(self, name: str) -> Any:
        """Return the current value of a parameter."""
        return self.get_parameter(name).value

    def check_parameters(self, params: Sequence[Parameter]) -> SetParametersResult:
        """Accept values only before start (they are read once) and only when they are usable."""
        if self._started:
            return SetParametersResult(successful=False, reason="memory parameters are read at start; restart")
        values = {name: default for name, (default, _) in PARAMETERS.items()}
        values.update({name: self.param(name) for name in PARAMETERS if self.has_parameter(name)})
        values.update({p.name: p.value for p in params})
        problems = parameter_problems(values)
        return SetParametersResult(successful=not problems, reason="; ".join(problems))

    # ---------------------------------------------------------------- events
    def event(self, record: MemoryRecord, payload_json: str | None = None) -> MemoryEvent:
        """Build the MemoryEvent of a record (typed payload where the kind has a message form)."""
        msg = MemoryEvent(
            sequence=record.sequence,
            kind=record.kind,
            record_id=record.record_id,
            round=record.round,
            payload_json=payload_json if payload_json is not None else to_json(summarize(record.payload)),
            uri=record.uri,
        )
        msg.header.stamp = _stamp(record.created)
        if record.kind in MESSAGES:
            type_name, build = MESSAGES[record.kind]
            try:
                msg.payload = serialize_message(build(record))
                msg.payload_type = type_name
            except (ConversionError, KeyError, TypeError, ValueError) as exc:
                self.get_logger().warning(f"{record.kind} {record.record_id!r}: no typed payload ({exc})")
        return msg

    def poll(self, limit: int = POLL_BATCH) -> int:
        """Publish every event written since the last one published; return how many."""
        try:
            rows = self.store.event_summaries(after_sequence=self.last_sequence, limit=limit)
            for row in rows:
                if row["kind"] in MESSAGES:
                    record = self.store.get(row["kind"], row["record_id"])
                else:  # only the summary is published: skip reading the full payload
                    record = MemoryRecord(
                        sequence=row["sequence"],
                        kind=row["kind"],
                        record_id=row["record_id"],
                        round=row["round"],
                        payload={},
                        created=row["created"],
                        uri=record_uri(self.store.path, row["kind"], row["record_id"]),
                    )
                if record is not None:
                    self.publisher.publish(self.event(record, row["payload_json"]))
                self.last_sequence = row["sequence"]
        except (sqlite3.Error, RuntimeError) as exc:
            if str(exc) != self._failing:  # log each new problem once; retry on the next tick
                self.get_logger().error(f"reading {self.store.path} failed: {exc}")
                self._failing = str(exc)
            return 0
        self._failing = ""
        return len(rows)

    # ---------------------------------------------------------------- queries
    def on_query(self, request: QueryMemory.Request, response: QueryMemory.Response) -> QueryMemory.Response:
        """Answer a query; ``success: false`` with the error naming the field when it is invalid."""
        try:
            records, result = self.store.query(
                request.query,
                kind=request.kind,
                text=request.text,
                record_id=request.record_id,
                round_min=request.round_min,
                round_max=request.round_max,
                limit=request.limit,
            )
            response.records = [self.event(r) for r in records]
            response.result_json = json.dumps(result)
        except MemoryQueryError as exc:
            response.success, response.error = False, str(exc)
            self.get_logger().warning(f"query_memory rejected: {response.error}")
            return response
        except Exception as exc:  # keep serving; the traceback goes to the log
            response.success, response.error = False, f"internal error: {type(exc).__name__}: {exc}"
            self.get_logger().error(f"query_memory failed: {traceback.format_exc()}")
            return response
        response.success = True
        return response


def main(args: list[str] | None = None) -> None:
    """Run the node until shutdown; exit with status 2 and the reason when a parameter is unusable."""
    try:
        run_node(MemoryNode, args)
    except (MemoryNodeError, InvalidParameterValueException) as exc:
        print(f"memory: {exc}", file=sys.stderr)
        shutdown_context()
        sys.exit(2)


if __name__ == "__main__":
    main()
