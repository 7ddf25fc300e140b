# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Where the loop's scenes and diagnoses come from: this process, or a node of the ROS domain.

The generate step (and the train step's BC gate) asks a :class:`SceneSource` for the scene of each seed it draws,
and the diagnose step asks a :class:`Critic` to diagnose the round's episodes. Each has two implementations with
the same results:

===============  ===========================================  ==================================================
piece            in-process (``coda run``, no DDS round trip)  over ROS 2 (:mod:`coda_loop.ros.remote`)
===============  ===========================================  ==================================================
scene source     :class:`InProcessScenes`                       ``RemoteScenes``: ``scene_generator``'s
                                                                ``GenerateScenes`` with explicit seeds
critic           ``coda_critic.grounded.GroundedCritic`` (or    ``RemoteCritic``: the ``critic`` node's
                 the run's learned critic)                      ``DiagnoseEpisodes``
episode runner   :class:`coda_loop.workers.EpisodeRunner`'s     the same runner's ``sim_bridge`` workers
                 local processes                                (``RunEpisode``)
===============  ===========================================  ==================================================

Both scene sources end in :func:`coda_engine.sim.generator.scenes_of_seeds`, and both critics in the same
``diagnose`` of the critic package, so a run gives the same scenes and diagnoses in either deployment. The memory
is the run folder's SQLite file, written by the loop and served to the domain by the ``memory`` node. PPO's
environments draw their scenes inside the trainer (:mod:`coda_policy.rl`: a new scene at every environment reset,
thousands per round, where a service round trip each would cost more than the scene).
Pure module: no rclpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from coda_engine.sim.scene import Scene, SceneParams


class SceneSource(Protocol):
    """Generates the scene of each seed (the loop draws the seeds)."""

    where: str
    """Where the scenes are generated, for the step's outputs (``in-process`` or a service name)."""

    def generate(self, family: str, seeds: Sequence[int], params: SceneParams, round_index: int) -> list[Scene]:
        """Return one scene of ``family`` per seed, generated with ``params``, recording ``round_index``."""
        ...


class Critic(Protocol):
    """Diagnoses episodes (``coda_critic.diagnosis.Diagnosis``, one per episode, in order)."""

    def diagnose(self, episodes: Sequence[Any]) -> list[Any]:
        """Return one diagnosis per ``RecordedEpisode``."""
        ...


class InProcessScenes:
    """The embedded scene source: the engine's generator in this process."""

    where = "in-process"

    def generate(self, family: str, seeds: Sequence[int], params: SceneParams, round_index: int) -> list[Scene]:
        """See :meth:`SceneSource.generate`."""
        from coda_engine.sim.generator import scenes_of_seeds

        return scenes_of_seeds(family, seeds, params, round_index)

