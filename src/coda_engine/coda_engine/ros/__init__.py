# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""ROS 2 side of the engine: nodes and message conversion. The only modules that import rclpy."""
