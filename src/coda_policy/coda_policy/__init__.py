# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""CoDA policy: language-conditioned action policy, its training and its serving node.

- :mod:`coda_policy.config`, :mod:`coda_policy.model`: :class:`PolicyConfig`, the bare network
  :class:`CodaPolicyNet` and the policy surface :class:`CodaPolicy` (``reset``, ``select_action``, ``forward``).
- :mod:`coda_policy.checkpoint`: ``<root>/<version_id>/model.safetensors`` + ``config.json``.
- :mod:`coda_policy.sft`, :mod:`coda_policy.rl`: behaviour cloning and PPO with staged-potential shaping
  (``coda train sft|rl|compare|replay``, :mod:`coda_policy.cli`); the PPO update in :mod:`coda_policy.ppo`.
- :mod:`coda_policy.serving`: ``load_action_fn(folder, scene)`` for the engine's workers.
- :mod:`coda_policy.control`, :mod:`coda_policy.ros.policy_node`: the ``policy`` node and its ROS-free logic;
  :mod:`coda_policy.action_mean`: the network's action mean in C++ or NumPy for its control ticks.
"""
