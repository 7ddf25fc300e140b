# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Subcommands of the ``coda`` command (see coda_loop.cli)."""
