# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``scene_generator`` node: the ``GenerateScenes`` service, and every generated scene on ``scene_specs``.

    ros2 run coda_engine scene_generator
    ros2 service call /generate_scenes coda_msgs/srv/GenerateScenes "{family: reach, split: id, count: 2, seed: 7}"

A request with ``seeds`` gets one scene per seed, exactly the scene ``generate_seeded`` gives that seed in-process
(the loop's generation over ROS draws its seeds as the in-process generator does, so both give the same scenes).

Invalid requests (unknown family or split, bad JSON, impossible parameters, count out of range)
answer ``success: false`` with an error naming what was wrong; the node keeps serving.
"""

from __future__ import annotations

import json
import traceback
from collections import Counter

import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from coda_engine.ros.convert import dict_to_msg
from coda_engine.ros.spin import run_node
from coda_engine.sim.generator import generate_seeded, scenes_of_seeds
from coda_engine.sim.scene import SceneParams
from coda_msgs.msg import SceneSpec
from coda_msgs.srv import GenerateScenes

MAX_COUNT = 1000
MAX_SEEDS = 256
"""Most explicit seeds in one request (the loop sends one per scene)."""


def scene_seeds(seed: int, count: int) -> list[int]:
    """Per-scene seeds derived from a request's base seed (independent streams, reproducible)."""
    children = np.random.SeedSequence(seed).spawn(count)
    return [int(c.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for c in children]


class SceneGeneratorNode(Node):
    """Serves GenerateScenes and publishes the scenes it generates."""

    def __init__(self) -> None:
        """Declare parameters, the service and the publisher."""
        super().__init__("scene_generator")
        self.declare_parameter(
            "inline_mjcf", True, ParameterDescriptor(description="put the generated MJCF text in SceneSpec.mjcf")
        )
        latched = QoSProfile(
            depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.publisher = self.create_publisher(SceneSpec, "scene_specs", latched)
        self.service = self.create_service(GenerateScenes, "generate_scenes", self.on_generate)
        self.get_logger().info("scene_generator ready: service generate_scenes, topic scene_specs")

    def on_generate(
        self, request: GenerateScenes.Request, response: GenerateScenes.Response
    ) -> GenerateScenes.Response:
        """Validate the request, generate the scenes, publish and return them."""
        try:
            if not request.seeds and not 1 <= request.count <= MAX_COUNT:
                raise ValueError(f"count={request.count} must be in [1, {MAX_COUNT}]")
            try:
                overrides = json.loads(request.params_json or "{}")
            except json.JSONDecodeError as exc:
                raise ValueError(f"params_json is not valid JSON: {exc}") from exc
            if not isinstance(overrides, dict):
                raise ValueError("params_json must be a JSON object")
            overrides.setdefault("split", request.split or "id")
            if request.split and overrides["split"] != request.split:
                raise ValueError(f"split {request.split!r} disagrees with params_json split {overrides['split']!r}")
            params = SceneParams.from_json_dict(overrides)
            scenes = []
            rejections: Counter[str] = Counter()
            if request.seeds:  # the caller's own seeds (the loop draws them as its in-process generator does)
                if len(request.seeds) > MAX_SEEDS:
                    raise ValueError(f"{len(request.seeds)} seeds: at most {MAX_SEEDS} per request")
                generated = scenes_of_seeds(request.family, list(request.seeds), params, request.round)
            else:
                generated = [generate_seeded(request.family, seed, params,
                                             scene_id=f"r{request.round:03d}-{request.family}-{request.seed}-{i:04d}",
                                             round_index=request.round)
                             for i, seed in enumerate(scene_seeds(request.seed, request.count))]
            for scene in generated:
                rejections.update(r.split(":", 1)[0] for r in scene.rejections)
                data = scene.to_dict()
                if not self.get_parameter("inline_mjcf").value:
                    data["mjcf"] = ""
                scenes.append(dict_to_msg(SceneSpec, data))
        except (ValueError, RuntimeError, KeyError) as exc:
            response.success = False
            response.error = f"{type(exc).__name__}: {exc}"
            self.get_logger().warning(f"generate_scenes rejected: {response.error}")
            return response
        except Exception as exc:  # keep serving whatever a request holds; the traceback goes to the log
            response.success = False
            response.error = f"internal error: {type(exc).__name__}: {exc}"
            self.get_logger().error(f"generate_scenes failed: {traceback.format_exc()}")
            return response
        for msg in scenes:
            msg.header.stamp = self.get_clock().now().to_msg()
            self.publisher.publish(msg)
        response.success = True
        response.scenes = scenes
        response.rejection_reasons = [f"{kind}: {n}" for kind, n in sorted(rejections.items())]
        return response


def main(args: list[str] | None = None) -> None:
    """Run the node until shutdown."""
    run_node(SceneGeneratorNode, args)


if __name__ == "__main__":
    main()
