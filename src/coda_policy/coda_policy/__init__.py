# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""CoDA policy: language-conditioned action policy, its training and its serving node."""
