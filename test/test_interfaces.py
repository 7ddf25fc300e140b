# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""coda_msgs: every interface builds, documents its fields, and round-trips through serialisation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rclpy.serialization import deserialize_message, serialize_message

from coda_engine.ros.interface_samples import all_message_types, interface_names, sample_message

REPO = Path(__file__).resolve().parents[1]
MSGS = REPO / "src" / "coda_msgs"
TYPES = all_message_types()

REQUIRED = {
    "msg": {
        "SceneSpec",
        "ObjectState",
        "EpisodeResult",
        "Diagnosis",
        "PotentialStage",
        "PotentialProgram",
        "GenerationProgram",
        "TrainingProgram",
        "MemoryEvent",
        "LearningProgress",
    },
    "srv": {"QueryMemory", "GenerateScenes", "DiagnoseEpisodes", "CompilePotential"},
    "action": {"RunEpisode"},
}


@pytest.mark.parametrize("kind", sorted(REQUIRED))
def test_required_interfaces_are_installed(kind: str) -> None:
    assert REQUIRED[kind] <= set(interface_names(kind))


def test_cmake_list_matches_interface_files() -> None:
    listed = set(re.findall(r'"((?:msg|srv|action)/\w+\.(?:msg|srv|action))"', (MSGS / "CMakeLists.txt").read_text()))
    on_disk = {str(p.relative_to(MSGS)) for kind in ("msg", "srv", "action") for p in (MSGS / kind).glob(f"*.{kind}")}
    assert listed == on_disk


def _undocumented_fields(path: Path) -> list[str]:
    """Field lines without a trailing comment (constants are documented by their block's comment)."""
    undocumented = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and line != "---":
            is_constant = "=" in line.split("#")[0]
            if "#" not in line and not is_constant:
                undocumented.append(line)
    return undocumented


INTERFACE_FILES = sorted(p for kind in ("msg", "srv", "action") for p in (MSGS / kind).glob(f"*.{kind}"))


@pytest.mark.parametrize("path", INTERFACE_FILES, ids=lambda p: p.name)
def test_every_field_is_documented(path: Path) -> None:
    assert not _undocumented_fields(path), f"fields without a comment in {path.name}: {_undocumented_fields(path)}"


def test_documentation_check_catches_a_bare_field(tmp_path: Path) -> None:
    bad = tmp_path / "Bad.msg"
    bad.write_text("string a  # documented\n\nuint8 B=1\nuint8 b\n")
    assert _undocumented_fields(bad) == ["uint8 b"]


@pytest.mark.parametrize("key", sorted(TYPES))
def test_serialization_round_trip(key: str) -> None:
    msg_type = TYPES[key]
    sample = sample_message(msg_type)
    assert sample != msg_type(), "the sample must differ from the default message, or the round trip proves nothing"
    data = serialize_message(sample)
    assert deserialize_message(data, msg_type) == sample


@pytest.mark.parametrize("key", sorted(TYPES))
def test_sample_sets_every_field(key: str) -> None:
    msg_type = TYPES[key]
    sample, default = sample_message(msg_type), msg_type()
    unchanged = [
        name for name in msg_type.get_fields_and_field_types() if getattr(sample, name) == getattr(default, name)
    ]
    assert not unchanged, f"fields left at their default in {key}: {unchanged}"


@pytest.mark.parametrize("key", sorted(TYPES))
def test_dict_conversion_round_trip(key: str) -> None:
    from coda_engine.ros.convert import dict_to_msg, msg_to_dict

    sample = sample_message(TYPES[key])
    assert dict_to_msg(TYPES[key], msg_to_dict(sample)) == sample


def test_dict_conversion_names_the_bad_field() -> None:
    from coda_engine.ros.convert import ConversionError, dict_to_msg

    with pytest.raises(ConversionError, match=r"objects\[1\]\.colour"):
        dict_to_msg(TYPES["msg/SceneSpec"], {"objects": [{"name": "a"}, {"colour": "red"}]})
    with pytest.raises(ConversionError, match=r"SceneSpec\.seed"):
        dict_to_msg(TYPES["msg/SceneSpec"], {"seed": "seven"})
