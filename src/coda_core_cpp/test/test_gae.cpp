// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include <random>
#include <vector>

#include "check.hpp"
#include "coda_core/gae.hpp"

namespace {

// Direct transcription of the recursion, in double, one env at a time.
void naive_gae(const std::vector<float>& r, const std::vector<float>& v, const std::vector<float>& es,
               const std::vector<float>& lv, const std::vector<float>& d, int T, int E, double gamma, double lam,
               std::vector<double>& adv) {
  adv.assign(static_cast<std::size_t>(T * E), 0.0);
  for (int e = 0; e < E; ++e) {
    double last = 0.0;
    for (int t = T - 1; t >= 0; --t) {
      const double nnt = t == T - 1 ? 1.0 - d[e] : 1.0 - es[(t + 1) * E + e];
      const double nv = t == T - 1 ? lv[e] : v[(t + 1) * E + e];
      const double delta = r[t * E + e] + gamma * nv * nnt - v[t * E + e];
      last = delta + gamma * lam * nnt * last;
      adv[t * E + e] = last;
    }
  }
}

}  // namespace

TEST(hand_computed_single_env) {
  // T = 3, no resets, not done: bootstrap from last_values.
  const std::vector<float> r = {1.0f, 0.0f, 2.0f}, v = {0.5f, 0.25f, 1.0f}, es = {1.0f, 0.0f, 0.0f};
  const float lv = 4.0f, d = 0.0f;
  std::vector<float> adv(3), ret(3);
  coda_core::compute_gae(r.data(), v.data(), es.data(), &lv, &d, 3, 1, 0.5, 0.5, adv.data(), ret.data());
  // delta2 = 2 + 0.5*4 - 1 = 3; A2 = 3
  // delta1 = 0 + 0.5*1 - 0.25 = 0.25; A1 = 0.25 + 0.25*3 = 1.0
  // delta0 = 1 + 0.5*0.25 - 0.5 = 0.625; A0 = 0.625 + 0.25*1.0 = 0.875
  CHECK_NEAR(adv[2], 3.0, 1e-6);
  CHECK_NEAR(adv[1], 1.0, 1e-6);
  CHECK_NEAR(adv[0], 0.875, 1e-6);
  for (int i = 0; i < 3; ++i) CHECK_NEAR(ret[i], adv[i] + v[i], 1e-6);
}

TEST(episode_start_cuts_the_bootstrap_and_done_masks_last_value) {
  const std::vector<float> r = {1.0f, 1.0f}, v = {10.0f, 20.0f}, es = {0.0f, 1.0f};
  const float lv = 100.0f, d = 1.0f;
  std::vector<float> adv(2), ret(2);
  coda_core::compute_gae(r.data(), v.data(), es.data(), &lv, &d, 2, 1, 0.9, 0.8, adv.data(), ret.data());
  CHECK_NEAR(adv[1], 1.0 - 20.0, 1e-5);  // done: no bootstrap from last_values
  CHECK_NEAR(adv[0], 1.0 - 10.0, 1e-5);  // next step starts a new episode: no bootstrap, no carry
}

TEST(matches_naive_recursion_on_random_rollouts) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::bernoulli_distribution reset(0.1);
  for (int trial = 0; trial < 20; ++trial) {
    const int T = 1 + trial * 7, E = 1 + trial % 5;
    std::vector<float> r(T * E), v(T * E), es(T * E), lv(E), d(E);
    for (auto& x : r) x = u(rng);
    for (auto& x : v) x = u(rng);
    for (auto& x : es) x = reset(rng) ? 1.0f : 0.0f;
    for (auto& x : lv) x = u(rng);
    for (auto& x : d) x = reset(rng) ? 1.0f : 0.0f;
    std::vector<float> adv(T * E), ret(T * E);
    coda_core::compute_gae(r.data(), v.data(), es.data(), lv.data(), d.data(), T, E, 0.99, 0.95, adv.data(),
                           ret.data());
    std::vector<double> ref;
    naive_gae(r, v, es, lv, d, T, E, 0.99, 0.95, ref);
    for (int i = 0; i < T * E; ++i) {
      CHECK_NEAR(adv[i], ref[i], 1e-4);
      CHECK_NEAR(ret[i], ref[i] + v[i], 1e-4);
    }
  }
}

TEST(empty_rollout_is_a_no_op) {
  float out = 42.0f;
  coda_core::compute_gae(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, 0.99, 0.95, &out, &out);
  CHECK(out == 42.0f);
}

TEST_MAIN
