// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace coda_core {

// Deterministic 64-bit generator (splitmix64): the same seed gives the same stream everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  // Uniform integer in [0, bound), bound > 0, without modulo bias.
  std::uint64_t below(std::uint64_t bound);

 private:
  std::uint64_t state_;
};

// A seeded uniformly random permutation of 0..n-1 (Fisher-Yates driven by SplitMix64).
std::vector<std::int64_t> seeded_permutation(std::size_t n, std::uint64_t seed);

// Preallocated on-policy rollout storage, laid out (buffer_size, n_envs, ...), row-major.
//
// float32: observations (T, E, obs_dim), actions (T, E, action_dim), rewards, episode_starts,
// values, log_probs, advantages, returns (T, E); int32: stages (T, E). Storage is allocated once
// and never moves, so pointers returned by the accessors stay valid for the buffer's lifetime.
class RolloutBuffer {
 public:
  RolloutBuffer(std::size_t buffer_size, std::size_t n_envs, std::size_t obs_dim,
                std::size_t action_dim);

  // Store one step for every env. Each pointer holds n_envs rows (obs_dim / action_dim wide for
  // obs / action). Throws std::out_of_range when the buffer is full.
  void add(const float* obs, const float* action, const float* reward, const float* episode_start,
           const float* value, const float* log_prob, const std::int32_t* stage);

  // Zero every array and rewind to step 0.
  void reset();

  // GAE over the steps stored so far (all buffer_size of them once full); see compute_gae().
  // last_values / dones hold n_envs entries. Throws std::logic_error when the buffer is empty.
  void compute_returns_and_advantage(const float* last_values, const float* dones, double gamma,
                                     double gae_lambda);

  // Copy the transitions at flat indices (step * n_envs + env) into contiguous outputs.
  // Any output may be null to skip it. Indices must be < size() * n_envs (checked; throws).
  void gather(const std::int64_t* indices, std::size_t count, float* obs, float* actions,
              float* values, float* log_probs, float* advantages, float* returns,
              std::int32_t* stages) const;

  std::size_t buffer_size() const { return buffer_size_; }
  std::size_t n_envs() const { return n_envs_; }
  std::size_t obs_dim() const { return obs_dim_; }
  std::size_t action_dim() const { return action_dim_; }
  std::size_t pos() const { return pos_; }
  bool full() const { return pos_ == buffer_size_; }

  float* observations() { return observations_.data(); }
  float* actions() { return actions_.data(); }
  float* rewards() { return rewards_.data(); }
  float* episode_starts() { return episode_starts_.data(); }
  float* values() { return values_.data(); }
  float* log_probs() { return log_probs_.data(); }
  float* advantages() { return advantages_.data(); }
  float* returns() { return returns_.data(); }
  std::int32_t* stages() { return stages_.data(); }

 private:
  std::size_t buffer_size_, n_envs_, obs_dim_, action_dim_;
  std::size_t pos_ = 0;
  std::vector<float> observations_, actions_, rewards_, episode_starts_, values_, log_probs_,
      advantages_, returns_;
  std::vector<std::int32_t> stages_;
};

}  // namespace coda_core
