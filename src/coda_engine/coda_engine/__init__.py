# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""CoDA data engine: scenes, simulated and real arms (sim_bridge, arm_bridge), recorded episodes, policy versions.

It depends on coda_msgs and coda_core_cpp only; the critic, the policy and the loop (coda_loop) build on it.
"""
