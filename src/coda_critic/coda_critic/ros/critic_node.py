# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``critic`` node: diagnoses episodes and publishes the generation and training programs they lead to.

    ros2 run coda_critic critic --ros-args --params-file install/coda_critic/share/coda_critic/config/critic.yaml

Interfaces (relative to the node's namespace):

- ``diagnose_episodes`` (coda_msgs/srv/DiagnoseEpisodes): diagnoses a batch (its scenes come with the request or
  earlier on ``scene_specs``); the response carries one ``Diagnosis`` per episode, or ``success: false`` with an
  error naming the episode index and the field. The co-evolution loop's diagnoses come from here in
  ``launch/coda_sim.launch.py``
- ``episode_results`` (coda_msgs/EpisodeResult) in: each episode is diagnosed with the node's ``backend``;
  bad ones are logged with the reason and dropped
- ``scene_specs`` (coda_msgs/SceneSpec) in, latched: the scenes episodes refer to by ``scene_id`` (the
  scene generator's topic); specs that do not parse are logged, and episodes in them are refused
- ``diagnoses`` (coda_msgs/Diagnosis) out: every diagnosis made
- ``generation_programs``, ``training_programs``, ``potential_programs`` out, latched: planned from each
  service batch (``publish_programs``) and from every ``program_batch`` diagnoses of the topic; a training
  program's potentials are also published one by one. Programs split their budget by ``exploration_share``,
  ``replay_share`` and ``scene_replay_share`` (defaults: the shipped design, ``generation.CODA_PLANNER``); the
  scene-replay share plays again, by scene id, scenes whose latest diagnosis here was a failure (the node's
  history of diagnoses, with the ``round`` each arrived in); a consumer resolves those ids from memory; with
  ``edit_replays`` each such replay also names the edits its latest failure mode calls for (the loop applies them)

Backends: ``grounded`` (privileged simulator state), ``learned`` (keyframes + instruction; the folder
``learned_model``, the newest under ``learned_root``, else the embedded one), ``auto`` (grounded when an
episode carries object states, else learned), ``vlm`` (the local vision-language checkpoint ``vlm_model``, asked with
``vlm_decoding``; an episode whose answers stay invalid is diagnosed by the learned critic above, the
reason appended to the text). The learned critic and the checkpoint are loaded on first use; a
load error answers the request that needed them. The logic lives in :mod:`coda_critic.episode_input`,
``vlm``, ``generation`` and ``text2potential``; this node converts and publishes.
"""

from __future__ import annotations

import traceback
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from coda_critic.diagnosis import CriticInputError, Diagnosis, check_episodes
from coda_critic.episode_input import (
    BACKEND_CHOICES,
    LearnedModelError,
    SceneBook,
    check_batch_size,
    check_for_backends,
    choose_backends,
    diagnose_with,
    episodes_from_results,
    resolve_learned_model,
)
from coda_critic.generation import CODA_PLANNER, ROUND_BUDGET, GenerationConfig, replay_candidates
from coda_critic.grounded import GroundedCritic
from coda_critic.models import EMBEDDED_MODEL
from coda_critic.programs import plan_programs
from coda_engine.episodes import RecordedEpisode
from coda_engine.ros.convert import dict_to_msg, msg_to_dict
from coda_engine.ros.images import ImageError, msg_to_image
from coda_engine.ros.spin import run_node
from coda_msgs.msg import Diagnosis as DiagnosisMsg
from coda_msgs.msg import EpisodeResult, GenerationProgram, PotentialProgram, SceneSpec, TrainingProgram
from coda_msgs.srv import DiagnoseEpisodes

BACKENDS: tuple[str, ...] = (*BACKEND_CHOICES, "vlm")
"""Backends the node serves: those of ``episode_input`` and the vision-language critic."""
VLM_DECODINGS: tuple[str, ...] = ("free", "constrained")
"""Values of ``vlm_decoding``: ``coda_critic.vlm.DECODINGS`` (not imported here, it loads torch)."""
PARAMETERS: dict[str, tuple[Any, str]] = {
    "backend": (
        "auto",
        "default backend: grounded | learned | auto (grounded with privileged state, else learned) | vlm",
    ),
    "learned_model": ("", "learned critic folder saved by `coda critic train` (empty: newest under learned_root, "
                          "else the embedded critic)"),
    "learned_root": ("runs/critic", "folder of saved learned critic versions"),
    "vlm_model": ("", "local LLaVA-style checkpoint folder of backend vlm (empty: vlm requests are refused)"),
    "vlm_decoding": ("constrained", "vlm answers: free (greedy text) | constrained (the model fills a JSON skeleton)"),
    "vlm_max_new_tokens": (256, "vlm, free decoding: most tokens of one answer"),
    "vlm_explanation_tokens": (48, "vlm, constrained decoding: most tokens of the explanation (>= 4)"),
    "text_cache": ("", "instruction-embedding cache file (.npz) loaded at start and saved after new strings"),
    "torch_threads": (1, "torch threads of the learned and vlm critics"),
    "generation_budget": (ROUND_BUDGET, "scenes per generation program"),
    "round": (0, "round of the diagnosed episodes: the training program's; the generation program is for the next"),
    "exploration_share": (CODA_PLANNER["exploration_share"],
                          "fraction of the generation budget kept for exploration, in [0, 1]"),
    "replay_share": (CODA_PLANNER["replay_share"], "fraction of the generation budget replaying fixed conditions, "
                                                   "in [0, 1]"),
    "scene_replay_share": (CODA_PLANNER["scene_replay_share"],
                           "fraction of the generation budget replaying failed scenes of earlier diagnoses, in [0, 1]"),
    "edit_replays": (False, "scene replays ask for the edits that answer the scene's latest diagnosed failure, "
                            "applied by the loop (else the scene is replayed exactly)"),
    "sft_epochs": (1, "behaviour-cloning epochs written into training programs"),
    "rl_env_steps": (0, "PPO environment steps written into training programs"),
    "program_batch": (8, "diagnoses from episode_results collected before programs are planned"),
    "publish_programs": (True, "plan and publish programs after each diagnose_episodes call"),
    "max_scenes": (5000, "scenes from scene_specs kept (newest first); read at start-up"),
}
HISTORY = 5000
"""Earlier diagnoses kept, with their round, for the condition and scene replay of generation programs."""


def parameter_problems(values: Mapping[str, Any]) -> list[str]:
    """List what is wrong with a full set of parameter values (empty when they are usable)."""
    problems = []
    if values["backend"] not in BACKENDS:
        problems.append(f"backend={values['backend']!r} must be one of {', '.join(BACKENDS)}")
    if values["vlm_decoding"] not in VLM_DECODINGS:
        problems.append(f"vlm_decoding={values['vlm_decoding']!r} must be one of {', '.join(VLM_DECODINGS)}")
    for name, low in (
        ("generation_budget", 1),
        ("round", 0),
        ("sft_epochs", 0),
        ("rl_env_steps", 0),
        ("program_batch", 1),
        ("max_scenes", 1),
        ("torch_threads", 1),
        ("vlm_max_new_tokens", 1),
        ("vlm_explanation_tokens", 4),
    ):
        if values[name] < low:
            problems.append(f"{name}={values[name]} must be >= {low}")
    try:
        generation_config(values)
    except ValueError as exc:
        problems.append(str(exc))
    return problems


def generation_config(values: Mapping[str, Any]) -> GenerationConfig:
    """Return the planner settings of a set of parameter values (a ValueError names shares that do not fit)."""
    return GenerationConfig(exploration_share=values["exploration_share"], replay_share=values["replay_share"],
                            scene_replay_share=values["scene_replay_share"], edit_replays=bool(values["edit_replays"]))


class LearnedFallback:
    """The node's learned critic as the VLM critic's fallback: loaded only when an answer stays invalid."""

    name = "learned"

    def __init__(self, node: CriticNode) -> None:
        """Use ``node.learned_critic()`` (the learned_model / learned_root parameters at the time)."""
        self.node = node

    def diagnose(self, episodes: Sequence[RecordedEpisode]) -> list[Diagnosis]:
        """Diagnose with the learned critic; LearnedModelError saying why the VLM needed it when there is none."""
        try:
            critic = self.node.learned_critic()
        except LearnedModelError as exc:
            raise LearnedModelError(
                f"backend vlm: {len(episodes)} episode(s) got no valid answer from the model, and its fallback, "
                f"the learned critic, is unavailable: {exc}"
            ) from exc
        return critic.diagnose(episodes)


def latched(depth: int) -> QoSProfile:
    """Reliable, transient-local QoS: late subscribers get the last ``depth`` messages."""
    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


class CriticNode(Node):
    """Serves DiagnoseEpisodes, diagnoses EpisodeResults from a topic, publishes diagnoses and programs."""

    def __init__(self) -> None:
        """Declare and check parameters; create the critic, the service, topics and publishers."""
        super().__init__("critic")
        self.add_on_set_parameters_callback(self.check_parameters)
        for name, (default, text) in PARAMETERS.items():
            self.declare_parameter(name, default, ParameterDescriptor(description=text))
        self.scenes = SceneBook(int(self.param("max_scenes")))
        self.grounded = GroundedCritic()
        self._learned: Any = None
        self._learned_folder: Path | None = None
        self._embedder: Any = None
        self._vlm_model: Any = None
        self._vlm_folder: Path | None = None
        self._vlm: Any = None
        self.history: deque[tuple[int, Diagnosis]] = deque(maxlen=HISTORY)
        self.pending: list[Diagnosis] = []

        self.diagnosis_pub = self.create_publisher(DiagnosisMsg, "diagnoses", latched(100))
        self.generation_pub = self.create_publisher(GenerationProgram, "generation_programs", latched(10))
        self.training_pub = self.create_publisher(TrainingProgram, "training_programs", latched(10))
        self.potential_pub = self.create_publisher(PotentialProgram, "potential_programs", latched(20))
        self.create_subscription(SceneSpec, "scene_specs", self.on_scene_spec, latched(100))
        self.create_subscription(
            EpisodeResult,
            "episode_results",
            self.on_episode_result,
            QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE),
        )
        self.service = self.create_service(DiagnoseEpisodes, "diagnose_episodes", self.on_diagnose)
        self.get_logger().info(
            f"critic ready (backend {self.param('backend')}): service diagnose_episodes, "
            "topics episode_results + scene_specs in"
        )

    # ---------------------------------------------------------------- parameters
    def param(self, name: str) -> Any:
        """Return the current value of a parameter."""
        return self.get_parameter(name).value

    def check_parameters(self, params: Sequence[Parameter]) -> SetParametersResult:
        """Accept a change only when the whole parameter set stays usable."""
        values = {name: default for name, (default, _) in PARAMETERS.items()}
        values.update({name: self.param(name) for name in PARAMETERS if self.has_parameter(name)})
        values.update({p.name: p.value for p in params})
        problems = parameter_problems(values)
        return SetParametersResult(successful=not problems, reason="; ".join(problems))

    # ---------------------------------------------------------------- inputs
    def on_scene_spec(self, msg: SceneSpec) -> None:
        """Keep a scene episodes may refer to; log specs that do not parse."""
        try:
            self.scenes.add(msg_to_dict(msg))
        except CriticInputError as exc:
            self.get_logger().error(f"scene_specs: {exc}")

    def read_episodes(self, msgs: Sequence[EpisodeResult]) -> list[RecordedEpisode]:
        """Decode keyframes and convert the messages; CriticInputError names the episode and the problem."""
        check_batch_size(len(msgs))
        results = []
        for i, msg in enumerate(msgs):
            frames = []
            for k, image in enumerate(msg.keyframes):
                try:
                    frames.append(msg_to_image(image))
                except ImageError as exc:
                    raise CriticInputError(f"episode {i} ({msg.episode_id!r}): keyframe {k}: {exc}") from exc
            images, msg.keyframes = msg.keyframes, []  # the images are decoded; skip them in the dict
            data = msg_to_dict(msg)
            msg.keyframes = images
            data["keyframes"] = frames
            results.append(data)
        return episodes_from_results(results, self.scenes)

    # ---------------------------------------------------------------- critics
    def learned_critic(self) -> Any:
        """Return the learned critic of ``learned_model`` (else the newest under ``learned_root``, else embedded)."""
        folder = resolve_learned_model(self.param("learned_model"), self.param("learned_root"), EMBEDDED_MODEL)
        folder = folder.resolve()
        if self._learned is None or folder != self._learned_folder:
            import torch

            from coda_critic.learned import load_critic
            from coda_engine.text_embedding import TextEmbedder

            torch.set_num_threads(int(self.param("torch_threads")))
            if self._embedder is None:
                cache = str(self.param("text_cache"))
                self._embedder = TextEmbedder(cache_file=Path(cache) if cache else None)
            self._learned = load_critic(folder, self._embedder)
            self._learned_folder = folder
            self.get_logger().info(f"learned critic {self._learned.version} loaded from {folder}")
        return self._learned

    def vlm_critic(self) -> Any:
        """Return the VLM critic of ``vlm_model`` and the ``vlm_*`` parameters; the checkpoint is loaded once.

        ValueError naming the parameter when ``vlm_model`` is empty or its checkpoint cannot be loaded.
        """
        path = str(self.param("vlm_model"))
        if not path:
            raise ValueError(
                "backend vlm is not available: the vlm_model parameter is empty (set it to a local "
                "LLaVA-style checkpoint folder)"
            )
        from coda_critic.vlm import VlmConfig, VlmCritic, load_vlm

        folder = Path(path).resolve()
        config = VlmConfig(
            model_path=str(folder),
            decoding=str(self.param("vlm_decoding")),
            max_new_tokens=int(self.param("vlm_max_new_tokens")),
            explanation_tokens=int(self.param("vlm_explanation_tokens")),
            threads=int(self.param("torch_threads")),
        )
        if self._vlm_model is None or folder != self._vlm_folder:
            try:
                model = load_vlm(config)
            except Exception as exc:  # any loading failure is the checkpoint's: answer it, keep serving
                raise ValueError(f"vlm_model {path!r} could not be loaded: {type(exc).__name__}: {exc}") from exc
            self._vlm_model, self._vlm_folder, self._vlm = model, folder, None
            self.get_logger().info(f"vlm critic {model.version} loaded from {folder}")
        if self._vlm is None or self._vlm.config != config:
            self._vlm = VlmCritic(config, fallback=LearnedFallback(self), vlm=self._vlm_model)
        return self._vlm

    def diagnose(self, episodes: Sequence[RecordedEpisode], backend: str) -> list[Diagnosis]:
        """Diagnose with ``backend`` (``auto`` chooses per episode); CriticInputError on bad input."""
        if backend not in BACKENDS:
            raise CriticInputError(f"backend {backend!r} is not served here; choose one of {', '.join(BACKENDS)}")
        critics: dict[str, Any] = {"grounded": self.grounded}
        if backend == "vlm":
            backends = [backend] * len(episodes)
            try:
                check_episodes(episodes, need_keyframes=True)
            except CriticInputError as exc:
                raise CriticInputError(f"{exc} [backend vlm]") from exc
            critics["vlm"] = self.vlm_critic()
        else:
            backends = choose_backends(episodes, backend)
            check_for_backends(episodes, backends)
            if "learned" in backends:
                critics["learned"] = self.learned_critic()
        known = len(self._embedder) if self._embedder is not None else 0
        diagnoses = diagnose_with(episodes, backends, critics)
        if self._embedder is not None and self._embedder.cache_file is not None and len(self._embedder) > known:
            self._embedder.save()
        if backend == "vlm" and (fallbacks := sum(d.critic_backend != "vlm" for d in diagnoses)):
            self.get_logger().warning(
                f"vlm: {fallbacks} of {len(diagnoses)} episodes got no valid answer and went to the learned critic"
            )
        return diagnoses

    # ---------------------------------------------------------------- service and topic
    def on_diagnose(
        self, request: DiagnoseEpisodes.Request, response: DiagnoseEpisodes.Response
    ) -> DiagnoseEpisodes.Response:
        """Diagnose a batch; answer an error naming the problem when the request is invalid."""
        try:
            for k, spec in enumerate(request.scenes):  # the caller's scenes, besides those seen on scene_specs
                try:
                    self.scenes.add(msg_to_dict(spec))
                except CriticInputError as exc:
                    raise CriticInputError(f"scenes[{k}] ({spec.scene_id!r}): {exc}") from exc
            episodes = self.read_episodes(request.episodes)
            diagnoses = self.diagnose(episodes, request.backend or self.param("backend"))
        except (CriticInputError, ImageError, ValueError) as exc:
            response.success, response.error = False, str(exc)
            self.get_logger().warning(f"diagnose_episodes rejected: {response.error}")
            return response
        except Exception as exc:  # keep serving; the traceback goes to the log
            response.success, response.error = False, f"internal error: {type(exc).__name__}: {exc}"
            self.get_logger().error(f"diagnose_episodes failed: {traceback.format_exc()}")
            return response
        response.success = True
        response.diagnoses = [self.publish_diagnosis(d) for d in diagnoses]
        if self.param("publish_programs"):
            self.publish_programs(diagnoses)
        return response

    def on_episode_result(self, msg: EpisodeResult) -> None:
        """Diagnose one episode from the topic; log and drop it when it is invalid."""
        try:
            if any(msg.episode_id in d.episode_ids for d in self.pending):
                raise CriticInputError(f"episode {msg.episode_id!r} was already diagnosed in this program batch")
            (diagnosis,) = self.diagnose(self.read_episodes([msg]), self.param("backend"))
        except (CriticInputError, ImageError, ValueError) as exc:
            self.get_logger().error(f"episode_results: dropped {msg.episode_id!r}: {exc}")
            return
        except Exception:  # keep running; the traceback goes to the log
            self.get_logger().error(f"episode_results: {msg.episode_id!r} failed: {traceback.format_exc()}")
            return
        self.publish_diagnosis(diagnosis)
        self.pending.append(diagnosis)
        if len(self.pending) >= self.param("program_batch"):
            batch, self.pending = self.pending, []
            self.publish_programs(batch)

    # ---------------------------------------------------------------- outputs
    def stamped(self, msg_type: type, data: Mapping[str, Any]) -> Any:
        """Build a message from a domain dict and stamp its header now."""
        msg = dict_to_msg(msg_type, data)
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg

    def publish_diagnosis(self, diagnosis: Diagnosis) -> DiagnosisMsg:
        """Publish one diagnosis; return the message."""
        msg = self.stamped(DiagnosisMsg, diagnosis.to_dict())
        self.diagnosis_pub.publish(msg)
        return msg

    def publish_programs(self, diagnoses: Sequence[Diagnosis]) -> None:
        """Plan the generation and training programs of a batch of diagnoses and publish them."""
        try:
            round_index = self.param("round")
            config = generation_config({name: self.param(name) for name in PARAMETERS})
            played = [*self.history, *((round_index, d) for d in diagnoses)]
            planned = plan_programs(diagnoses, round_index, self.param("generation_budget"), config,
                                    history=[d for _, d in self.history], replay=replay_candidates(played),
                                    sft_epochs=self.param("sft_epochs"), rl_env_steps=self.param("rl_env_steps"))
        except ValueError as exc:
            self.get_logger().error(f"programs not planned for {len(diagnoses)} diagnoses: {exc}")
            return
        generation, training = planned.generation, planned.training
        self.history.extend((round_index, d) for d in diagnoses)
        for reject in training.rejects:
            self.get_logger().warning(
                f"Text2potential rejected diagnosis {reject.diagnosis_id} "
                f"(line {reject.line}, column {reject.column}): {reject.message}"
            )
        training_msg = self.stamped(TrainingProgram, training.to_dict())
        for potential in training_msg.potentials:
            potential.header.stamp = training_msg.header.stamp
            self.potential_pub.publish(potential)
        self.training_pub.publish(training_msg)
        self.generation_pub.publish(self.stamped(GenerationProgram, generation.to_dict()))
        self.get_logger().info(
            f"round {self.param('round')} programs from {len(diagnoses)} diagnoses: "
            f"{generation.program_id} ({generation.budget} scenes), {training.program_id} "
            f"({len(training.potentials)} potentials)"
        )


def main(args: list[str] | None = None) -> None:
    """Run the node until shutdown."""
    run_node(CriticNode, args)


if __name__ == "__main__":
    main()
