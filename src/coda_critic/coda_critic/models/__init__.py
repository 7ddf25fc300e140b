# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Critic weights shipped with the package (see ``README.md`` in this folder)."""

from pathlib import Path

EMBEDDED_MODEL = Path(__file__).resolve().parent / "lc-2b784ab5f7"
"""The default learned critic: trained on 3000 labelled fault-actor episodes of the ``id`` split."""
