# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""ROS 2 nodes of the critic package (thin wrappers around the pure modules)."""
