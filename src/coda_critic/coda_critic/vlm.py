# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The transformers vision-language critic: a local VLM checkpoint asked for a JSON diagnosis.

:class:`VlmCritic` loads a checkpoint from the folder in :class:`VlmConfig` (``local_files_only``,
``HF_HUB_OFFLINE``: nothing is downloaded), shows it the episode's keyframes (first, stage
changes, last; at most ``max_images``) with the instruction, the scene's objects, the family's
stage library and a short trajectory summary, and asks for one JSON object:

    {"failure_mode": "<one of MODES>", "stage": "<a stage of the family, or none for success>",
     "target": "<one of the scene's objects>", "conditions": {"<CONDITION_KEYS key>": "<value>"},
     "explanation": "<one sentence>", "confidence": <number in [0, 1]>}

The answer goes through :mod:`coda_critic.vlm_answer` (the prompt and the schema, pure functions). An
invalid or partial answer is asked for once more, with the problem stated in the prompt; when
that answer is invalid too, the episode is diagnosed by the fallback critic (the learned critic,
:func:`coda_critic.learned.load_critic`) and the reason is appended to the diagnosis text
(``[VLM fallback: ...]``); :attr:`VlmCritic.attempts` keeps every raw answer and its problem.

Checkpoints: LLaVA-style image-text-to-text models (``AutoModelForImageTextToText`` whose
``get_image_features`` takes ``pixel_values`` of shape (N, 3, S, S) and whose prompt carries one
``image_token_id`` placeholder per image feature). Pixels are prepared here (resize to the vision
tower's ``image_size``, scale to [0, 1], normalise with ``image_mean``/``image_std`` of the
checkpoint's ``preprocessor_config.json`` or the config's), so neither Pillow nor torchvision is
needed. Another architecture is refused at load time with the reason.

Decoding (``VlmConfig.decoding``):

* ``free``: greedy generation of the whole answer; what the model writes is what is validated.
* ``constrained``: the JSON skeleton is written by the critic and the model fills the slots:
  each closed slot (mode, stage, target, condition key) is the option with the highest sequence
  log-likelihood under the model; the explanation is greedy over tokens that are safe inside a
  JSON string; the confidence is the model's probability of the chosen mode among all modes.
  The answer is then validated like a free one. Structurally valid output by construction, for
  small checkpoints that do not follow the JSON instruction.

The diagnosis text is written in the diagnosis vocabulary Text2potential reads (headline of the
mode, ``the NAME stage (stage i of K)``), followed by the model's own explanation. Pure module:
no rclpy; transformers is imported when a checkpoint is loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coda_critic.dataset import frame_indices
from coda_critic.diagnosis import (
    CONDITION_KEYS,
    MODE_SUCCESS,
    MODES,
    Critic,
    Diagnosis,
    EpisodeLike,
    check_episodes,
    diagnosis_id,
    scene_conditions,
    stage_names,
)
from coda_critic.grounded import Finding, describe
from coda_critic.learned import LEARNED_DETAIL, load_critic
from coda_critic.vlm_answer import (
    NO_STAGE,
    REASON_CHARS,
    SchemaError,
    VlmAnswer,
    VlmAttempt,
    build_prompt,
    fallback_note,
    parse_answer,
)

DECODINGS = ("free", "constrained")
"""Values of ``VlmConfig.decoding``."""
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
"""Pixel mean used when neither the config nor the checkpoint gives one (CLIP's)."""
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
"""Pixel standard deviation used when neither the config nor the checkpoint gives one (CLIP's)."""
LLAVA_TEMPLATE = "USER: {images}\n{prompt} ASSISTANT:"
"""LLaVA-1.5's conversation format."""




