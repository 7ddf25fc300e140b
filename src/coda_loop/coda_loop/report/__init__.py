# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Reports of runs and experiments: inline-SVG plots, the run's HTML page, the experiment table.

``svg`` holds the plot primitives, ``data`` what the run report shows (read from the memory), ``html`` the page
of ``coda report``, ``experiment`` the Markdown table and HTML page of ``coda experiment``. Pure modules: no rclpy,
no plotting library.
"""

from coda_loop.report.data import ReportError
from coda_loop.report.experiment import render_experiment
from coda_loop.report.html import write_report

__all__ = ["ReportError", "render_experiment", "write_report"]
