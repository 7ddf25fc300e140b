# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""CoDA core hot paths implemented in C++ (see include/coda_core/), re-exported from the extension."""

from coda_core_cpp._core import version

__all__ = ["version"]