@dataclass(frozen=True)
class VlmConfig:
    """Where the checkpoint is and how it is asked."""

    model_path: str = ""
    """Folder of a local LLaVA-style checkpoint: ``config.json``, weights, tokenizer files (required)."""
    fallback_path: str = ""
    """Folder of a saved learned critic (``<root>/<version>``); used when no fallback critic is passed."""
    decoding: str = "free"
    """One of ``DECODINGS`` (module docstring)."""
    max_new_tokens: int = 256
    """Token budget of a free answer."""
    max_images: int = 4
    """Keyframes shown per episode (first, stage changes spread, last)."""
    explanation_tokens: int = 48
    """constrained: most tokens of the explanation."""
    min_explanation_tokens: int = 4
    """constrained: the explanation's closing quote is not allowed before this many tokens."""
    trajectory_points: int = 4
    """Tool positions listed in the trajectory summary."""
    prompt_template: str = LLAVA_TEMPLATE
    """Conversation format; ``{images}`` becomes one image placeholder per keyframe, ``{prompt}`` the question."""
    image_mean: tuple[float, float, float] | None = None
    """Per-channel pixel mean after scaling to [0, 1]; None: ``preprocessor_config.json``'s, else CLIP's."""
    image_std: tuple[float, float, float] | None = None
    """Per-channel pixel standard deviation; None as for ``image_mean``."""
    dtype: str = "float32"
    """Torch dtype the weights are loaded in (``float32``, ``bfloat16``, ``float16``)."""
    threads: int = 0
    """Torch intra-op threads while diagnosing (restored after); 0 leaves torch's setting. 1 is the fastest for
    small checkpoints on a busy CPU."""

    def __post_init__(self) -> None:
        """Check the choices and ranges; the error names the field."""
        problems = []
        if self.decoding not in DECODINGS:
            problems.append(f"decoding={self.decoding!r} is not one of {DECODINGS}")
        if self.threads < 0:
            problems.append(f"threads={self.threads} must be >= 0")
        for name in ("max_new_tokens", "max_images", "explanation_tokens", "trajectory_points"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} must be >= 1")
        if not 0 <= self.min_explanation_tokens <= self.explanation_tokens:
            problems.append(f"min_explanation_tokens={self.min_explanation_tokens} must be in [0, explanation_tokens]")
        if "{images}" not in self.prompt_template or "{prompt}" not in self.prompt_template:
            problems.append("prompt_template must contain {images} and {prompt}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            problems.append(f"dtype={self.dtype!r} is not one of float32, bfloat16, float16")
        for name in ("image_mean", "image_std"):
            value = getattr(self, name)
            if value is not None and (len(value) != 3 or (name == "image_std" and min(value) <= 0)):
                problems.append(f"{name}={value} must be three numbers (std > 0)")
        if problems:
            raise ValueError("VlmConfig: " + "; ".join(problems))


















# ---------------------------------------------------------------------------------------------- the checkpoint
@dataclass
class VlmModel:
    """A loaded checkpoint and what the critic needs to feed it."""

    model: Any
    """The ``AutoModelForImageTextToText`` model (eval mode)."""
    tokenizer: Any
    """Its tokenizer."""
    image_token: str
    """Placeholder string of one image feature."""
    tokens_per_image: int
    """Image features (placeholders) per keyframe."""
    image_size: int
    """Side of the vision tower's input, pixels."""
    mean: tuple[float, float, float]
    """Pixel normalisation mean."""
    std: tuple[float, float, float]
    """Pixel normalisation standard deviation."""
    version: str
    """``vlm-`` + hash of the checkpoint files (:func:`checkpoint_version`)."""
    path: str
    """Folder it was loaded from."""

    def pixels(self, frames: Sequence[np.ndarray]) -> torch.Tensor:
        """(N, 3, S, S) normalised pixel values of HxWx3 uint8 frames (bilinear resize)."""
        x = torch.from_numpy(np.stack([np.asarray(f) for f in frames])).permute(0, 3, 1, 2).float() / 255.0
        if x.shape[-2:] != (self.image_size, self.image_size):
            x = torch.nn.functional.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear",
                                                align_corners=False, antialias=True)
        mean = torch.tensor(self.mean).view(1, 3, 1, 1)
        std = torch.tensor(self.std).view(1, 3, 1, 1)
        return ((x - mean) / std).to(self.model.dtype)

    def vision_kwargs(self) -> dict[str, Any]:
        """Vision feature settings of the checkpoint's config."""
        cfg = self.model.config
        return {"vision_feature_layer": cfg.vision_feature_layer,
                "vision_feature_select_strategy": cfg.vision_feature_select_strategy}


