# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Suite files from elsewhere: seeded mutations of a shipped suite load as valid suites or are refused by name.

The contract of :func:`load_suite` on any bytes: a ``Suite`` whose numbers are finite and which parses again from its
own ``to_dict``, or a :class:`SuiteError` whose message names the file and the field that was changed, in bounded
length and time. Any other exception, an unnamed field or a slow answer fails the test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from coda_policy.suite import SUITES_DIR, SuiteError, load_suite, parse_suite

VARIANTS = 80


def _small_suite() -> dict[str, Any]:
    """Return the shipped ``id`` suite cut to one entry each of two families (goal region, distractors)."""
    data = yaml.load((SUITES_DIR / "id.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    by_family: dict[str, Any] = {}
    for entry in data["entries"]:
        by_family.setdefault(entry["family"], entry)
    data["entries"] = [by_family["reach"], by_family["pick_place"]]
    data["provenance"] = {"script": "test"}
    return data


def test_mutated_suite_files_load_valid_or_are_refused_naming_the_field(tmp_path: Path,
                                                                       engine_test_helpers: Any) -> None:
    helpers = engine_test_helpers("yaml_mutations")
    data = _small_suite()
    parse_suite(data)  # the starting point is valid

    def check(suite: Any) -> list[str]:
        plain = suite.to_dict()
        return ([] if helpers.finite_numbers(plain) else ["loaded with a non-finite number"]) + (
            [] if parse_suite(plain).to_dict() == plain else ["does not parse again from its to_dict()"])

    def entry_named(variant: Any, message: str) -> bool:  # an entry is named by its index: "entry 1 (id-...): ..."
        return variant.field == "entries" and len(variant.path) > 1 and f"entry {variant.path[1]}" in message

    problems, outcomes = helpers.loader_contract(data, np.random.default_rng(24), VARIANTS, tmp_path, load_suite,
                                                 SuiteError, check, entry_named)
    assert not problems, f"{len(problems)} of {VARIANTS} variants broke the contract:\n" + "\n".join(problems)
    assert outcomes["loaded"] and outcomes["refused"], outcomes  # both sides of the contract were exercised


@pytest.mark.parametrize(("change", "expected"), [
    # what the mutations found before the fix
    (lambda d: d["entries"][0]["objects"][0].update(size=[10**400, 0.02, 0.02]), "objects[0].size[0]: expected a"),
    (lambda d: d["provenance"].update(script=float("nan")), "provenance.script: expected a finite number, got nan"),
    (lambda d: d["entries"][1].update(instruction=["-" * 100_000]), "instruction: expected a non-empty string"),
])
def test_what_the_mutations_found_is_refused_by_name(tmp_path: Path, change: Any, expected: str) -> None:
    data = _small_suite()
    change(data)
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert str(info.value).startswith(str(path)) and expected in str(info.value), str(info.value)[:300]
    assert len(str(info.value)) < 1000


def test_a_suite_file_that_is_not_utf8_is_refused_by_byte(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_bytes(b"format: 1\nname: caf\xe9\n")
    with pytest.raises(SuiteError, match=r"is not UTF-8 text \(byte 0xe9 at offset 19\)"):
        load_suite(path)
