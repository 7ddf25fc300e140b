# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The optional model-backed Text2potential translator: a local causal LM writes the program text.

:class:`ModelTranslator` prompts a causal language model (a local checkpoint folder in
:class:`ModelTranslatorConfig`; ``local_files_only``, nothing is downloaded) with a short description
of the potential language, the observation names, the family's stage library (its default program,
as the example to rewrite) and the diagnosis text, and reads the program it writes
(:func:`extract_program`). That text goes through the same compile gate as the grammar translator
(:func:`coda_critic.text2potential.compile_checked`, translator ``model``). A program that does not
compile becomes a :class:`~coda_critic.text2potential.Reject` with the compiler's line, column and
message, kept in :attr:`ModelTranslator.rejects`, and the diagnosis is translated by the grammar
translator instead (its program records the model's reject in ``parsed["model_reject"]``).
Success diagnoses keep the family's default program, as with the grammar translator, without
asking the model. Pure module: no rclpy; transformers is imported when the checkpoint is loaded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coda_critic.diagnosis import Diagnosis
from coda_critic.text2potential import (
    Layout,
    ProgramSpec,
    Reject,
    Text2Potential,
    Text2PotentialConfig,
    compile_checked,
)
from coda_engine.sim.families import get_family
from coda_engine.sim.layout import LAYOUT

LANGUAGE_NOTE = """\
A program is a list of stages. Each stage is written as
stage NAME:
  progress = EXPRESSION
  done     = PREDICATE
progress is a number in [0, 1] that grows as the stage gets closer to done; done says when the stage is complete.
Expressions use numbers, observation names, + - * /, comparisons < <= > >= == !=, and, or, not, the fields .x .y .z
of vectors, and the functions dist(a, b), dist_xy(a, b), norm(v), abs(x), exp(x), min(...), max(...), clip(x, lo, hi).
"""
"""The language as the prompt describes it (the grammar is in ``coda_core/potential.hpp``)."""
STOP_MARKERS = ("```", "Diagnosis:", "Program:", "Observation names:")
"""A line starting with one of these ends the program text."""


@dataclass(frozen=True)
class ModelTranslatorConfig:
    """Where the language model is and how it is asked."""

    model_path: str = ""
    """Folder of a local causal LM checkpoint: ``config.json``, weights, tokenizer files (required)."""
    max_new_tokens: int = 320
    """Token budget of the program text."""
    dtype: str = "float32"
    """Torch dtype the weights are loaded in (``float32``, ``bfloat16``, ``float16``)."""
    threads: int = 0
    """Torch intra-op threads while generating (restored after); 0 leaves torch's setting."""
    grammar: Text2PotentialConfig = field(default_factory=Text2PotentialConfig)
    """Settings of the grammar translator used on rejects (its ``gamma`` is also the model programs')."""

    def __post_init__(self) -> None:
        """Check ranges; the error names the field."""
        if self.max_new_tokens < 1:
            raise ValueError(f"ModelTranslatorConfig.max_new_tokens={self.max_new_tokens} must be >= 1")
        if self.threads < 0:
            raise ValueError(f"ModelTranslatorConfig.threads={self.threads} must be >= 0")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"ModelTranslatorConfig.dtype={self.dtype!r} is not one of float32, bfloat16, float16")


def observation_names(layout: Layout) -> str:
    """Name the layout entries for the prompt, the object slots folded (``obj0..obj6 _pos _rgb ...``)."""
    slots = sorted({int(m.group(1)) for k in layout if (m := re.match(r"obj(\d+)_", k))})
    fields = sorted({k.split("_", 1)[1] for k in layout if re.match(r"obj\d+_", k)})
    named = [k for k in layout if not re.match(r"obj\d+_", k)]
    if slots:
        named.append(f"obj{slots[0]}..obj{slots[-1]} with {', '.join('_' + f for f in fields)}")
    return ", ".join(named)


def build_program_prompt(diagnosis: Diagnosis, layout: Layout) -> str:
    """Write the prompt for one diagnosis: language, names, the family's stage library, the diagnosis."""
    return (f"Write a staged potential program for the {diagnosis.family} task that fixes the failure below.\n"
            f"{LANGUAGE_NOTE}Observation names: {observation_names(layout)}.\n"
            f"The {diagnosis.family} stage library (the default program):\n{get_family(diagnosis.family).program}\n"
            f"Diagnosis: {diagnosis.text}\n"
            "Rewrite the stage that failed (split it, add a stage before it, or guard its progress).\n"
            "Program:\n")


