# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda bench NAME``: the project's benchmarks, each comparing against a reference in one run.

Every benchmark is a module with ``main(argv: list[str] | None) -> int`` that prints figures
(one JSON object with ``--json``); this command forwards the remaining arguments to it.
"""

from __future__ import annotations

import argparse
import importlib

# name -> (module with main(argv), one-line help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "core": ("coda_core_cpp.bench", "GAE, rollout buffer and potential evaluation: C++ vs SB3 / Python / numpy"),
    "sim": ("coda_engine.sim.bench", "simulated arm vs raw mj_step, scene generation, render fps, expert success"),
    "control": ("coda_policy.bench_control", "observation-to-command latency of the policy node over DDS vs rclpy; "
                "--arm fake: command latency through arm_bridge to the stand-in arm vs a bare relay"),
    "loop": ("coda_loop.bench_loop", "the loop's scene source and critic, in-process and (--dds) over ROS 2, vs direct "
             "calls"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the benchmark names; their own options follow the name."""
    lines = "\n".join(f"  {name:8s} {help_text}" for name, (_, help_text) in BENCHMARKS.items())
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = f"benchmarks:\n{lines}\n\nRun `coda bench NAME --help` for a benchmark's options."
    parser.add_argument("name", choices=sorted(BENCHMARKS), help="which benchmark")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="options of the benchmark (e.g. --json)")


def run(args: argparse.Namespace) -> int:
    """Import the chosen benchmark module and run it with the remaining arguments."""
    module = importlib.import_module(BENCHMARKS[args.name][0])
    return int(module.main(list(args.bench_args)) or 0)