def checkpoint_version(folder: Path) -> str:
    """Return ``vlm-`` + 10 hex digits of a sha256 over the checkpoint's files.

    Every file's name and size, the whole of files up to 2 MiB and the first and last MiB of larger
    ones (weights of many GB are not read whole).
    """
    digest = hashlib.sha256()
    chunk = 1 << 20
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.name}\n{size}\n".encode())
        with path.open("rb") as handle:
            digest.update(handle.read(chunk))
            if size > 2 * chunk:
                handle.seek(size - chunk)
                digest.update(handle.read(chunk))
            elif size > chunk:
                digest.update(handle.read())
    return "vlm-" + digest.hexdigest()[:10]


def load_vlm(config: VlmConfig) -> VlmModel:
    """Load the checkpoint of ``config.model_path`` offline; ValueError naming the problem when it cannot serve."""
    folder = Path(config.model_path)
    if not config.model_path or not (folder / "config.json").is_file():
        raise ValueError(f"VlmConfig.model_path={config.model_path!r} is not a checkpoint folder (no config.json)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    dtype = getattr(torch, config.dtype)
    try:
        model = AutoModelForImageTextToText.from_pretrained(str(folder), local_files_only=True, dtype=dtype,
                                                            use_safetensors=True)  # never a pickled .bin
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"cannot load a vision-language checkpoint from {folder}: {error}") from error
    model.eval()
    cfg = model.config
    kind = getattr(cfg, "model_type", "?")
    image_token_id = getattr(cfg, "image_token_id", None)
    if image_token_id is None:
        image_token_id = getattr(cfg, "image_token_index", None)
    vision = getattr(cfg, "vision_config", None)
    image_size = getattr(vision, "image_size", None)
    if image_token_id is None or not isinstance(image_size, int) or not hasattr(model, "get_image_features"):
        raise ValueError(f"checkpoint {folder} (model_type {kind}) is not LLaVA-style: it needs image_token_id, "
                         "vision_config.image_size and get_image_features")
    mean, std = _pixel_stats(folder, config)
    image_token = tokenizer.convert_ids_to_tokens(int(image_token_id))
    vmodel = VlmModel(model=model, tokenizer=tokenizer, image_token=image_token, tokens_per_image=0,
                      image_size=image_size, mean=mean, std=std,
                      version=checkpoint_version(folder), path=str(folder))
    blank = np.zeros((image_size, image_size, 3), np.uint8)
    try:  # one blank frame tells how many placeholders an image takes
        with torch.no_grad():
            probe = model.get_image_features(pixel_values=vmodel.pixels([blank]), **vmodel.vision_kwargs())
        features = probe.pooler_output if hasattr(probe, "pooler_output") else probe
        vmodel.tokens_per_image = int(features[0].shape[0])
    except (RuntimeError, TypeError, ValueError, AttributeError) as error:
        raise ValueError(f"checkpoint {folder} (model_type {kind}) does not take LLaVA-style pixel_values "
                         f"(N, 3, {image_size}, {image_size}): {error}") from error
    return vmodel


