# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""CoDA core hot paths implemented in C++ (see include/coda_core/), re-exported from the extension.

* :class:`RolloutBuffer`, :func:`compute_gae`: on-policy rollout storage and GAE with the
  semantics of Stable-Baselines3's ``RolloutBuffer.compute_returns_and_advantage``.
* :class:`TransitionRing`: single-producer/single-consumer ring with drop-oldest overflow.
* :class:`PotentialProgram`, :func:`shape_rewards`, :class:`PotentialError`: the
  staged-potential language (``coda_core_cpp.reference`` is its pure-Python twin).
* :class:`ObjectTokenActor`: the policy's action mean for one observation (built from
  ``coda_policy.action_mean.NumpyActionMean.spec()``; serves the ``policy`` node's control ticks).

The real-time parts that talk to rcl live in the separate extension ``coda_core_cpp._rt`` (imported on demand, so
this module needs no ROS): ``ControlTick`` (the ``policy`` node's control step in C++), ``ControlLoop`` (that step
on a C++ thread of its own over rcl) and ``Probe`` (the arm side of ``coda bench control``).
"""

from coda_core_cpp._core import (
    Minibatch,
    MinibatchIterator,
    ObjectTokenActor,
    PotentialProgram,
    RolloutBuffer,
    TransitionRing,
    compute_gae,
    shape_rewards,
    version,
)
from coda_core_cpp.errors import PotentialError

__all__ = [
    "Minibatch",
    "MinibatchIterator",
    "ObjectTokenActor",
    "PotentialError",
    "PotentialProgram",
    "RolloutBuffer",
    "TransitionRing",
    "compute_gae",
    "shape_rewards",
    "version",
]
