# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Simulation: the Panda scene model, the scene generator, the simulated arm, gymnasium envs and experts.

Pure modules (no rclpy). Entry points: :func:`coda_engine.sim.generator.generate`,
:class:`coda_engine.sim.arm.SimArm`, :class:`coda_engine.sim.env.CodaSimEnv`,
:func:`coda_engine.sim.expert.run_expert` / :func:`coda_engine.sim.expert.collect_demonstrations`.
"""