def _pixel_stats(folder: Path, config: VlmConfig) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    stored: dict[str, Any] = {}
    if (folder / "preprocessor_config.json").is_file():
        stored = json.loads((folder / "preprocessor_config.json").read_text())
    mean = config.image_mean or tuple(stored.get("image_mean", CLIP_MEAN))
    std = config.image_std or tuple(stored.get("image_std", CLIP_STD))
    return (float(mean[0]), float(mean[1]), float(mean[2])), (float(std[0]), float(std[1]), float(std[2]))


# ---------------------------------------------------------------------------------------------- decoding
class _SlotDecoder:
    """Incremental greedy decoding with a KV cache: feed forced text, score options, generate free text."""

    def __init__(self, vlm: VlmModel, inputs: Mapping[str, torch.Tensor]) -> None:
        self.vlm = vlm
        out = vlm.model(**inputs, use_cache=True)
        self.cache = _cache_of(out)
        self.logits = out.logits[0, -1].float()

    def ids(self, text: str) -> list[int]:
        """Return the token ids of ``text`` as a continuation of the answer.

        It is encoded after an anchor quote that is then dropped, so tokenizers that mark a word start
        (sentencepiece's prefix space) do not add one mid-answer.
        """
        tokenizer = self.vlm.tokenizer
        anchor = list(tokenizer('"', add_special_tokens=False)["input_ids"])
        full = list(tokenizer('"' + text, add_special_tokens=False)["input_ids"])
        if full[:len(anchor)] == anchor:
            return full[len(anchor):]
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def feed(self, ids: Sequence[int]) -> None:
        if ids:
            out = self.vlm.model(input_ids=torch.tensor([list(ids)]), cache=self.cache, use_cache=True)
            self.logits = out.logits[0, -1].float()

    def score(self, ids: Sequence[int]) -> float:
        """Log-likelihood of ``ids`` after the current position (the cache is left as it was)."""
        total = float(torch.log_softmax(self.logits, -1)[ids[0]])
        if len(ids) > 1:
            out = self.vlm.model(input_ids=torch.tensor([list(ids)]), cache=self.cache, use_cache=True)
            logp = torch.log_softmax(out.logits[0, :-1].float(), -1)
            total += float(logp[torch.arange(len(ids) - 1), torch.tensor(list(ids[1:]))].sum())
            self.cache.crop(-len(ids))
        return total

    def choose(self, options: Sequence[str], suffix: str) -> tuple[int, np.ndarray]:
        """Feed the most likely of ``options`` (each followed by ``suffix``); return its index and the softmax."""
        encoded = [self.ids(option + suffix) for option in options]
        scores = np.array([self.score(ids) for ids in encoded])
        best = int(np.argmax(scores))
        self.feed(encoded[best])
        probs = np.exp(scores - scores.max())
        return best, probs / probs.sum()

    def string(self, safe: torch.Tensor, quote: list[int], low: int, high: int) -> str:
        """Greedy text over ``safe`` tokens until a closing quote token (allowed after ``low`` tokens)."""
        tokens: list[int] = []
        for i in range(high):
            allowed = safe.clone()
            if i >= low:
                allowed[quote] = True
            token = int(torch.where(allowed, self.logits, float("-inf")).argmax())
            self.feed([token])
            if token in quote:
                return self.vlm.tokenizer.decode(tokens)
            tokens.append(token)
        self.feed(self.ids('"'))
        return self.vlm.tokenizer.decode(tokens)


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _string_tokens(tokenizer: Any) -> tuple[torch.Tensor, list[int]]:
    """(mask of tokens safe inside a JSON string, ids of tokens that are exactly a double quote)."""
    special = set(tokenizer.all_special_ids)
    safe = torch.zeros(len(tokenizer), dtype=torch.bool)
    quote = []
    for i in range(len(tokenizer)):
        if i in special:
            continue
        text = tokenizer.decode([i])
        if text == '"':
            quote.append(i)
        elif text and text.isprintable() and '"' not in text and "\\" not in text and "\ufffd" not in text:
            safe[i] = True
    if not quote:
        raise ValueError("the tokenizer has no token for a double quote; constrained decoding cannot close strings")
    return safe, quote


