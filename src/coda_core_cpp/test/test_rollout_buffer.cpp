// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "check.hpp"
#include "coda_core/gae.hpp"
#include "coda_core/rollout_buffer.hpp"

using coda_core::RolloutBuffer;

namespace {
void add_step(RolloutBuffer& b, int step) {
  const std::size_t E = b.n_envs();
  std::vector<float> obs(E * b.obs_dim()), act(E * b.action_dim()), r(E), es(E), v(E), lp(E);
  std::vector<std::int32_t> st(E);
  for (std::size_t e = 0; e < E; ++e) {
    for (std::size_t k = 0; k < b.obs_dim(); ++k) obs[e * b.obs_dim() + k] = step * 100.0f + e * 10.0f + k;
    for (std::size_t k = 0; k < b.action_dim(); ++k) act[e * b.action_dim() + k] = -(step * 100.0f + e * 10.0f + k);
    r[e] = step + 0.5f * e;
    es[e] = (step % 3 == 0) ? 1.0f : 0.0f;
    v[e] = 0.1f * step;
    lp[e] = -0.01f * e;
    st[e] = step % 4;
  }
  b.add(obs.data(), act.data(), r.data(), es.data(), v.data(), lp.data(), st.data());
}
}  // namespace

TEST(stores_steps_in_step_major_layout) {
  RolloutBuffer b(4, 2, 3, 2);
  add_step(b, 0);
  add_step(b, 1);
  CHECK(b.pos() == 2);
  CHECK(!b.full());
  // step 1, env 1, obs k=2 -> offset ((1 * 2) + 1) * 3 + 2
  CHECK(b.observations()[(1 * 2 + 1) * 3 + 2] == 112.0f);
  CHECK(b.actions()[(1 * 2 + 0) * 2 + 1] == -101.0f);
  CHECK(b.rewards()[1 * 2 + 1] == 1.5f);
  CHECK(b.stages()[1 * 2 + 0] == 1);
  CHECK(b.episode_starts()[0] == 1.0f);
  CHECK(b.episode_starts()[2] == 0.0f);
}

TEST(overflow_throws_and_reset_rewinds_and_zeroes) {
  RolloutBuffer b(2, 1, 1, 1);
  add_step(b, 1);
  add_step(b, 2);
  CHECK(b.full());
  CHECK_THROWS(add_step(b, 3), std::out_of_range);
  b.reset();
  CHECK(b.pos() == 0);
  CHECK(b.rewards()[0] == 0.0f && b.observations()[1] == 0.0f && b.stages()[1] == 0);
  add_step(b, 5);
  CHECK(b.pos() == 1);
}

TEST(invalid_sizes_are_rejected) {
  CHECK_THROWS(RolloutBuffer(0, 1, 1, 1), std::invalid_argument);
  CHECK_THROWS(RolloutBuffer(1, 0, 1, 1), std::invalid_argument);
  CHECK_THROWS(RolloutBuffer(1, 1, 0, 1), std::invalid_argument);
  CHECK_THROWS(RolloutBuffer(1, 1, 1, 0), std::invalid_argument);
  CHECK_THROWS(RolloutBuffer(SIZE_MAX / 2, 4, 1, 1), std::length_error);
}

TEST(method_gae_equals_free_function_over_stored_steps) {
  RolloutBuffer b(5, 3, 2, 1);
  for (int t = 0; t < 4; ++t) add_step(b, t);
  CHECK_THROWS(RolloutBuffer(1, 1, 1, 1).compute_returns_and_advantage(nullptr, nullptr, 0.9, 0.9), std::logic_error);
  const std::vector<float> lv = {0.3f, -0.2f, 1.0f}, d = {0.0f, 1.0f, 0.0f};
  b.compute_returns_and_advantage(lv.data(), d.data(), 0.97, 0.9);
  std::vector<float> adv(12), ret(12);
  coda_core::compute_gae(b.rewards(), b.values(), b.episode_starts(), lv.data(), d.data(), 4, 3, 0.97, 0.9,
                         adv.data(), ret.data());
  for (int i = 0; i < 12; ++i) {
    CHECK(adv[i] == b.advantages()[i]);
    CHECK(ret[i] == b.returns()[i]);
  }
  CHECK(b.advantages()[12] == 0.0f);  // the unfilled step is untouched
}

TEST(seeded_permutation_is_a_deterministic_permutation) {
  const auto p1 = coda_core::seeded_permutation(1000, 42);
  const auto p2 = coda_core::seeded_permutation(1000, 42);
  const auto p3 = coda_core::seeded_permutation(1000, 43);
  CHECK(p1 == p2);
  CHECK(p1 != p3);
  auto sorted = p1;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 1000; ++i) CHECK(sorted[i] == i);
  int fixed = 0;
  for (std::int64_t i = 0; i < 1000; ++i) fixed += p1[i] == i;
  CHECK(fixed < 20);  // a shuffle, not the identity (expected ~1 fixed point)
  CHECK(coda_core::seeded_permutation(0, 1).empty());
}

TEST(gather_copies_selected_transitions_and_checks_indices) {
  RolloutBuffer b(3, 2, 2, 1);
  for (int t = 0; t < 3; ++t) add_step(b, t);
  const std::int64_t idx[2] = {5, 0};  // step 2 env 1, step 0 env 0
  float obs[4], act[2], v[2], lp[2], adv[2], ret[2];
  std::int32_t st[2];
  b.gather(idx, 2, obs, act, v, lp, adv, ret, st);
  CHECK(obs[0] == 210.0f && obs[1] == 211.0f && obs[2] == 0.0f && obs[3] == 1.0f);
  CHECK(act[0] == -210.0f);
  CHECK(st[0] == 2 && st[1] == 0);
  CHECK_NEAR(v[0], 0.2, 1e-6);
  CHECK_NEAR(lp[0], -0.01, 1e-6);
  const std::int64_t bad[1] = {6};
  CHECK_THROWS(b.gather(bad, 1, obs, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), std::out_of_range);
  const std::int64_t neg[1] = {-1};
  CHECK_THROWS(b.gather(neg, 1, obs, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), std::out_of_range);
}

TEST_MAIN
