# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The co-evolution loop: run settings (config), where episodes run (workers), the rounds (rounds)."""

from coda_engine.loop.config import METHODS, SPLITS, LoopConfig, load_config
from coda_engine.loop.rounds import CoevolutionLoop, new_run_dir

__all__ = ["METHODS", "SPLITS", "CoevolutionLoop", "LoopConfig", "load_config", "new_run_dir"]