# ---------------------------------------------------------------------------------------------- the critic
class VlmCritic:
    """Diagnoses from a local vision-language checkpoint, validated, with the learned critic as fallback."""

    name = "vlm"

    def __init__(self, config: VlmConfig, fallback: Critic | None = None, vlm: VlmModel | None = None) -> None:
        """Load the checkpoint (unless ``vlm`` is given) and the fallback (``config.fallback_path`` unless given)."""
        if fallback is None and not config.fallback_path:
            raise ValueError("VlmCritic needs a fallback critic: pass one or set VlmConfig.fallback_path to a saved "
                             "learned critic")
        self.config = config
        self.vlm = vlm if vlm is not None else load_vlm(config)
        self.fallback: Critic = fallback if fallback is not None else load_critic(config.fallback_path)
        self.version = self.vlm.version
        self.attempts: list[VlmAttempt] = []
        """Every answer of the last :meth:`diagnose` call."""
        self.counts = {"episodes": 0, "fallbacks": 0, "answers": 0}
        """Totals over the critic's lifetime."""
        self._string_tokens: tuple[torch.Tensor, list[int]] | None = None

    @property
    def fallback_rate(self) -> float:
        """Share of diagnosed episodes that went to the fallback critic."""
        return self.counts["fallbacks"] / max(self.counts["episodes"], 1)

    def diagnose(self, episodes: Sequence[EpisodeLike]) -> list[Diagnosis]:
        """One diagnosis per episode; :class:`CriticInputError` for empty or malformed keyframes."""
        check_episodes(episodes, need_keyframes=True)
        self.attempts = []
        results: list[Diagnosis | None] = []
        failed: list[tuple[int, list[VlmAttempt]]] = []
        threads = torch.get_num_threads()
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        try:
            for index, ep in enumerate(episodes):
                answer, attempts = self.ask(ep)
                self.attempts += attempts
                results.append(self.compose(ep, answer) if answer is not None else None)
                if answer is None:
                    failed.append((index, attempts))
        finally:
            torch.set_num_threads(threads)
        if failed:
            backups = self.fallback.diagnose([episodes[i] for i, _ in failed])
            for (index, attempts), backup in zip(failed, backups, strict=True):
                note = fallback_note(self.version, attempts, backup.critic_backend)
                results[index] = dataclasses.replace(backup, text=backup.text + note)
        self.counts["episodes"] += len(episodes)
        self.counts["fallbacks"] += len(failed)
        self.counts["answers"] += len(self.attempts)
        return [d for d in results if d is not None]

    def ask(self, episode: EpisodeLike) -> tuple[VlmAnswer | None, list[VlmAttempt]]:
        """Ask about one episode, once more when the answer is invalid; (answer or None, the attempts)."""
        scene = episode.scene
        objects = [o.name for o in scene.objects]
        frames = [episode.keyframes[k] for k in sorted(set(frame_indices(len(episode.keyframes),
                                                                          max(self.config.max_images, 2))))]
        frames = frames[:self.config.max_images]
        attempts: list[VlmAttempt] = []
        feedback = ""
        for attempt in (1, 2):
            start = time.perf_counter()
            output = self.generate(episode, frames, feedback)
            seconds = time.perf_counter() - start
            try:
                answer = parse_answer(output, scene.family, objects)
            except SchemaError as error:
                attempts.append(VlmAttempt(episode.episode_id, attempt, output, str(error), seconds))
                feedback = str(error)[:REASON_CHARS]
                continue
            attempts.append(VlmAttempt(episode.episode_id, attempt, output, "", seconds))
            return answer, attempts
        return None, attempts

    def inputs(self, episode: EpisodeLike, frames: Sequence[np.ndarray], feedback: str = "") -> dict[str, torch.Tensor]:
        """Token ids, attention mask and pixel values of the question about ``episode``."""
        vlm = self.vlm
        images = "\n".join(vlm.image_token * vlm.tokens_per_image for _ in frames)
        prompt = build_prompt(episode, len(frames), self.config.trajectory_points, feedback)
        text = self.config.prompt_template.format(images=images, prompt=prompt)
        encoded = vlm.tokenizer(text, return_tensors="pt")
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"],
                "pixel_values": vlm.pixels(frames)}

    @torch.no_grad()
    def generate(self, episode: EpisodeLike, frames: Sequence[np.ndarray], feedback: str = "") -> str:
        """Return the model's answer text (``config.decoding``)."""
        inputs = self.inputs(episode, frames, feedback)
        if self.config.decoding == "constrained":
            return self._constrained(episode, inputs)
        tokenizer = self.vlm.tokenizer
        out = self.vlm.model.generate(**inputs, max_new_tokens=self.config.max_new_tokens, do_sample=False,
                                      pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        return tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)

    def _constrained(self, episode: EpisodeLike, inputs: Mapping[str, torch.Tensor]) -> str:
        """Fill the JSON skeleton slot by slot (module docstring)."""
        if self._string_tokens is None:
            self._string_tokens = _string_tokens(self.vlm.tokenizer)
        safe, quote = self._string_tokens
        scene = episode.scene
        names = stage_names(scene.family)
        facts = {c.key: c.value for c in scene_conditions(scene)}
        dec = _SlotDecoder(self.vlm, inputs)
        dec.feed(dec.ids('{"failure_mode": "'))
        mode_index, mode_probs = dec.choose(MODES, '"')
        mode = MODES[mode_index]
        dec.feed(dec.ids(', "stage": "'))
        stage = NO_STAGE if mode == MODE_SUCCESS else names[dec.choose(names, '"')[0]]
        if mode == MODE_SUCCESS:
            dec.feed(dec.ids(NO_STAGE + '"'))
        dec.feed(dec.ids(', "target": "'))
        objects = [o.name for o in scene.objects]
        target = objects[dec.choose(objects, '"')[0]]
        dec.feed(dec.ids(', "conditions": {"'))
        key = CONDITION_KEYS[dec.choose(CONDITION_KEYS, '": "')[0]]
        dec.feed(dec.ids(facts[key] + '"}, "explanation": "'))
        explanation = dec.string(safe, quote, self.config.min_explanation_tokens, self.config.explanation_tokens)
        answer = {"failure_mode": mode, "stage": stage, "target": target, "conditions": {key: facts[key]},
                  "explanation": explanation, "confidence": round(float(mode_probs[mode_index]), 4)}
        return json.dumps(answer)

    def compose(self, episode: EpisodeLike, answer: VlmAnswer) -> Diagnosis:
        """Build the diagnosis of a valid answer (text in the vocabulary Text2potential reads, then the model's)."""
        scene = episode.scene
        names = stage_names(scene.family)
        conditions = scene_conditions(scene)
        detail = LEARNED_DETAIL[answer.failure_mode].format(target=answer.target)
        text = describe(scene, Finding(answer.failure_mode, detail), answer.failed_stage, answer.stage_name,
                        len(names), episode.steps, conditions)
        cited = ", ".join(f"{k}={v}" for k, v in answer.conditions.items())
        text += f' The vlm critic says: "{answer.explanation}"' + (f" (conditions cited: {cited})." if cited else "")
        return Diagnosis(diagnosis_id=diagnosis_id(self.name, [episode.episode_id], self.version),
                         episode_ids=[episode.episode_id], scene_id=scene.scene_id, family=scene.family,
                         failure_mode=answer.failure_mode, failed_stage=answer.failed_stage,
                         failed_stage_name=answer.stage_name, target_object=answer.target, conditions=conditions,
                         text=text, confidence=answer.confidence, critic_backend=self.name,
                         critic_version=self.version)
