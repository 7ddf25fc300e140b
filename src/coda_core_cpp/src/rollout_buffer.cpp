// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_core/rollout_buffer.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "coda_core/gae.hpp"

namespace coda_core {

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t SplitMix64::below(std::uint64_t bound) {
  // Rejection sampling on the top of the range: uniform for every bound.
  const std::uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
  std::uint64_t x = next();
  while (x >= limit) x = next();
  return x % bound;
}

std::vector<std::int64_t> seeded_permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int64_t>(i);
  SplitMix64 rng(seed);
  for (std::size_t i = n; i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(out[i - 1], out[j]);
  }
  return out;
}

namespace {
std::size_t checked_product(std::size_t a, std::size_t b, const char* what) {
  if (a != 0 && b > SIZE_MAX / a) throw std::length_error(std::string("RolloutBuffer: ") + what + " is too large");
  return a * b;
}
}  // namespace

RolloutBuffer::RolloutBuffer(std::size_t buffer_size, std::size_t n_envs, std::size_t obs_dim,
                             std::size_t action_dim)
    : buffer_size_(buffer_size), n_envs_(n_envs), obs_dim_(obs_dim), action_dim_(action_dim) {
  if (buffer_size == 0) throw std::invalid_argument("RolloutBuffer: buffer_size must be >= 1, got 0");
  if (n_envs == 0) throw std::invalid_argument("RolloutBuffer: n_envs must be >= 1, got 0");
  if (obs_dim == 0) throw std::invalid_argument("RolloutBuffer: obs_dim must be >= 1, got 0");
  if (action_dim == 0) throw std::invalid_argument("RolloutBuffer: action_dim must be >= 1, got 0");
  const std::size_t steps = checked_product(buffer_size, n_envs, "buffer_size * n_envs");
  observations_.assign(checked_product(steps, obs_dim, "buffer_size * n_envs * obs_dim"), 0.0f);
  actions_.assign(checked_product(steps, action_dim, "buffer_size * n_envs * action_dim"), 0.0f);
  rewards_.assign(steps, 0.0f);
  episode_starts_.assign(steps, 0.0f);
  values_.assign(steps, 0.0f);
  log_probs_.assign(steps, 0.0f);
  advantages_.assign(steps, 0.0f);
  returns_.assign(steps, 0.0f);
  stages_.assign(steps, 0);
}

void RolloutBuffer::add(const float* obs, const float* action, const float* reward,
                        const float* episode_start, const float* value, const float* log_prob,
                        const std::int32_t* stage) {
  if (full()) {
    throw std::out_of_range("RolloutBuffer.add: the buffer is full (buffer_size=" +
                            std::to_string(buffer_size_) + "); call reset() before adding more steps");
  }
  const std::size_t row = pos_ * n_envs_;
  std::memcpy(observations_.data() + row * obs_dim_, obs, n_envs_ * obs_dim_ * sizeof(float));
  std::memcpy(actions_.data() + row * action_dim_, action, n_envs_ * action_dim_ * sizeof(float));
  std::memcpy(rewards_.data() + row, reward, n_envs_ * sizeof(float));
  std::memcpy(episode_starts_.data() + row, episode_start, n_envs_ * sizeof(float));
  std::memcpy(values_.data() + row, value, n_envs_ * sizeof(float));
  std::memcpy(log_probs_.data() + row, log_prob, n_envs_ * sizeof(float));
  std::memcpy(stages_.data() + row, stage, n_envs_ * sizeof(std::int32_t));
  ++pos_;
}

void RolloutBuffer::reset() {
  for (auto* v : {&observations_, &actions_, &rewards_, &episode_starts_, &values_, &log_probs_,
                  &advantages_, &returns_}) {
    std::fill(v->begin(), v->end(), 0.0f);
  }
  std::fill(stages_.begin(), stages_.end(), 0);
  pos_ = 0;
}

void RolloutBuffer::compute_returns_and_advantage(const float* last_values, const float* dones,
                                                  double gamma, double gae_lambda) {
  if (pos_ == 0) throw std::logic_error("RolloutBuffer.compute_gae: the buffer is empty; add steps first");
  compute_gae(rewards_.data(), values_.data(), episode_starts_.data(), last_values, dones, pos_, n_envs_,
              gamma, gae_lambda, advantages_.data(), returns_.data());
}

void RolloutBuffer::gather(const std::int64_t* indices, std::size_t count, float* obs, float* actions,
                           float* values, float* log_probs, float* advantages, float* returns,
                           std::int32_t* stages) const {
  const std::int64_t limit = static_cast<std::int64_t>(pos_ * n_envs_);
  for (std::size_t k = 0; k < count; ++k) {
    if (indices[k] < 0 || indices[k] >= limit) {
      throw std::out_of_range("RolloutBuffer.gather: index " + std::to_string(indices[k]) +
                              " is outside the " + std::to_string(limit) + " stored transitions");
    }
  }
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t i = static_cast<std::size_t>(indices[k]);
    if (obs) std::memcpy(obs + k * obs_dim_, observations_.data() + i * obs_dim_, obs_dim_ * sizeof(float));
    if (actions) {
      std::memcpy(actions + k * action_dim_, actions_.data() + i * action_dim_, action_dim_ * sizeof(float));
    }
    if (values) values[k] = values_[i];
    if (log_probs) log_probs[k] = log_probs_[i];
    if (advantages) advantages[k] = advantages_[i];
    if (returns) returns[k] = returns_[i];
    if (stages) stages[k] = stages_[i];
  }
}

}  // namespace coda_core
