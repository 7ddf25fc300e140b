# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""ROS 2 layer of coda_policy: message conversion and the ``policy`` node."""
