# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The loop's scene source and critic over ROS 2 (see :mod:`coda_loop.sources` for the in-process ones).

:class:`RemoteScenes` calls a ``scene_generator`` node's ``GenerateScenes`` with the seeds the loop drew;
:class:`RemoteCritic` sends a round's episodes, with their scenes, to a ``critic`` node's ``DiagnoseEpisodes``.
Both call through the episode runner's client, so one executor spins the loop's node for everything it waits on.
A failed call raises :class:`~coda_engine.ros.clients.EngineClientError` naming the service and the node's error;
the step then fails and the run resumes at it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from coda_engine.ros.clients import EngineClient, EngineClientError
from coda_engine.ros.convert import dict_to_msg, msg_to_dict
from coda_engine.sim.scene import Scene, SceneParams
from coda_msgs.msg import EpisodeResult, SceneSpec
from coda_msgs.srv import DiagnoseEpisodes

BATCH = 64
"""Episodes per DiagnoseEpisodes request (the service takes at most 256)."""


class RemoteScenes:
    """Scenes from a ``scene_generator`` node (its ``GenerateScenes`` service, by name)."""

    def __init__(self, client: Callable[[], EngineClient], service: str, timeout: float = 120.0) -> None:
        """``client`` returns the runner's client (created on first use); ``service``: e.g. ``/generate_scenes``."""
        self._client = client
        self.where = service
        self.timeout = timeout

    def generate(self, family: str, seeds: Sequence[int], params: SceneParams, round_index: int) -> list[Scene]:
        """See :meth:`coda_loop.sources.SceneSource.generate`."""
        scenes = self._client().generate(family, 0, 0, split=params.split,
                                         params_json=json.dumps(params.to_json_dict()), round_index=round_index,
                                         timeout=self.timeout, seeds=seeds, service=self.where)
        if len(scenes) != len(seeds):
            raise EngineClientError(f"{self.where} answered {len(scenes)} scenes for {len(seeds)} seeds")
        return [Scene.from_dict(msg_to_dict(msg)) for msg in scenes]


class RemoteCritic:
    """Diagnoses from a ``critic`` node (its ``DiagnoseEpisodes`` service, by name), with one backend."""

    def __init__(self, client: Callable[[], EngineClient], service: str, backend: str = "grounded",
                 timeout: float = 300.0) -> None:
        """``backend`` as DiagnoseEpisodes takes it (``grounded`` needs no keyframes)."""
        self._client = client
        self.service = service
        self.backend = backend
        self.name = backend
        self.timeout = timeout
        self._service: Any = None

    def diagnose(self, episodes: Sequence[Any]) -> list[Any]:
        """See :meth:`coda_loop.sources.Critic.diagnose` (the keyframes travel unless the backend is grounded)."""
        from coda_critic.diagnosis import Diagnosis
        from coda_engine.ros.images import image_to_msg

        client = self._client()
        if self._service is None:
            self._service = client.node.create_client(DiagnoseEpisodes, self.service)
        out: list[Any] = []
        for start in range(0, len(episodes), BATCH):
            batch = episodes[start:start + BATCH]
            scenes = {ep.scene.scene_id: ep.scene for ep in batch}
            request = DiagnoseEpisodes.Request(backend=self.backend,
                                               scenes=[dict_to_msg(SceneSpec, s.to_dict()) for s in scenes.values()])
            for ep in batch:
                msg = dict_to_msg(EpisodeResult, ep.to_result_dict())
                if self.backend == "grounded":  # privileged state only: no images to send
                    msg.keyframe_steps = []
                else:
                    msg.keyframes = [image_to_msg(frame) for frame in ep.keyframes]
                request.episodes.append(msg)
            response = client.call(self._service, request, self.timeout, "diagnose_episodes")
            if not response.success:
                raise EngineClientError(f"{self.service} failed: {response.error}")
            if len(response.diagnoses) != len(batch):
                raise EngineClientError(f"{self.service} answered {len(response.diagnoses)} diagnoses for "
                                        f"{len(batch)} episodes")
            out += [Diagnosis.from_dict(msg_to_dict(d)) for d in response.diagnoses]
        return out


def use_nodes(loop: Any, generator_service: str = "", critic_service: str = "") -> None:
    """Make ``loop`` (a ``CoevolutionLoop`` with a node) generate and diagnose through the named services.

    Empty names keep that piece in-process. The services may be on any machine of the domain.
    """
    if generator_service:
        loop.scene_source = RemoteScenes(lambda: loop.runner.engine_client(), generator_service)
    if critic_service:
        loop.critic_source = RemoteCritic(lambda: loop.runner.engine_client(), critic_service)
