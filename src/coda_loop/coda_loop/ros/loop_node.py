# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda_loop`` node: the co-evolution loop as one process of a ``ros2 launch`` system.

It runs :class:`coda_loop.rounds.CoevolutionLoop` on the run folder of parameter ``run_dir``
(resuming it when it exists) and sends episodes to the ``sim_bridge`` workers on the domain (plus
``workers`` local processes, none by default). With ``generator_service`` it asks that ``scene_generator``
service for every scene, with ``critic_service`` that ``critic`` service for the steering diagnoses (empty: in
this process; :mod:`coda_loop.sources`); training runs here; the ``memory`` node started next to it announces
every write. Parameters: see
config/loop.yaml. The node answers its parameters at all times, also while the loop trains (a thread spins it; the
loop's clients are on a node of the episode runner). The node exits when the last round has finished, having
written ``summary.json`` and ``report.html`` into the run folder as ``coda run`` does, with status 0; with 2 when
it cannot start (a bad parameter or config file, another loop on the domain). SIGINT or SIGTERM stops it between two
steps of its work, with status 0: the run folder keeps every finished step, and the next start with the same
``run_dir`` resumes it. Later signals are ignored until it has closed the run (``ros2 launch`` sends one of its
own after a terminal's Ctrl-C).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from coda_engine.processes import signals_held
from coda_engine.ros.spin import NodeThread, StopSignal, shutdown_context, stop_on_first_signal
from coda_engine.text_embedding import load_model as load_text_model
from coda_loop.config import RUN_CONFIG, LoopConfig
from coda_loop.ros.graph import DISCOVERY_WAIT_S, refuse_second_loop
from coda_loop.ros.remote import use_nodes
from coda_loop.rounds import CoevolutionLoop, write_run_summary


class LoopNode(Node):
    """The loop's parameters, answered at any time: a thread spins this node for the whole run.

    The loop itself runs in :func:`main`; its clients live on a node of the episode runner.
    """

    def __init__(self) -> None:
        """Declare the parameters."""
        super().__init__("coda_loop")
        self.run_dir = Path(str(self.declare_parameter("run_dir", "runs/ros").value))
        self.fields = {
            "method": str(self.declare_parameter("method", LoopConfig.method).value),
            "rounds": int(self.declare_parameter("rounds", LoopConfig.rounds).value),
            "budget": int(self.declare_parameter("budget", LoopConfig.budget).value),
            "workers": int(self.declare_parameter("workers", 0).value),
            "seed": int(self.declare_parameter("seed", 0).value),
            "progress": False,
        }
        self.config_file = str(self.declare_parameter("config_file", "").value)
        self.generator_service = str(self.declare_parameter("generator_service", "").value)
        self.critic_service = str(self.declare_parameter("critic_service", "").value)
        self.wait_for_workers = float(self.declare_parameter("wait_for_workers_s", 30.0).value)
        self.discovery_wait = float(self.declare_parameter("discovery_wait_s", DISCOVERY_WAIT_S).value)
        self.write_report = bool(self.declare_parameter("write_report", True).value)

    def show(self, config: LoopConfig) -> None:
        """Set ``method``, ``rounds``, ``budget``, ``workers`` and ``seed`` to the run's own values.

        ``ros2 param get /coda_loop rounds`` then tells what the run does, also when ``config_file`` or a resumed
        run folder decided it, not what the launch passed.
        """
        from rclpy.parameter import Parameter

        self.set_parameters([Parameter(name, value=type(self.fields[name])(getattr(config, name)))
                             for name in ("method", "rounds", "budget", "workers", "seed")])

    def config(self) -> LoopConfig | None:
        """Return the config of a new run; None when ``run_dir`` holds a run (resumed with its own settings).

        With ``config_file`` the file's fields are used and the other parameters only fill in what it leaves out.
        """
        if (self.run_dir / RUN_CONFIG).is_file():
            return None
        if self.config_file:
            import yaml

            text = Path(self.config_file).read_text() if Path(self.config_file).is_file() else ""
            given = yaml.safe_load(text) if text else None
            if not isinstance(given, dict):
                raise ValueError(f"config_file={self.config_file!r} is not a YAML/JSON mapping of LoopConfig fields")
            return LoopConfig.from_dict({**self.fields, **given})
        return LoopConfig(**self.fields)


def main(args: list[str] | None = None) -> None:
    """Run the loop to its end, or until the first SIGINT / SIGTERM."""
    running = [True]

    def interrupt(signum: int) -> None:
        if running[0]:  # once the run is closing, a signal changes nothing
            raise StopSignal

    # The signal stops the work where it is and the clean-up below still has its ROS context (rclpy's own
    # handlers would shut it down first); the loop's waits for episodes are short, so it stops within 0.1 s.
    stop_on_first_signal(on_first=interrupt)
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    start = time.monotonic()
    node = LoopNode()
    loop: CoevolutionLoop | None = None
    spinner: NodeThread | None = None
    code = 0
    try:
        # The text model is imported before the work, with the stop signals held meanwhile: raised inside that
        # import, StopSignal made a C extension's initialisation fail ("ImportError: initialization failed") and
        # the node exit 1 instead of stopping.
        node.get_logger().info("loading the text model")
        with signals_held(signal.SIGINT, signal.SIGTERM):
            load_text_model()
        node.get_logger().info("text model loaded")
        if node.discovery_wait > 0:
            refuse_second_loop(node, node.discovery_wait)
        spinner = NodeThread(node, "coda_loop")
        loop = CoevolutionLoop(node.run_dir, node.config(), node=node,
                               on_event=lambda r, step, out: node.get_logger().info(
                                   f"round {r} {step}: "
                                   + ("started" if out is None else json.dumps(out.to_dict())[:300])))
        node.show(loop.config)
        use_nodes(loop, node.generator_service, node.critic_service)
        if loop.config.workers == 0:
            end = time.monotonic() + node.wait_for_workers
            while not loop.runner.remote_workers() and time.monotonic() < end:
                time.sleep(0.5)
        summary = write_run_summary(node.run_dir, loop.run(), time.monotonic() - start, report=node.write_report)
        running[0] = False
        node.get_logger().info(f"finished: {json.dumps(summary)}")
    except (ValueError, RuntimeError) as error:
        if loop is not None:  # an error of the run itself, not of its start
            raise
        node.get_logger().error(str(error))
        code = 2
    except (KeyboardInterrupt, ExternalShutdownException):
        node.get_logger().info(f"stopped; the next start with run_dir {node.run_dir} resumes the run")
    finally:
        running[0] = False
        if loop is not None:
            loop.close()
        if spinner is not None:
            spinner.close()  # destroys the node
        else:
            node.destroy_node()
        shutdown_context()
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
