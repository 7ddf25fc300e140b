# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Stage tracking of a staged potential program: the one place the simulator touches the potential language.

:func:`compile_program` compiles with ``coda_core_cpp.PotentialProgram`` (the C++ implementation of the
language); the result has ``num_stages``, ``stage_names`` and ``evaluate(state, stage) -> (phi, new_stage)``
with ``Phi(s, k) = (k + progress_k(s)) / K``, advancing ``k`` while ``done_k(s)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coda_core_cpp import PotentialProgram

Layout = Mapping[str, tuple[int, int]]


def compile_program(source: str, layout: Layout) -> Any:
    """Compile ``source`` against ``layout`` ({name: (offset, length)}); raises on errors (unknown names etc.)."""
    return PotentialProgram.compile(source, {k: (int(o), int(n)) for k, (o, n) in layout.items()})


def backend() -> str:
    """Name of the potential-language implementation in use."""
    return f"{PotentialProgram.__module__}.{PotentialProgram.__name__}"
