// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>

namespace coda_core {

// Generalised advantage estimation over a (T, n_envs) rollout, row-major (step-major).
//
// Semantics are those of Stable-Baselines3's RolloutBuffer.compute_returns_and_advantage:
// for the last step the bootstrap is `last_values` masked by `1 - dones`; for every earlier
// step t the bootstrap is values[t + 1] masked by `1 - episode_starts[t + 1]`. Time-limit
// truncation is the caller's job (add gamma * V(final_obs) to the reward before storing).
// All arithmetic is float32 in the same order as the reference implementation.
// Outputs may not alias inputs. `returns = advantages + values`.
void compute_gae(const float* rewards, const float* values, const float* episode_starts,
                 const float* last_values, const float* dones, std::size_t num_steps,
                 std::size_t num_envs, double gamma, double gae_lambda, float* advantages,
                 float* returns);

}  // namespace coda_core
