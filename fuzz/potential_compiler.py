# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Coverage-guided fuzzing of the staged-potential compiler (Text2potential's compile gate) with atheris.

Run it with ``scripts/fuzz.sh potential SECONDS`` (installs the pinned atheris first), or by hand::

    python fuzz/potential_compiler.py -max_total_time=600 fuzz/work/potential fuzz/corpus/potential

What one input is: the bytes of a program in the potential language, decoded as UTF-8 with invalid bytes kept as
lone surrogates (``surrogateescape``), compiled against the engine's observation layout. Two optional header lines
change what is under test (both are comments in the language, so a seed file stays a valid program):

* ``# layout: NAME=OFFSET:LENGTH ...`` replaces the layout (any name, any integers, also huge or negative ones);
* ``# text: FAMILY`` sends the rest of the input to the grammar translator instead
  (``Text2Potential.translate`` of a diagnosis whose text it is).

The contract checked on every input (anything else, a crash, a hang or a timeout, is a finding):

1. ``coda_core_cpp.PotentialProgram.compile`` (C++) returns a program or raises ``PotentialError`` naming line,
   column and problem; a bad layout raises ``ValueError`` whose message starts with ``layout``.
2. The pure-Python reference (``coda_core_cpp.reference``) decides alike: both accept, or both reject with the
   same error type, message, line and column.
3. An accepted program evaluates identically in both, bit for bit, on boundary states (zeros, ones, NaN, +-inf,
   huge) and seeded random ones from every start stage, with phi in [0, 1] and the stage in [0, K].
4. The stages it reports can be written back out (``StageSpec.source``, what the translator does) and compile
   to the same stages; ``coda_critic.text2potential.compile_checked`` gives a ``ProgramSpec`` exactly when the
   compiler accepts, otherwise a ``Reject`` with the compiler's line, column and message.
5. The translator returns a ``ProgramSpec`` or a ``Reject``; it never raises.

