# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Which action function acts for a policy version on a worker.

``expert`` is the family's scripted demonstrator and ``state_expert`` the state-derived one
(:mod:`coda_engine.sim.state_expert`; both closed loop on privileged state, simulation only). Trained versions
are folders ``<checkpoint_root>/<version>/``; the engine does not know how to read them. A package above it
registers a *policy loader* under the entry-point group :data:`LOADER_GROUP` (coda_policy registers
``checkpoint = coda_policy.serving:load_action_fn`` in its setup.py), the way a ROS 2 server finds its plugins:
the engine's workers and bridges run whatever policy package is installed, and the engine depends on none of them.
Without one, :func:`resolve` says exactly what is missing. Pure module: no rclpy.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

from coda_engine.sim.expert import ActionFn
from coda_engine.sim.scene import Scene
from coda_engine.sim.state_expert import DEMONSTRATORS, EXPERT, STATE_EXPERT, demonstrator

__all__ = ["DEMONSTRATORS", "EXPERT", "LOADER_GROUP", "STATE_EXPERT", "PolicyNotAvailableError", "policy_loader",
           "resolve"]
LOADER_GROUP = "coda_engine.policy_loaders"
"""Entry-point group of policy loaders: ``load(folder, scene, control_hz) -> ActionFn`` for one episode of
``scene`` on an arm running at ``control_hz`` (None: not checked); a ValueError refuses the version."""

PolicyLoader = Callable[[Path, Scene, "float | None"], ActionFn]


class PolicyNotAvailableError(LookupError):
    """A policy version this worker cannot run; the message says why."""


@cache
def policy_loader() -> PolicyLoader:
    """Return the installed policy loader (found once per process); PolicyNotAvailableError if there is not one."""
    found = sorted(entry_points(group=LOADER_GROUP), key=lambda ep: ep.name)
    if not found:
        raise PolicyNotAvailableError(
            f"no policy loader is installed (entry-point group {LOADER_GROUP!r}): install coda_policy, "
            "which registers the loader of its checkpoints"
        )
    if len(found) > 1:
        names = ", ".join(f"{ep.name} = {ep.value}" for ep in found)
        raise PolicyNotAvailableError(f"several policy loaders are installed ({names}): keep one")
    try:
        return found[0].load()
    except ImportError as exc:
        raise PolicyNotAvailableError(f"policy loader {found[0].value} is not importable ({exc})") from exc


def resolve(version: str, scene: Scene, checkpoint_root: Path | None, control_hz: float | None = None) -> ActionFn:
    """Return a fresh action function of ``version`` for one episode in ``scene``.

    ``control_hz``: the rate of the arm the episode runs on; a trained version is refused when it was trained at
    another rate (the demonstrators act on state and run at any rate).
    """
    if not version:
        raise PolicyNotAvailableError("empty policy version (use 'expert', 'state_expert' or a trained version id)")
    if version in DEMONSTRATORS:
        expert = demonstrator(scene.family, version)
        return lambda obs, state: expert.act(state)
    if checkpoint_root is None:
        raise PolicyNotAvailableError(f"policy version {version!r}: this worker has no checkpoint_root configured")
    folder = checkpoint_root / version
    if not folder.is_dir():
        raise PolicyNotAvailableError(f"policy version {version!r}: no checkpoint folder {folder}")
    try:
        load = policy_loader()
    except PolicyNotAvailableError as exc:
        raise PolicyNotAvailableError(f"policy version {version!r}: {exc}") from exc
    try:
        return load(folder, scene, control_hz)
    except ValueError as exc:
        raise PolicyNotAvailableError(f"policy version {version!r}: {exc}") from exc
