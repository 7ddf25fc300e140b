# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""ROS 2 side of the loop: the loop and memory nodes, one loop per domain. The only modules that import rclpy."""