Coverage: atheris instruments the Python code of ``coda_core_cpp`` (the reference compiler, a line-by-line mirror
of the C++ one) and ``coda_critic.text2potential``; the C++ extension runs uninstrumented (it is built without
``-fsanitize=fuzzer``), checked by the differential contract above.
"""

from __future__ import annotations

import math
import sys
import zlib
from typing import Any

import numpy as np

LAYOUT_HEADER = "# layout:"
TEXT_HEADER = "# text:"
MAX_EVAL_DIM = 4096
"""Programs whose layout needs longer states are compiled but not evaluated."""


def decode(data: bytes) -> tuple[str, str, dict[str, tuple[int, int]] | None, str]:
    """Split one input into (kind, source, layout or None for the engine's, family); kind is ``program`` or ``text``."""
    text = data.decode("utf-8", "surrogateescape")
    layout: dict[str, tuple[int, int]] | None = None
    first, _, rest = text.partition("\n")
    if first.startswith(TEXT_HEADER):
        return "text", rest, None, first[len(TEXT_HEADER):].strip()
    if first.startswith(LAYOUT_HEADER):
        layout = {}
        for token in first[len(LAYOUT_HEADER):].split():
            name, _, span = token.partition("=")
            offset, _, length = span.partition(":")
            try:
                layout[name] = (int(offset), int(length))
            except ValueError:
                continue  # the harness's own reading; not under test
    return "program", text, layout, ""


def _outcome(compile_fn: Any, source: str, layout: Any) -> tuple[str, Any]:
    """Compile; return ("ok", program) or ("error", (type name, message, line, column)); other exceptions escape."""
    from coda_core_cpp.errors import PotentialError

    try:
        return "ok", compile_fn(source, layout)
    except PotentialError as error:
        return "error", ("PotentialError", error.message, error.line, error.column)
    except ValueError as error:
        if type(error) is not ValueError or not str(error).startswith("layout"):
            raise AssertionError(f"{compile_fn.__qualname__} raised {type(error).__name__}: {error} "
                                 "(expected PotentialError, or ValueError naming the layout)") from error
        return "error", ("ValueError", str(error), 0, 0)


def _states(dim: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    fixed = [0.0, 1.0, -1.0, math.nan, math.inf, -math.inf, 3.0e38, 1.0e-45]
    states = [np.full(dim, v, dtype=np.float32) for v in fixed]
    states.append(rng.normal(0.0, 1.0, dim).astype(np.float32))
    mixed = rng.choice(np.array([*fixed, 0.5, 0.02], dtype=np.float32), size=dim)
    states.append(mixed.astype(np.float32))
    return states


def check_program(source: str, layout: dict[str, tuple[int, int]] | None, seed: int) -> None:
    """Assert the compiler's contract (points 1-4 of the module docstring) on one source."""
    import coda_core_cpp as core
    from coda_core_cpp import reference
    from coda_critic.text2potential import ProgramSpec, Reject, StageSpec, compile_checked
    from coda_engine.sim.layout import LAYOUT

    lay: dict[str, tuple[int, int]] = dict(LAYOUT) if layout is None else layout
    cpp_kind, cpp = _outcome(core.PotentialProgram.compile, source, lay)
    ref_kind, ref = _outcome(reference.PotentialProgram.compile, source, lay)
    assert cpp_kind == ref_kind, f"C++ {cpp_kind} ({cpp if cpp_kind == 'error' else ''}) vs reference {ref_kind} " \
                                 f"({ref if ref_kind == 'error' else ''})"
    if cpp_kind == "error":
        assert cpp == ref, f"C++ rejects with {cpp}, the reference with {ref}"
        name, message, line, column = cpp
        assert message, "an error without a message"
        if name == "PotentialError":
            assert line >= 1 and column >= 1, f"error position ({line}, {column}) must be 1-based"
    else:
        assert cpp.stages == ref.stages, f"stages differ: {cpp.stages} vs {ref.stages}"
        k = cpp.num_stages
        assert k >= 1, "a program without stages was accepted"
        assert cpp.required_dim == ref.required_dim
        if cpp.required_dim <= MAX_EVAL_DIM:
            for state in _states(max(cpp.required_dim, 1), seed):
                for stage in range(k + 1):
                    got = cpp.evaluate(state, stage)
                    want = ref.evaluate(state, stage)
                    assert 0 <= got[1] <= k, f"stage {got[1]} outside [0, {k}]"
                    assert 0.0 <= got[0] <= 1.0, f"phi={got[0]} outside [0, 1]"
                    assert (np.float32(got[0]).tobytes(), got[1]) == (np.float32(want[0]).tobytes(), want[1]), \
                        f"evaluate({state[:4]}..., {stage}): C++ {got} vs reference {want}"
        rebuilt = "".join(StageSpec(n, p, d).source() for n, p, d in cpp.stages)
        again = core.PotentialProgram.compile(rebuilt, lay)
        assert again.stages == cpp.stages, f"the stages written back compile to {again.stages}, not {cpp.stages}"
    if layout is None:
        spec = compile_checked(source, "reach")
        if cpp_kind == "ok":
            assert isinstance(spec, ProgramSpec), spec
            assert ProgramSpec.from_dict(spec.to_dict()).compile().stages == cpp.stages
        else:
            assert isinstance(spec, Reject), spec
            assert (spec.message, spec.line, spec.column) == cpp[1:], spec


def check_text(text: str, family_hint: str) -> None:
    """Assert point 5 of the module docstring: the translator returns a program or a Reject for any text."""
    from coda_critic.diagnosis import MODES, Diagnosis, stage_library
    from coda_critic.text2potential import ProgramSpec, Reject, Text2Potential
    from coda_engine.sim.families import FAMILIES

    families = sorted(FAMILIES)
    family = family_hint if family_hint in FAMILIES else families[zlib.crc32(family_hint.encode(
        "utf-8", "surrogateescape")) % len(families)]
    names = [n for n, _, _ in stage_library(family)]
    mode = sorted(m for m in MODES if m != "success")[len(text) % (len(MODES) - 1)]
    stage = len(text) % len(names)
    diagnosis = Diagnosis(diagnosis_id="d-fuzz", episode_ids=["e-fuzz"], scene_id="s-fuzz", family=family,
                          failure_mode=mode, failed_stage=stage, failed_stage_name=names[stage],
                          target_object="red_cube", text=text)
    result = Text2Potential().translate(diagnosis)
    assert isinstance(result, ProgramSpec | Reject), type(result)
    if isinstance(result, ProgramSpec):
        assert result.compile().num_stages == len(result.stages)


def test_one_input(data: bytes) -> None:
    """The fuzz target: one input through the contract."""
    kind, source, layout, family = decode(data)
    if kind == "text":
        check_text(source, family)
    else:
        check_program(source, layout, zlib.crc32(data))


def main(argv: list[str]) -> None:
    """Run libFuzzer over ``test_one_input`` with the instrumented compiler and translator."""
    import atheris

    with atheris.instrument_imports(include=["coda_core_cpp", "coda_critic"]):
        import coda_core_cpp.reference  # noqa: F401 - instrumented for coverage
        import coda_critic.text2potential  # noqa: F401 - instrumented for coverage
    import coda_engine.sim.layout  # noqa: F401 - imported before the first input

    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
