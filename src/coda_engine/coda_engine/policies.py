# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Which action function acts for a policy version on a worker.

``expert`` is the family's scripted demonstrator (closed loop on privileged state, simulation
only). Trained versions are folders ``<checkpoint_root>/<version>/`` written by coda_policy; this
module loads them through ``coda_policy.serving.load_action_fn`` when that package provides it,
and otherwise says exactly what is missing. Pure module: no rclpy.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from coda_engine.sim.expert import ActionFn
from coda_engine.sim.families import get_family
from coda_engine.sim.scene import Scene

EXPERT = "expert"


class PolicyNotAvailableError(LookupError):
    """A policy version this worker cannot run; the message says why."""


def resolve(version: str, scene: Scene, checkpoint_root: Path | None) -> ActionFn:
    """Return a fresh action function of ``version`` for one episode in ``scene``."""
    if not version:
        raise PolicyNotAvailableError("empty policy version (use 'expert' or a trained version id)")
    if version == EXPERT:
        expert = get_family(scene.family).expert()
        expert.reset()
        return lambda obs, state: expert.act(state)
    if checkpoint_root is None:
        raise PolicyNotAvailableError(f"policy version {version!r}: this worker has no checkpoint_root configured")
    folder = checkpoint_root / version
    if not folder.is_dir():
        raise PolicyNotAvailableError(f"policy version {version!r}: no checkpoint folder {folder}")
    try:
        serving = importlib.import_module("coda_policy.serving")
    except ImportError as exc:
        raise PolicyNotAvailableError(
            f"policy version {version!r}: coda_policy.serving is not importable ({exc})"
        ) from exc
    return serving.load_action_fn(folder, scene)
