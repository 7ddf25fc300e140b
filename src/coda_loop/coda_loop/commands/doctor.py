# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda doctor``: check that the workspace environment really works, end to end."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``coda doctor``."""
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds allowed for the DDS exchange")


def _version(module_name: str) -> str:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        return f"MISSING ({type(exc).__name__}: {exc})"
    version = getattr(module, "__version__", None) or getattr(module, "version", None)
    return str(version() if callable(version) else version or "present")


def collect(timeout: float) -> dict[str, Any]:
    """Return the environment facts and the result of a two-process DDS exchange."""
    from coda_engine.ros.dds_check import run_two_processes

    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "ros_distro": os.environ.get("ROS_DISTRO", "kilted (PyPI wheels)"),
        "rmw_implementation": os.environ.get("RMW_IMPLEMENTATION", "default"),
        "ros_domain_id": int(os.environ.get("ROS_DOMAIN_ID", "0")),
        "versions": {
            name: _version(name) for name in ("rclpy", "coda_msgs", "coda_core_cpp", "mujoco", "torch", "numpy")
        },
    }
    start = time.monotonic()
    report = run_two_processes(timeout=timeout)
    facts["dds_exchange"] = {
        "types_expected": report.types_expected,
        "types_received_intact": report.types_received - len(report.mismatched),
        "mismatched": report.mismatched,
        "missing": report.missing,
        "seconds": round(time.monotonic() - start, 2),
    }
    facts["ok"] = report.ok and not any(v.startswith("MISSING") for v in facts["versions"].values())
    return facts


def run(args: argparse.Namespace) -> int:
    """Print the facts; exit 1 when anything is missing or a message did not arrive intact."""
    facts = collect(args.timeout)
    if args.json:
        print(json.dumps(facts, indent=2))
    else:
        for key, value in facts.items():
            print(f"{key:20s} {value}")
    return 0 if facts["ok"] else 1
