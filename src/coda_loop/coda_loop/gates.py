# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The keep rules of a round: whether an update replaces what it started from.

Each rule compares a score of the parent (``before``) with the update's score on the same held-out episodes
(``after``); the train and diagnose steps call these functions and nothing else decides. Pure module: no rclpy,
no torch.
"""

from __future__ import annotations

SCORE_DECIMALS = 9
"""Decimals a score difference is rounded to before it meets a tolerance. Scores are success shares (whole counts
over tens to thousands of episodes), so a real difference is never this small, while floating point puts
``0.4 - 0.1`` just below ``0.3``: a drop of exactly the tolerance would be refused without the rounding."""


def ppo_kept(before: float, after: float, eval_episodes: int) -> bool:
    """Return whether a round's PPO update replaces the policy it started from.

    PPO changes the network every family shares, so it is kept only for a strict gain on new scenes of its family:
    ``after > before`` (a tie keeps the parent). ``eval_episodes`` is ``LoopConfig.rl_eval_episodes``; 0 means
    there is no gate and the update is always kept.
    """
    return eval_episodes == 0 or after > before


def bc_kept(before: float, after: float, tolerance: float) -> bool:
    """Return whether a round's behaviour-cloning update replaces the policy it started from.

    Kept when its mean success over families is at most ``tolerance`` (``LoopConfig.bc_gate_tolerance``) below
    its parent's: ``after >= before - tolerance``, a drop of exactly ``tolerance`` included (the difference is
    rounded to :data:`SCORE_DECIMALS` decimals first). With ``tolerance`` 0 it must score at least as well as its
    parent.
    """
    return round(after - before + tolerance, SCORE_DECIMALS) >= 0.0


def critic_kept(before: float, after: float) -> bool:
    """Return whether a fine-tuned learned critic becomes the next version: ``after >= before``.

    ``before`` and ``after`` are the acting and the fine-tuned critic's held-out agreement with the grounded
    critic's failure modes (the same held-out examples for both); a tie is kept.
    """
    return after >= before
