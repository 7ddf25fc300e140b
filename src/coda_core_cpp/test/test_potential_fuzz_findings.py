# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""What fuzzing the potential compiler found (``fuzz/potential_compiler.py``), replayed without the fuzzer.

Each input is the one the fuzzer wrote (also kept in ``fuzz/corpus/potential/finding-*.pot``), given to both
implementations; each must now be refused with a ValueError or PotentialError naming what was wrong, and the two
must agree on the message (and on line and column).
"""

from __future__ import annotations

from typing import Any

import pytest

import coda_core_cpp as core
from coda_core_cpp import reference
from coda_core_cpp.errors import PotentialError

IMPLS = [pytest.param(core, id="cpp"), pytest.param(reference, id="reference")]
PROGRAM = "stage s:\n  progress = clip(a * 2 - b, 0, 1)\n  done = a >= 1\n"


def _refusal(impl: Any, source: str, layout: dict[str, Any]) -> ValueError:
    with pytest.raises(ValueError) as info:
        impl.PotentialProgram.compile(source, layout)
    return info.value


@pytest.mark.parametrize("impl", IMPLS)
def test_a_layout_name_with_nul_bytes_is_named_whole(impl: Any) -> None:
    """Found: the C++ message stopped at the first NUL byte of the name (``layout: '``), naming nothing."""
    name = "\x00" * 4 + "b"
    error = _refusal(impl, PROGRAM, {"a": (0, 1), name: (1, 1)})
    assert type(error) is ValueError
    assert str(error) == "layout: '\\x00\\x00\\x00\\x00b' is not a valid name (letters, digits, '_'; not a keyword)"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("name", "shown"), [("st'a", "\"st'a\""), ("a\udc80", "'a\\udc80'"), ("é", "'é'")])
def test_names_that_cannot_be_printed_plainly_are_shown_as_python_would(impl: Any, name: str, shown: str) -> None:
    error = _refusal(impl, PROGRAM, {"a": (0, 1), name: (1, 1)})
    assert str(error) == f"layout: {shown} is not a valid name (letters, digits, '_'; not a keyword)"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("span", [(0, 2**70), (0, -(2**70)), (2**70, 1), (-(2**64), 1)])
def test_offsets_and_lengths_beyond_64_bits_are_out_of_range(impl: Any, span: tuple[int, int]) -> None:
    """Found: integers beyond 64 bits raised ``RuntimeError: Unable to cast Python instance`` from C++."""
    error = _refusal(impl, PROGRAM, {"a": span, "b": (1, 1)})
    assert type(error) is ValueError
    offset, length = span
    field = "length must be 1, 2 or 3" if not 1 <= length <= 3 else "offset must be in [0, 2**30]"
    assert str(error) == f"layout['a']: {field}, got {length if field.startswith('length') else offset}"


@pytest.mark.parametrize("impl", IMPLS)
def test_a_comment_that_is_not_utf8_text_is_refused(impl: Any) -> None:
    """Found: lone surrogates in a comment compiled, then ``compile_checked`` failed hashing the source."""
    source = ("stage align:\n  progress = 1 #- clip(dist_xy(ee_pos, target_pos) / 0\udcff\udcff, 0, 1)\n"
              "  done     = dist_xy(ee_pos, target_pos) < 0.02\n")
    with pytest.raises(PotentialError) as info:
        impl.PotentialProgram.compile(source, {"ee_pos": (0, 3), "target_pos": (3, 3)})
    assert (info.value.line, info.value.column) == (2, 55)
    assert info.value.message == "invalid UTF-8 byte '\\xed' in a comment"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("comment", "column"), [(b"\xff", 5), (b"ok \xe2\x82", 8), (b"\xf4\x90\x80\x80", 5),
                                                 (b"\xc0\xaf", 5), (b"caf\xc3\xa9 \xed\xa0\x80", 11)])
def test_every_kind_of_malformed_utf8_in_a_comment_is_found_at_its_byte(impl: Any, comment: bytes,
                                                                         column: int) -> None:
    source = "# a " + comment.decode("utf-8", "surrogateescape") + "\n" + PROGRAM
    with pytest.raises(PotentialError) as info:
        impl.PotentialProgram.compile(source, {"a": (0, 1), "b": (1, 1)})
    assert (info.value.line, info.value.column) == (1, column), info.value
    assert info.value.message.startswith("invalid UTF-8 byte") and info.value.message.endswith("in a comment")


@pytest.mark.parametrize("impl", IMPLS)
def test_a_comment_in_any_language_still_compiles(impl: Any) -> None:
    source = "# café, 机器人, 🤖\n" + PROGRAM.replace("a >= 1", "a >= 1  # erreichte Höhe")
    assert impl.PotentialProgram.compile(source, {"a": (0, 1), "b": (1, 1)}).num_stages == 1
