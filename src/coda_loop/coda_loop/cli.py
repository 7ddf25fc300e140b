# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The ``coda`` command: one entry point, one subcommand per job.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; modules are imported only when their subcommand is used (or its
``--help`` is asked for), so ``coda --help`` stays fast. Add a subcommand by adding a line
to ``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module implementing it, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("coda_loop.commands.run", "run the co-evolution loop (make run)"),
    "doctor": ("coda_loop.commands.doctor", "check the environment: ROS 2, DDS, interfaces, simulator"),
    "bench": ("coda_loop.commands.bench", "benchmarks: coda bench core|sim|control ... --json"),
    "critic": ("coda_critic.commands", "learned critic: coda critic train|eval --json"),
    "train": ("coda_policy.cli", "train the policy: coda train sft|rl|compare|replay ..."),
    "eval": ("coda_policy.eval_command", "success of a policy checkpoint on held-out suites: coda eval --policy CKPT"),
    "report": ("coda_loop.commands.report", "HTML report of a run folder: coda report RUN_DIR"),
    "export": ("coda_loop.commands.export", "episodes of a run as rosbag2 MCAP: coda export RUN_DIR --mcap FILE"),
    "experiment": ("coda_loop.commands.experiment", "CoDA against the baselines: coda experiment --preset small"),
    "analyze": ("coda_loop.commands.analyze", "where a run's budget went: coda analyze RUN_DIR ... --json"),
    "compare": ("coda_loop.commands.compare", "a change against its control, paired: coda compare --arm F --control F"),
    "screen": ("coda_loop.commands.screen",
               "a change to behaviour cloning on a run's recorded steps, paired: coda screen RUN_DIR --batches X"),
}


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="coda", description="CoDA for ROS 2: co-evolving data engine and policy.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module_name)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, import the chosen subcommand, and run it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Only the chosen subcommand's module is imported, then its arguments are added.
    if argv and argv[0] in SUBCOMMANDS:
        module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        module.add_arguments(subparsers.choices[argv[0]])
    args = parser.parse_args(argv)
    module = importlib.import_module(args._module)
    return int(module.run(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
