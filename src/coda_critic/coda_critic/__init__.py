# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""CoDA critic: diagnoses episodes and turns diagnoses into generation and training programs."""
