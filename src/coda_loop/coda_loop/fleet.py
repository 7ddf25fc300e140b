# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The fleet file of ``coda run --arms FILE``: simulation workers and real arms with their budgets and hours.

Example (``config/fleet_example.yaml``)::

    sim_workers: 2                  # local simulation worker processes (replaces --workers)
    arms:
      - robot_id: panda_lab1        # EpisodeResult.robot_id of its episodes
        namespace: /panda_lab1      # where its arm_bridge runs (default /<robot_id>)
        episodes_per_round: 4       # real episodes per round on this arm
        max_episodes: 0             # over the whole run (0 = no limit)
        max_hours: 0                # arm time over the whole run, h (0 = no limit)
        hours: ["08:00-18:00"]      # local-time windows when it may run episodes (empty = any time)
        episode_timeout_s: 300      # an episode still running after this counts as dropped

Pure module: no rclpy.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from coda_engine.real.robot import brief, read_yaml

_WINDOW = re.compile(r"^(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})$")


class FleetError(ValueError):
    """A fleet file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class ArmSpec:
    """One real arm of the fleet."""

    robot_id: str
    """Name of the arm (its episodes' ``robot_id``)."""
    namespace: str = ""
    """ROS namespace of its ``arm_bridge`` (default ``/<robot_id>``)."""
    episodes_per_round: int = 2
    """Real episodes per round on this arm."""
    max_episodes: int = 0
    """Episodes over the whole run (0 = no limit)."""
    max_hours: float = 0.0
    """Arm time over the whole run, hours (0 = no limit)."""
    hours: tuple[str, ...] = ()
    """Local-time windows ``HH:MM-HH:MM`` when the arm may run episodes (empty = any time; may wrap midnight)."""
    episode_timeout_s: float = 300.0
    """An episode still running after this long counts as dropped (the arm leaves the batch, the job is rescheduled)."""

    @property
    def ns(self) -> str:
        """Namespace without slashes at the ends (``run_episode`` is at ``/<ns>/run_episode``)."""
        return (self.namespace or self.robot_id).strip("/")

    def available(self, when: dt.datetime) -> bool:
        """Tell whether ``when`` (local time) falls in one of :attr:`hours` (always, when there are none)."""
        if not self.hours:
            return True
        minute = when.hour * 60 + when.minute
        for window in self.hours:
            h0, m0, h1, m1 = (int(g) for g in _WINDOW.match(window).groups())  # type: ignore[union-attr]
            start, end = h0 * 60 + m0, h1 * 60 + m1
            if (start <= minute < end) if start <= end else (minute >= start or minute < end):
                return True
        return False

    def remaining(self, used_episodes: int, used_seconds: float) -> int:
        """Episodes this arm may still run this round, given what it ran in earlier rounds."""
        left = self.episodes_per_round
        if self.max_episodes:
            left = min(left, self.max_episodes - used_episodes)
        if self.max_hours and used_seconds >= self.max_hours * 3600:
            left = 0
        return max(left, 0)


@dataclass(frozen=True)
class Fleet:
    """Simulation workers and real arms of a run."""

    sim_workers: int | None = None
    """Local simulation worker processes (None: the run's ``workers``)."""
    arms: tuple[ArmSpec, ...] = field(default_factory=tuple)
    """The real arms."""

    @classmethod
    def load(cls, path: Path) -> Fleet:
        """Read a fleet YAML file; :class:`FleetError` names the file and field of any problem."""
        return cls.from_dict(read_yaml(Path(path), "fleet file", FleetError), str(path))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "fleet") -> Fleet:
        """Validate a parsed fleet file."""
        if not isinstance(data, Mapping):
            raise FleetError(f"{source}: expected a mapping with sim_workers and arms")
        unknown = sorted(brief(k) for k in data if k not in ("sim_workers", "arms"))
        if unknown:
            raise FleetError(f"{source}: unknown keys [{', '.join(unknown)}] (expected sim_workers, arms)")
        workers = data.get("sim_workers")
        if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 0):
            raise FleetError(f"{source}: sim_workers={brief(workers)} must be an integer >= 0")
        raw = data.get("arms") or []
        if not isinstance(raw, list):
            raise FleetError(f"{source}: arms must be a list")
        arms = [_arm(entry, f"{source}: arms[{i}]") for i, entry in enumerate(raw)]
        for name in ("robot_id", "ns"):
            values = [getattr(a, name) for a in arms]
            dupes = sorted({v for v in values if values.count(v) > 1})
            if dupes:
                raise FleetError(f"{source}: arms share {name} {dupes}")
        return cls(sim_workers=workers, arms=tuple(arms))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (as it would be written in a fleet file)."""
        return {"sim_workers": self.sim_workers,
                "arms": [{f.name: (list(v) if isinstance(v := getattr(a, f.name), tuple) else v)
                          for f in fields(ArmSpec)} for a in self.arms]}


def _finite(value: float) -> bool:
    """Tell whether ``value`` is a finite number (an integer beyond the float range is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _arm(entry: Any, where: str) -> ArmSpec:
    if not isinstance(entry, Mapping):
        raise FleetError(f"{where}: expected a mapping with robot_id, episodes_per_round, ...")
    names = {f.name for f in fields(ArmSpec)}
    unknown = sorted(brief(k) for k in entry if k not in names)
    if unknown:
        raise FleetError(f"{where}: unknown keys [{', '.join(unknown)}] (expected {', '.join(sorted(names))})")
    robot_id = entry.get("robot_id")
    if not isinstance(robot_id, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", robot_id):
        raise FleetError(f"{where}.robot_id={brief(robot_id)} must be a name (letters, digits, _)")
    values: dict[str, Any] = {"robot_id": robot_id}
    namespace = entry.get("namespace", "")
    if not isinstance(namespace, str) or not re.fullmatch(r"/?([A-Za-z][A-Za-z0-9_]*/?)*", namespace):
        raise FleetError(f"{where}.namespace={brief(namespace)} must be a ROS namespace like /panda_lab1")
    values["namespace"] = namespace
    for name, minimum in (("episodes_per_round", 0), ("max_episodes", 0)):
        if name in entry:
            value = entry[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise FleetError(f"{where}.{name}={brief(value)} must be an integer >= {minimum}")
            values[name] = value
    for name, positive in (("max_hours", False), ("episode_timeout_s", True)):
        if name in entry:
            value = entry[name]
            if (not isinstance(value, (int, float)) or isinstance(value, bool) or not _finite(value) or value < 0
                    or (positive and not value)):
                bound = "> 0" if positive else ">= 0"
                raise FleetError(f"{where}.{name}={brief(value)} must be a finite number {bound}")
            values[name] = float(value)
    hours = entry.get("hours", [])
    if isinstance(hours, str):
        hours = [hours]
    if not isinstance(hours, list):
        raise FleetError(f"{where}.hours must be a list of HH:MM-HH:MM windows")
    for k, window in enumerate(hours):
        match = _WINDOW.match(window) if isinstance(window, str) else None
        if not match or int(match[1]) > 24 or int(match[3]) > 24 or int(match[2]) > 59 or int(match[4]) > 59:
            raise FleetError(f"{where}.hours[{k}]={brief(window)} must look like 08:00-18:00")
    values["hours"] = tuple(str(w) for w in hours)
    return ArmSpec(**values)
