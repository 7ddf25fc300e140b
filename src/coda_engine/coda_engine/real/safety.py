# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The safety layer of a real arm (always on) and the sim-first gate.

:class:`SafetyLayer` checks every command before it reaches the controller, watches the state and policy
streams, tracks whether the arm follows its commands, and latches an e-stop until it is released. A release
takes more than one call: every stop signal must have been quiet for ``estop_release_quiet_s`` (and the
``estop`` topic's latest value false), and after it the layer refuses every command except the bridge's own
re-home moves until :meth:`SafetyLayer.rehomed` says the arm is home. Each check
returns ``None`` (go ahead) or an :class:`Intervention` that says what was violated, with the numbers; the
caller holds the measured position and records it. The layer is deterministic: the caller passes the time
(``now``, any monotonic clock in seconds), so the same inputs always give the same answer.

:func:`gate_check` is the sim-first gate: a trained policy version reaches a real arm only after it passed the
configured success rate on the held-out ``id`` suite in simulation. Pure module: no rclpy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda_engine.real.robot import ENGINE_ARM_JOINTS, N_ARM_JOINTS, GateConfig, SafetyConfig
from coda_engine.sim.state_expert import DEMONSTRATORS

ESTOP_TRANSITIONS = ("estop", "estop_release_refused", "estop_released", "rehoming", "home", "rehome_failed")
"""Kinds of the e-stop's transitions, in the order they come: latched, a ``reset_estop`` refused (why, how long is
left), released (after how long latched), re-homing, home (commands accepted again) or re-home failed (then latched
again). ``estop`` is also the kind of a command refused while the e-stop holds."""
KINDS = ("joint_limit", "velocity_limit", "workspace", "max_step", "watchdog", "gate", *ESTOP_TRANSITIONS)
"""Kinds of intervention and of e-stop transition (the ``KIND_*`` constants of ``coda_msgs/SafetyEvent``)."""

EVALUATION_FILE = "evaluation.json"
"""File in a version's checkpoint folder with its success rates in simulation (written by the loop)."""
GATE_SPLIT = "id"
"""The evaluation suite the gate reads (held-out scenes of the training distribution)."""


@dataclass(frozen=True)
class Intervention:
    """One intervention of the safety layer."""

    kind: str
    """One of :data:`KINDS`."""
    detail: str
    """What was violated, with the numbers (``panda_joint4: target 0.230 rad above upper limit -0.070``)."""
    stamp: float
    """When, s (the caller's clock)."""
    holding: bool = True
    """Whether the arm now holds its measured position."""

    def __post_init__(self) -> None:
        """Check the kind."""
        if self.kind not in KINDS:
            raise ValueError(f"Intervention kind {self.kind!r} is not one of {list(KINDS)}")

    def to_event(self, robot_id: str, episode_id: str = "") -> dict[str, Any]:
        """Fields of a ``coda_msgs/SafetyEvent`` (the header is left to the caller)."""
        return {
            "robot_id": robot_id,
            "kind": self.kind,
            "detail": self.detail,
            "episode_id": episode_id,
            "holding": self.holding,
        }


class SafetyLayer:
    """Command checks, watchdogs, tracking and the latched e-stop of one arm."""

    def __init__(
        self, config: SafetyConfig, control_rate_hz: float, joint_names: Sequence[str] = ENGINE_ARM_JOINTS
    ) -> None:
        """Check commands against ``config`` at ``control_rate_hz``; details name joints by ``joint_names``."""
        if not (isinstance(control_rate_hz, (int, float)) and math.isfinite(control_rate_hz) and control_rate_hz > 0):
            raise ValueError(f"control_rate_hz={control_rate_hz!r} must be a finite number > 0")
        if len(joint_names) != N_ARM_JOINTS:
            raise ValueError(f"joint_names must list {N_ARM_JOINTS} names, got {list(joint_names)}")
        self.config = config
        self.rate = float(control_rate_hz)
        self.joint_names = tuple(joint_names)
        self._lower = np.asarray(config.joint_lower, dtype=np.float64)
        self._upper = np.asarray(config.joint_upper, dtype=np.float64)
        self._vmax = np.asarray(config.max_joint_velocity, dtype=np.float64)
        self._box_low = np.asarray(config.workspace_low, dtype=np.float64)
        self._box_high = np.asarray(config.workspace_high, dtype=np.float64)
        self._latched = False
        self._latch_reason = ""
        self._latched_at: float | None = None  # when the e-stop latched (None = not latched)
        self._last_stop: float | None = None  # time of the latest stop signal (service call or true on the topic)
        self._signal_active = False  # the estop topic's latest value
        self._rehoming = False  # released, not yet home: only re-home moves may go
        self._off_since: float | None = None  # when the arm started to be far from its command
        self._last_tracking: float | None = None  # time of the previous check_tracking call

    # ------------------------------------------------------------------------------------------ e-stop
    @property
    def latched(self) -> bool:
        """Whether the e-stop is latched (every command is refused until :meth:`reset`)."""
        return self._latched

    @property
    def latch_reason(self) -> str:
        """Why the e-stop latched ('' when it is not latched)."""
        return self._latch_reason

    @property
    def latched_since(self) -> float | None:
        """When the e-stop latched (the caller's clock), None when it is not latched."""
        return self._latched_at

    @property
    def rehoming(self) -> bool:
        """Whether the e-stop was released and the arm is not home yet (only re-home moves are accepted)."""
        return self._rehoming

    def estop(self, now: float, reason: str) -> Intervention:
        """Latch the e-stop (a second trigger keeps the first reason) and return the intervention to record."""
        if not self._latched:
            self._latched, self._latch_reason, self._latched_at = True, reason or "e-stop", now
        self._last_stop = now if self._last_stop is None else max(self._last_stop, now)
        self._rehoming = False
        self._reset_tracking()
        return Intervention("estop", f"e-stop: {reason or 'no reason given'}", now)

    def estop_signal(self, now: float, active: bool) -> Intervention | None:
        """Take one message of the ``estop`` topic: true latches (see :meth:`estop`), false only marks it quiet.

        The quiet time runs from the latest true, or from the false that ended a run of trues (a publisher that
        sends on change only says false once, when the stop button comes up).
        """
        if active:
            self._signal_active = True
            return self.estop(now, "estop topic")
        if self._signal_active:
            self._last_stop = now if self._last_stop is None else max(self._last_stop, now)
        self._signal_active = False
        return None

    def release(self, now: float) -> tuple[bool, str]:
        """Release the latch if the stop signals have been quiet long enough; returns (released, what happened).

        Refused while the ``estop`` topic's latest value is true or within ``estop_release_quiet_s`` of the latest
        stop signal; the message of a refusal says why and how long is left. A release leaves the layer re-homing:
        every command but the re-home moves is refused until :meth:`rehomed`.
        """
        if not self._latched:
            if self._rehoming:
                return False, "e-stop was not latched (released already: the arm is re-homing)"
            return False, "e-stop was not latched"
        quiet = self.config.estop_release_quiet_s
        if self._signal_active:
            return False, ("e-stop not released: the estop topic still says stop (its latest message is true); "
                           f"publish false, then every stop signal must be quiet for {quiet:g} s")
        since = now - self._last_stop if self._last_stop is not None else math.inf
        if since < quiet:
            return False, (f"e-stop not released: the latest stop signal was {since:.2f} s ago; it must be quiet for "
                           f"{quiet:g} s ({quiet - since:.2f} s left)")
        held = now - self._latched_at if self._latched_at is not None else math.nan
        reason = self._latch_reason
        self._latched, self._latch_reason, self._latched_at, self._rehoming = False, "", None, True
        self._reset_tracking()
        return True, (f"e-stop released after {_age(held)} latched ({reason}): re-homing at reduced speed before "
                      "commands are accepted")

    def rehomed(self) -> None:
        """Mark the arm home after a release: commands are accepted again."""
        self._rehoming = False

    # ------------------------------------------------------------------------------------------ commands
    def check_command(
        self, now: float, q_measured: np.ndarray, q_target: np.ndarray, tcp_measured: np.ndarray,
        tcp_target: np.ndarray, rehome: bool = False,
    ) -> Intervention | None:
        """Check one command (joint targets and their tool point) against the measured state; None = it may go.

        Order: latched e-stop, re-homing after a release (``rehome``: the command is one of the re-home moves,
        which alone may go then), step of the tool point, workspace box, joint limits, joint velocities. A
        non-finite value is a violation of the first check that reads it.
        """
        q_meas = _vector(q_measured, N_ARM_JOINTS, "q_measured")
        q_tgt = _vector(q_target, N_ARM_JOINTS, "q_target")
        tcp_meas = _vector(tcp_measured, 3, "tcp_measured")
        tcp_tgt = _vector(tcp_target, 3, "tcp_target")
        if self._latched:
            return Intervention("estop", f"e-stop latched ({self._latch_reason}): command refused until reset", now)
        if self._rehoming and not rehome:
            return Intervention("estop", "re-homing after the e-stop release: commands refused until the arm is home",
                                now)
        return (
            self._step(now, tcp_meas, tcp_tgt)
            or self._workspace(now, tcp_tgt)
            or self._joint_limits(now, q_tgt)
            or self._velocity(now, q_meas, q_tgt)
        )

    def _step(self, now: float, tcp_meas: np.ndarray, tcp_tgt: np.ndarray) -> Intervention | None:
        for what, tcp in (("measured", tcp_meas), ("target", tcp_tgt)):
            bad = _first_nonfinite(tcp)
            if bad is not None:
                return Intervention(
                    "max_step", f"{what} tool point {'xyz'[bad]}={tcp[bad]} is not finite ({_fmt(tcp)})", now
                )
        delta = tcp_tgt - tcp_meas
        step = float(np.linalg.norm(delta))
        if step > self.config.max_step:
            axis = int(np.argmax(np.abs(delta)))
            return Intervention(
                "max_step",
                f"tool point step {step:.3f} m above max_step {self.config.max_step:.3f} m "
                f"(largest along {'xyz'[axis]}: {delta[axis]:+.3f} m; measured {_fmt(tcp_meas)} -> "
                f"target {_fmt(tcp_tgt)})",
                now,
            )
        return None

    def _workspace(self, now: float, tcp_tgt: np.ndarray) -> Intervention | None:
        problems = []
        for i, axis in enumerate("xyz"):
            value, low, high = tcp_tgt[i], self._box_low[i], self._box_high[i]
            if value < low:
                problems.append(f"{axis}={value:.3f} m below workspace low {low:.3f}")
            elif value > high:
                problems.append(f"{axis}={value:.3f} m above workspace high {high:.3f}")
        if problems:
            return Intervention(
                "workspace", f"target tool point {_fmt(tcp_tgt)} outside the workspace: " + "; ".join(problems), now
            )
        return None

    def _joint_limits(self, now: float, q_tgt: np.ndarray) -> Intervention | None:
        problems = []
        for i, name in enumerate(self.joint_names):
            value, low, high = q_tgt[i], self._lower[i], self._upper[i]
            if not math.isfinite(value):
                problems.append(f"{name}: target {value} rad is not finite")
            elif value < low:
                problems.append(f"{name}: target {value:.3f} rad below lower limit {low:.3f}")
            elif value > high:
                problems.append(f"{name}: target {value:.3f} rad above upper limit {high:.3f}")
        return Intervention("joint_limit", "; ".join(problems), now) if problems else None

    def _velocity(self, now: float, q_meas: np.ndarray, q_tgt: np.ndarray) -> Intervention | None:
        problems = []
        for i, name in enumerate(self.joint_names):
            if not math.isfinite(q_meas[i]):
                problems.append(f"{name}: measured position {q_meas[i]} rad is not finite")
                continue
            speed = abs(q_tgt[i] - q_meas[i]) * self.rate
            if speed > self._vmax[i]:
                problems.append(
                    f"{name}: {speed:.3f} rad/s above velocity limit {self._vmax[i]:.3f} "
                    f"(step {q_tgt[i] - q_meas[i]:+.3f} rad at {self.rate:g} Hz)"
                )
        return Intervention("velocity_limit", "; ".join(problems), now) if problems else None

    # ------------------------------------------------------------------------------------------ watchdogs
    def check_watchdog(self, now: float, last_state: float | None, last_command: float | None) -> Intervention | None:
        """Hold when the joint states or the policy went silent; None = both streams are alive.

        ``last_state``: stamp of the latest joint state (None = none yet). ``last_command``: when the policy last
        commanded (None = no policy stream is expected now, e.g. outside an episode).
        """
        cfg = self.config
        if last_state is None:
            return Intervention("watchdog", "joint_states: no joint state received", now)
        age = now - last_state
        if not math.isfinite(age) or age > cfg.state_timeout_s:
            return Intervention(
                "watchdog", f"joint_states silent for {_age(age)} (limit {cfg.state_timeout_s:.3f} s)", now
            )
        if last_command is not None:
            age = now - last_command
            if not math.isfinite(age) or age > cfg.policy_timeout_s:
                return Intervention(
                    "watchdog", f"policy silent for {_age(age)} (limit {cfg.policy_timeout_s:.3f} s)", now
                )
        return None

    def check_tracking(self, now: float, q_measured: np.ndarray, q_commanded: np.ndarray) -> Intervention | None:
        """Hold when the arm stays more than ``max_tracking_error`` from its command for ``tracking_timeout_s``.

        That means the controller rejected the commands or is not executing them. The time counts only while
        calls are continuous: a gap longer than ``tracking_timeout_s`` between two calls starts it again.
        A non-finite joint position is an immediate intervention.
        """
        cfg = self.config
        q_meas = _vector(q_measured, N_ARM_JOINTS, "q_measured")
        q_cmd = _vector(q_commanded, N_ARM_JOINTS, "q_commanded")
        for what, q in (("measured", q_meas), ("commanded", q_cmd)):
            bad = _first_nonfinite(q)
            if bad is not None:
                self._reset_tracking()
                return Intervention(
                    "watchdog", f"tracking: {what} {self.joint_names[bad]} = {q[bad]} rad is not finite", now
                )
        previous, self._last_tracking = self._last_tracking, now
        if previous is not None and not (0.0 <= now - previous <= cfg.tracking_timeout_s):
            self._off_since = None  # not watched continuously (or the clock went back): start again
        error = np.abs(q_meas - q_cmd)
        worst = int(np.argmax(error))
        if error[worst] <= cfg.max_tracking_error:
            self._off_since = None
            return None
        if self._off_since is None:
            self._off_since = now
        lasting = now - self._off_since
        if lasting < cfg.tracking_timeout_s:
            return None
        return Intervention(
            "watchdog",
            f"tracking: {self.joint_names[worst]} is {error[worst]:.3f} rad from its "
            f"command (limit {cfg.max_tracking_error:.3f} rad) for {lasting:.2f} s (limit "
            f"{cfg.tracking_timeout_s:.2f} s): the controller is not executing the commands",
            now,
        )

    def _reset_tracking(self) -> None:
        self._off_since = None
        self._last_tracking = None


# ---------------------------------------------------------------------------------------------- the gate
def gate_check(version: str, folder: Path | None, gate: GateConfig) -> str:
    """'' when policy ``version`` may drive the arm; otherwise why not.

    The demonstrators (the scripted and the state expert) may drive only with ``gate.allow_expert``. A trained
    version needs
    ``<folder>/evaluation.json`` (``{"per_split": {"id": rate, ...}, ...}``, written by the loop's evaluation in
    simulation) with ``per_split["id"] >= gate.min_sim_success``.
    """
    if not version:
        return "empty policy version"
    if version in DEMONSTRATORS:
        allowed = gate.allow_expert
        return "" if allowed else f"the demonstrator {version!r} may not drive this arm (gate.allow_expert is false)"
    if folder is None:
        return f"policy version {version!r}: no checkpoint folder (no checkpoint_root configured), so no evaluation"
    path = Path(folder) / EVALUATION_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return f"policy version {version!r} has no simulation evaluation ({path} is missing): evaluate it in simulation"
    except (OSError, UnicodeDecodeError) as exc:
        return f"policy version {version!r}: cannot read {path} ({exc})"
    except json.JSONDecodeError as exc:
        return f"policy version {version!r}: {path} is not valid JSON ({exc})"
    per_split = data.get("per_split") if isinstance(data, dict) else None
    if not isinstance(per_split, dict) or GATE_SPLIT not in per_split:
        return f"policy version {version!r}: {path} has no per_split.{GATE_SPLIT} success rate"
    rate = per_split[GATE_SPLIT]
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0.0 <= rate <= 1.0:
        return f"policy version {version!r}: {path} per_split.{GATE_SPLIT}={rate!r} is not a success rate in [0, 1]"
    recorded = data.get("version")
    if recorded is not None and recorded != version:
        return f"policy version {version!r}: {path} evaluates version {recorded!r}, not this one"
    if rate < gate.min_sim_success:
        return (
            f"policy version {version!r}: success {rate:.1%} on the held-out {GATE_SPLIT} suite in simulation is "
            f"below the gate {gate.min_sim_success:.1%}"
        )
    return ""


# ---------------------------------------------------------------------------------------------- helpers
def _vector(value: object, size: int, name: str) -> np.ndarray:
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    if array.shape != (size,):
        raise ValueError(f"{name} must have {size} values, got shape {np.shape(value)}")
    return array


def _first_nonfinite(values: np.ndarray) -> int | None:
    bad = np.flatnonzero(~np.isfinite(values))
    return int(bad[0]) if bad.size else None


def _fmt(values: np.ndarray) -> str:
    return "(" + ", ".join(f"{v:.3f}" for v in values) + ")"


def _age(age: float) -> str:
    return f"{age:.3f} s" if math.isfinite(age) else f"an unknown time ({age})"