def extract_program(text: str) -> str:
    """Return the program part of a model's answer.

    From the first line that starts with ``stage`` up to a line starting with one of ``STOP_MARKERS``
    (code fences are skipped). Without a ``stage`` line the stripped answer is returned as it is, so the
    compiler names what is wrong with it.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("stage")), None)
    if start is None:
        return text.strip() + "\n" if text.strip() else ""
    kept = []
    for line in lines[start:]:
        if line.lstrip().startswith(STOP_MARKERS):
            break
        kept.append(line.rstrip())
    return "\n".join(kept).strip() + "\n"


@dataclass
class CausalLm:
    """A loaded causal language model and its tokenizer."""

    model: Any
    """``AutoModelForCausalLM`` (eval mode)."""
    tokenizer: Any
    """Its tokenizer."""
    path: str
    """Folder it was loaded from."""

    @torch.no_grad()
    def complete(self, prompt: str, max_new_tokens: int, threads: int = 0) -> str:
        """Greedy continuation of ``prompt`` (special tokens dropped); ``threads`` > 0 sets torch's for the call."""
        encoded = self.tokenizer(prompt, return_tensors="pt")
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        before = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            out = self.model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
        finally:
            torch.set_num_threads(before)
        return self.tokenizer.decode(out[0, encoded["input_ids"].shape[1]:], skip_special_tokens=True)


def load_causal_lm(config: ModelTranslatorConfig) -> CausalLm:
    """Load ``config.model_path`` offline; ValueError naming the problem."""
    folder = Path(config.model_path)
    if not config.model_path or not (folder / "config.json").is_file():
        raise ValueError(f"ModelTranslatorConfig.model_path={config.model_path!r} is not a checkpoint folder "
                         "(no config.json)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, use_safetensors=True,
                                                     dtype=getattr(torch, config.dtype))  # never a pickled .bin
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"cannot load a causal language model from {folder}: {error}") from error
    return CausalLm(model=model.eval(), tokenizer=tokenizer, path=str(folder))


class ModelTranslator:
    """Text2potential by a local language model, through the compile gate, the grammar translator on rejects."""

    translator = "model"

    def __init__(self, config: ModelTranslatorConfig, lm: CausalLm | None = None,
                 fallback: Text2Potential | None = None) -> None:
        """Load the model (unless ``lm`` is given); the grammar translator is built from ``config.grammar``."""
        self.config = config
        self.lm = lm if lm is not None else load_causal_lm(config)
        self.fallback = fallback if fallback is not None else Text2Potential(config.grammar)
        self.rejects: list[Reject] = []
        """Every model program that did not compile, over the translator's lifetime."""
        self.outputs: list[str] = []
        """The model's raw answers, in order."""
        self.counts = {"asked": 0, "compiled": 0}
        """Model programs asked for and compiled."""

    def translate(self, diagnosis: Diagnosis, layout: Layout | None = None) -> ProgramSpec | Reject:
        """Program for one diagnosis (the model's when it compiles, else the grammar's); rejects are recorded."""
        result, _ = self.translate_recorded(diagnosis, layout)
        return result

    def translate_recorded(self, diagnosis: Diagnosis, layout: Layout | None = None
                           ) -> tuple[ProgramSpec | Reject, list[Reject]]:
        """Return the result and the model rejects of this diagnosis (also added to :attr:`rejects`)."""
        lay = layout or LAYOUT
        if not diagnosis.is_failure:
            return self.fallback.translate(diagnosis, lay), []
        output = self.lm.complete(build_program_prompt(diagnosis, lay), self.config.max_new_tokens, self.config.threads)
        self.outputs.append(output)
        self.counts["asked"] += 1
        result = compile_checked(extract_program(output), diagnosis.family, lay, diagnosis_id=diagnosis.diagnosis_id,
                                 translator=self.translator, gamma=self.config.grammar.gamma)
        if isinstance(result, ProgramSpec):
            self.counts["compiled"] += 1
            result.parsed = {"by": "model"}
            return result, []
        self.rejects.append(result)
        backup = self.fallback.translate(diagnosis, lay)
        if isinstance(backup, ProgramSpec):
            backup.parsed["model_reject"] = f"line {result.line}, column {result.column}: {result.message}"
        return backup, [result]

    def translate_all(self, diagnoses: Sequence[Diagnosis], layout: Layout | None = None
                      ) -> tuple[list[ProgramSpec], list[Reject]]:
        """Translate every diagnosis; return the programs and every reject (the model's and the grammar's)."""
        programs: list[ProgramSpec] = []
        rejects: list[Reject] = []
        for d in diagnoses:
            result, model_rejects = self.translate_recorded(d, layout)
            rejects += model_rejects
            if isinstance(result, ProgramSpec):
                programs.append(result)
            else:
                rejects.append(result)
        return programs, rejects

    @property
    def compile_rate(self) -> float:
        """Share of model programs that compiled."""
        return self.counts["compiled"] / max(self.counts["asked"], 1)
