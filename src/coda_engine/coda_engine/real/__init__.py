# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Real arms: robot configuration, the safety layer, episodes on perceived state, faults of the stand-in (no rclpy)."""
