# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Message <-> domain-type conversion: the one place where both are imported.

Domain types expose ``to_dict()``/``from_dict()`` with the field names and nesting of their
message (see ``coda_engine.sim.scene``); the two generic functions here fill any message from
such a dict and back, by introspection, so a field added to a message and to its domain type
needs no conversion code. Unknown keys are errors that name the field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


class ConversionError(ValueError):
    """A dict that does not fit a message type; the message names the field path."""


def _is_message(value: Any) -> bool:
    return hasattr(type(value), "get_fields_and_field_types") and hasattr(type(value), "SLOT_TYPES")


def msg_to_dict(msg: Any) -> dict[str, Any]:
    """Return a nested dict of plain Python values (lists for sequences, bytes for uint8[])."""
    out: dict[str, Any] = {}
    for name in type(msg).get_fields_and_field_types():
        out[name] = _to_plain(getattr(msg, name))
    return out


def _to_plain(value: Any) -> Any:
    if _is_message(value):
        return msg_to_dict(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes):
        return value
    if isinstance(value, list | tuple) or type(value).__name__ == "array":
        return [_to_plain(v) for v in value]
    return value


def dict_to_msg(msg_type: type, data: Mapping[str, Any], path: str = "") -> Any:
    """Build a ``msg_type`` from a (possibly partial) nested dict; raise ConversionError on bad keys/values."""
    msg = msg_type()
    fields = msg_type.get_fields_and_field_types()
    for key, value in data.items():
        where = f"{path}.{key}" if path else key
        if key not in fields:
            raise ConversionError(f"{msg_type.__name__} has no field {where!r}")
        current = getattr(msg, key)
        try:
            if _is_message(current):
                setattr(msg, key, dict_to_msg(type(current), value, where))
            elif fields[key].startswith("sequence<") and "/" in fields[key]:
                element_type = _element_type(msg_type, key)
                setattr(msg, key, [dict_to_msg(element_type, v, f"{where}[{i}]") for i, v in enumerate(value)])
            else:
                setattr(msg, key, _checked(fields[key], value))
        except ConversionError:
            raise
        except (AssertionError, TypeError, ValueError) as exc:
            raise ConversionError(f"bad value for {msg_type.__name__}.{where}: {value!r} ({exc})") from exc
    return msg


_INTS = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "octet"}
_FLOATS = {"float", "double", "float32", "float64"}


def _checked(type_name: str, value: Any) -> Any:
    """Check a basic or basic-sequence value against its field type (rclpy checks only on request)."""
    base = type_name.removeprefix("sequence<").split(",")[0].rstrip(">").split("[")[0]
    if type_name.startswith("sequence<") or "[" in type_name:
        if base in ("uint8", "octet") and isinstance(value, bytes | bytearray):
            return value
        if not isinstance(value, list | tuple | np.ndarray):
            raise ValueError(f"expected a sequence of {base}")
        return [_checked(base, v) for v in value] if not isinstance(value, np.ndarray) else value
    if base in _INTS and not (isinstance(value, int | np.integer) and not isinstance(value, bool)):
        raise ValueError(f"expected an integer ({base})")
    if base in _FLOATS and not (isinstance(value, int | float | np.floating) and not isinstance(value, bool)):
        raise ValueError(f"expected a number ({base})")
    if base == "boolean" and not isinstance(value, bool | np.bool_):
        raise ValueError("expected a bool")
    if base.startswith(("string", "wstring")) and not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def _element_type(msg_type: type, field: str) -> type:
    import importlib

    slot = msg_type.SLOT_TYPES[list(msg_type.get_fields_and_field_types()).index(field)].value_type
    module = importlib.import_module(".".join(slot.namespaces))
    return getattr(module, slot.name)
