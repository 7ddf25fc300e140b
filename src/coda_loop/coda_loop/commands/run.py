# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda run``: the co-evolution loop (``make run``).

Composes the loop in this process: the round orchestration (:mod:`coda_loop.rounds`), the shared
memory with its ``memory`` node announcing every write on ``memory_events`` and answering
``query_memory``, and ``--workers`` local simulation processes. ``sim_bridge`` workers already on
the ROS domain (``ros2 run coda_engine sim_bridge --ros-args -p checkpoint_root:=RUN_DIR/checkpoints``)
take a share of every batch of episodes. Writes ``runs/<id>/`` (memory.db, checkpoints, demos,
summary.json, report.html). Killed at any moment, ``coda run --resume runs/<id>`` continues from the
first unfinished step.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from coda_engine.processes import signals_held
from coda_engine.text_embedding import load_model as load_text_model
from coda_loop.config import METHODS
from coda_loop.ros.graph import DISCOVERY_WAIT_S
from coda_loop.step_results import DiagnoseResult, EpisodesResult, EvaluateResult, StepResult, TrainResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``coda run``."""
    parser.add_argument("--config", type=Path, help="YAML/JSON file of LoopConfig fields (others keep their defaults)")
    parser.add_argument("--rounds", type=int, help="co-evolution rounds after round 0 (default 3)")
    parser.add_argument("--budget", type=int, help="scenes generated per round (default 32)")
    parser.add_argument("--workers", type=int, help="local simulation worker processes (default 2)")
    parser.add_argument("--method", choices=METHODS, help="loop variant (default coda; see coda experiment)")
    parser.add_argument("--seed", type=int, help="seed of the run (default 0)")
    parser.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a run folder where it stopped")
    parser.add_argument("--run-dir", type=Path, help="use this run folder: created if new, resumed if it holds this "
                        "config's run")
    parser.add_argument("--runs-root", type=Path, default=Path("runs"), help="where new run folders go")
    parser.add_argument("--arms", type=Path, metavar="FILE", help="fleet file: simulation workers and real arms "
                        "(arm_bridge namespaces, episode budgets, hours); see config/fleet_example.yaml")
    parser.add_argument("--no-ros", action="store_true", help="no ROS node: no memory topic, no remote workers")
    parser.add_argument("--generator-service", metavar="SERVICE", default="",
                        help="generate every scene with this scene_generator service of the domain, e.g. "
                             "/generate_scenes (default: in this process)")
    parser.add_argument("--critic-service", metavar="SERVICE", default="",
                        help="make the steering diagnoses with this critic service of the domain, e.g. "
                             "/diagnose_episodes (default: in this process)")
    parser.add_argument("--discovery-wait", type=float, default=DISCOVERY_WAIT_S, metavar="SECONDS",
                        help=f"watch the ROS graph this long for another loop on the domain before starting (default "
                             f"{DISCOVERY_WAIT_S:g}; 0: no check)")
    parser.add_argument("--no-report", action="store_true", help="do not write report.html at the end")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def _config(args: argparse.Namespace) -> Any:
    from coda_loop.config import LoopConfig, load_config, run_config

    overrides = {k: getattr(args, k) for k in ("rounds", "budget", "workers", "method", "seed")
                 if getattr(args, k) is not None}
    if args.quiet:
        overrides["progress"] = False
    if args.resume is not None and args.run_dir is not None:
        raise ValueError("give --resume or --run-dir, not both")
    if args.resume is not None:
        held = run_config(args.resume)
        if held is None:
            raise ValueError(f"--resume {args.resume}: not a run folder (no config.json)")
        saved = held.to_dict()
        changed = sorted(k for k in overrides if k not in ("rounds", "workers", "progress") and saved.get(k) !=
                         overrides[k])
        if changed or args.config is not None:
            raise ValueError(f"--resume keeps the run's settings; only --rounds and --workers may change (got "
                             f"{', '.join('--' + k for k in changed) or '--config'})")
        return LoopConfig.from_dict({**saved, **overrides})
    if args.config is not None:
        return load_config(args.config, overrides)
    return LoopConfig(**overrides)


class _Ros:
    """The ROS side of the process: the loop's node and the memory node, both spun by a thread for the whole run.

    The ``coda_run`` node answers its parameters (and so the liveness check of a second loop) while the loop trains;
    the episode runner's clients live on a node of their own (:class:`coda_loop.workers.EpisodeRunner`).
    """

    def __init__(self, db_path: Path, discovery_wait: float = DISCOVERY_WAIT_S) -> None:
        """Start the nodes; ``RuntimeError`` when another loop runs on this ROS domain (nothing is left running).

        ``discovery_wait``: seconds the graph is watched for that other loop (0: not checked).
        """
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from coda_loop.ros.graph import refuse_second_loop
        from coda_loop.ros.memory_node import MemoryNode

        rclpy.init()
        self.node = rclpy.create_node("coda_run")
        try:
            if discovery_wait > 0:
                refuse_second_loop(self.node, discovery_wait)
        except RuntimeError:
            self.node.destroy_node()
            rclpy.try_shutdown()
            raise
        self.memory = MemoryNode(db_path=str(db_path))
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.memory)
        self.executor.add_node(self.node)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        while not self.stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        import rclpy

        self.stop.set()
        self.thread.join(timeout=5)
        self.executor.shutdown(timeout_sec=1.0)
        self.memory.destroy_node()
        self.node.destroy_node()
        rclpy.try_shutdown()


def _printer(quiet: bool) -> Any:
    from tqdm import tqdm

    from coda_loop.rounds import steps_of

    bars: dict[int, Any] = {}

    def on_event(r: int, step: str, out: StepResult | None) -> None:
        if quiet:
            return
        bar = bars.get(r)
        if bar is None:
            bar = bars[r] = tqdm(total=len(steps_of(r)), desc=f"round {r}", dynamic_ncols=True, leave=True,
                                 file=sys.stdout)
        if out is None:  # the step starts
            bar.set_description(f"round {r} {step}")
            return
        bar.update(1)
        if isinstance(out, EpisodesResult):
            real = out.real_arms.by_source.get("real", {}) if out.real_arms else {}
            bar.set_postfix_str(f"episodes {out.success:.0%}" + (
                f" (real arms {real['success']:.0%} of {real['episodes']})" if real.get("episodes") else ""))
        elif isinstance(out, DiagnoseResult) and not out.skipped:
            agree = out.learned.agreement.get("failure_mode") if out.learned else None
            bar.set_postfix_str(f"{out.failures} failures diagnosed"
                                + ("" if agree is None else f", learned critic agrees on {agree:.0%}"))
        elif isinstance(out, TrainResult):
            bar.set_postfix_str(f"policy {out.version}")
        elif isinstance(out, EvaluateResult):
            rates = " ".join(f"{s} {v:.0%}" for s, v in out.per_split.items())
            bar.set_postfix_str(f"{rates} | OOD {out.ood:.0%}")
            bar.close()

    return on_event


def _rate(row: dict[str, Any]) -> str:
    return f"{row['success']:.0%} of {row['episodes']}" if row.get("episodes") else "none"


def run(args: argparse.Namespace) -> int:
    """Run or resume the loop; print where the run is and what it measured."""
    from coda_loop.rounds import CoevolutionLoop, new_run_dir, write_run_summary

    try:
        config = _config(args)
    except ValueError as error:
        print(f"coda run: {error}", file=sys.stderr)
        return 2
    fleet = None
    if args.arms is not None:
        from coda_loop.fleet import Fleet, FleetError

        try:
            fleet = Fleet.load(args.arms)
        except FleetError as error:
            print(f"coda run: --arms: {error}", file=sys.stderr)
            return 2
        if args.no_ros and fleet.arms:
            print("coda run: --arms with real arms needs ROS (drop --no-ros)", file=sys.stderr)
            return 2
    if args.no_ros and (args.generator_service or args.critic_service):
        print("coda run: --generator-service and --critic-service name ROS services (drop --no-ros)", file=sys.stderr)
        return 2
    created = args.resume is None and (args.run_dir is None or not Path(args.run_dir).exists())
    run_dir = args.resume or args.run_dir or new_run_dir(args.runs_root, config.method)
    start = time.monotonic()
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    try:
        ros = None if args.no_ros else _Ros(Path(run_dir) / "memory.db", args.discovery_wait)
    except RuntimeError as error:
        if created:
            Path(run_dir).rmdir()  # still empty: the refused run leaves nothing behind
        print(f"coda run: {error}", file=sys.stderr)
        return 2
    print(f"coda run: {config.method}, {config.rounds} rounds x {config.budget} scenes, {config.workers} local "
          f"workers -> {run_dir}" + ("" if ros is None else " (memory events on /memory_events, policy versions "
                                    "served on /coda_run/get_checkpoint)"), flush=True)
    try:
        loop = CoevolutionLoop(run_dir, config, node=None if ros is None else ros.node, fleet=fleet)
    except ValueError as error:
        if ros is not None:
            ros.close()
        print(f"coda run: {error}", file=sys.stderr)
        return 2
    loop.on_event = _printer(args.quiet)
    if args.generator_service or args.critic_service:
        from coda_loop.ros.remote import use_nodes

        use_nodes(loop, args.generator_service, args.critic_service)
    try:
        with signals_held(signal.SIGINT):  # a Ctrl-C inside the text model's import would break it (ImportError)
            load_text_model()
        summary = loop.run()
    except KeyboardInterrupt:
        print(f"\ncoda run: interrupted; continue with `coda run --resume {run_dir}`", file=sys.stderr)
        return 130
    finally:
        loop.close()
        if ros is not None:
            ros.close()
    summary = write_run_summary(run_dir, summary, time.monotonic() - start, report=not args.no_report)
    if args.json:
        print(json.dumps(summary))
    else:
        first, last = summary["rounds"][0], summary["rounds"][-1]
        counts = {n * len(loop.config.families) for n in (last.get("episodes_per_family") or {}).values()}
        if counts:
            print(f"coda run: held-out success, {'/'.join(map(str, sorted(counts)))} scenes per split")
        for split in first["per_split"]:
            print(f"coda run: {split:12s} {first['per_split'][split]:6.1%} -> {last['per_split'][split]:6.1%}")
        print(f"coda run: OOD mean     {first['ood']:6.1%} -> {last['ood']:6.1%} (round 0 -> round {last['round']})")
        for row in summary.get("arms", []):
            sim, real = row["by_source"]["sim"], row["by_source"]["real"]
            print(f"coda run: round {row['round']} episodes: sim {_rate(sim)}, real arms {_rate(real)}"
                  + "".join(f"; {arm}: {note}" for arm, note in row.get("arm_notes", {}).items()))
        print(f"coda run: done in {summary['seconds']} s; report: coda report {run_dir}")
    return 0
