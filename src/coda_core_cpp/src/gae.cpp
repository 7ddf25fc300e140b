// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_core/gae.hpp"

#include <vector>

namespace coda_core {

void compute_gae(const float* rewards, const float* values, const float* episode_starts,
                 const float* last_values, const float* dones, std::size_t num_steps,
                 std::size_t num_envs, double gamma, double gae_lambda, float* advantages,
                 float* returns) {
  if (num_steps == 0 || num_envs == 0) return;
  // As in the reference: gamma is rounded to float32 once; gamma * lambda is formed in double.
  const float g = static_cast<float>(gamma);
  const float gl = static_cast<float>(gamma * gae_lambda);
  // Running advantage per env; the loop over envs is innermost so it vectorises.
  std::vector<float> last_gae(num_envs, 0.0f);
  float* lg = last_gae.data();
  {
    const std::size_t t = num_steps - 1;
    const float* r = rewards + t * num_envs;
    const float* v = values + t * num_envs;
    float* adv = advantages + t * num_envs;
    for (std::size_t e = 0; e < num_envs; ++e) {
      const float next_non_terminal = 1.0f - dones[e];
      const float delta = r[e] + g * last_values[e] * next_non_terminal - v[e];
      lg[e] = delta + gl * next_non_terminal * 0.0f;
      adv[e] = lg[e];
    }
  }
  for (std::size_t step = num_steps - 1; step-- > 0;) {
    const float* r = rewards + step * num_envs;
    const float* v = values + step * num_envs;
    const float* nv = values + (step + 1) * num_envs;
    const float* ns = episode_starts + (step + 1) * num_envs;
    float* adv = advantages + step * num_envs;
    for (std::size_t e = 0; e < num_envs; ++e) {
      const float next_non_terminal = 1.0f - ns[e];
      const float delta = r[e] + g * nv[e] * next_non_terminal - v[e];
      lg[e] = delta + gl * next_non_terminal * lg[e];
      adv[e] = lg[e];
    }
  }
  const std::size_t total = num_steps * num_envs;
  for (std::size_t i = 0; i < total; ++i) returns[i] = advantages[i] + values[i];
}

}  // namespace coda_core
