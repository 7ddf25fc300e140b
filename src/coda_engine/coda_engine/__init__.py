# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""CoDA data engine: scenes, simulated arms, shared memory, round orchestration and the coda CLI."""
