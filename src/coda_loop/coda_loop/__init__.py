# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""CoDA's co-evolution loop: rounds, workers, memory, the ``coda`` command, reports, experiments and export."""
