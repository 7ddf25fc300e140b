# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Fully populated samples of every coda_msgs interface, built by introspection.

Every field gets a non-default value (strings, numbers, nested messages, sequences with two
elements), so a round trip through serialisation or DDS that drops or corrupts any field is
detected by comparing with ``==``. Used by the interface tests and by ``coda doctor``.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

from rosidl_parser.definition import (
    AbstractNestedType,
    AbstractString,
    AbstractWString,
    Array,
    BasicType,
    BoundedSequence,
    NamespacedType,
)

INTERFACE_PACKAGE = "coda_msgs"


def _resolve(namespaced: NamespacedType) -> type:
    package = ".".join(namespaced.namespaces)
    module = importlib.import_module(package)
    if hasattr(module, namespaced.name):
        return getattr(module, namespaced.name)
    # Parts of services and actions (e.g. RunEpisode_Feedback) live in the interface's own module.
    base = namespaced.name.split("_")[0]
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()
    return getattr(importlib.import_module(f"{package}._{snake}"), namespaced.name)


def _basic_value(typename: str, salt: int) -> Any:
    if typename == "boolean":
        return True
    if typename in ("float", "double", "long double"):
        return 0.25 + salt
    if typename in ("char", "octet", "uint8", "int8"):
        return (7 + salt) % 100 if typename != "char" else "c"
    if typename.startswith(("int", "uint")):
        return 40 + salt
    raise ValueError(f"unhandled basic type {typename!r}")


def _value_for(slot: Any, field_name: str, salt: int, depth: int) -> Any:
    if isinstance(slot, BasicType):
        return _basic_value(slot.typename, salt)
    if isinstance(slot, AbstractString | AbstractWString):
        return f"{field_name}-{salt}"
    if isinstance(slot, NamespacedType):
        return sample_message(_resolve(slot), salt=salt + 1, depth=depth + 1)
    if isinstance(slot, AbstractNestedType):
        if isinstance(slot, Array):
            count = slot.size
        elif isinstance(slot, BoundedSequence):
            count = min(2, slot.maximum_size)
        else:
            count = 2 if depth < 3 else 1
        values = [_value_for(slot.value_type, field_name, salt + i, depth) for i in range(count)]
        if isinstance(slot.value_type, BasicType) and slot.value_type.typename == "octet":
            return bytes(values)
        return values
    raise ValueError(f"unhandled slot type {slot!r} of field {field_name!r}")


def sample_message(msg_type: type, salt: int = 0, depth: int = 0) -> Any:
    """Return an instance of ``msg_type`` with every field set to a non-default value."""
    msg = msg_type()
    for (name, _), slot in zip(msg_type.get_fields_and_field_types().items(), msg_type.SLOT_TYPES, strict=True):
        setattr(msg, name, _value_for(slot, name, salt, depth))
    return msg


def interface_names(kind: str) -> list[str]:
    """Names of the installed ``coda_msgs`` interfaces of one kind (``msg``, ``srv`` or ``action``)."""
    from ament_index_python.packages import get_package_share_directory

    share = Path(get_package_share_directory(INTERFACE_PACKAGE)) / kind
    return sorted(p.stem for p in share.glob(f"*.{kind}"))


def interface_type(kind: str, name: str) -> type:
    """Import ``coda_msgs.<kind>.<name>``."""
    return getattr(importlib.import_module(f"{INTERFACE_PACKAGE}.{kind}"), name)


def all_message_types() -> dict[str, type]:
    """Every concrete message type: msgs, service requests/responses, action goal/result/feedback."""
    types: dict[str, type] = {}
    for name in interface_names("msg"):
        types[f"msg/{name}"] = interface_type("msg", name)
    for name in interface_names("srv"):
        srv = interface_type("srv", name)
        types[f"srv/{name}_Request"] = srv.Request
        types[f"srv/{name}_Response"] = srv.Response
    for name in interface_names("action"):
        action = interface_type("action", name)
        types[f"action/{name}_Goal"] = action.Goal
        types[f"action/{name}_Result"] = action.Result
        types[f"action/{name}_Feedback"] = action.Feedback
        types[f"action/{name}_FeedbackMessage"] = action.Impl.FeedbackMessage
    return types
