// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// ObjectTokenActor: size checks, and the properties the policy relies on (object-order invariance, absent
// slots ignored, bounded output, NaN for inputs it cannot use). Agreement with the NumPy and torch forward
// of a real policy network is tested from Python (src/coda_policy/test/test_control.py).
#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "coda_core/actor.hpp"

using coda_core::ActorSpec;
using coda_core::DenseLayer;
using coda_core::NormLayer;
using coda_core::ObjectTokenActor;
using coda_core::TokenBlock;

namespace {

constexpr int kSlots = 3, kShapes = 3, kStages = 4, kD = 8, kHeads = 2;
// Observation: ee (0..2), gripper (3), slots of 11 columns (pos 3, rgb 3, shape 1, size 3, present 1), stage.
constexpr int kSlot0 = 4, kSlotCols = 11, kStageCol = kSlot0 + kSlots * kSlotCols, kObsDim = kStageCol + 1;

DenseLayer random_dense(std::mt19937& rng, std::size_t in, std::size_t out) {
  std::normal_distribution<float> n(0.0f, 0.5f);
  DenseLayer l;
  l.in = in;
  l.out = out;
  l.weight.resize(in * out);
  l.bias.resize(out);
  for (float& w : l.weight) w = n(rng);
  for (float& b : l.bias) b = n(rng);
  return l;
}

NormLayer random_norm(std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  NormLayer n;
  for (int i = 0; i < kD; ++i) {
    n.gain.push_back(u(rng));
    n.bias.push_back(u(rng) - 1.0f);
  }
  return n;
}

ActorSpec random_spec(unsigned seed) {
  std::mt19937 rng(seed);
  ActorSpec s;
  s.obs_dim = kObsDim;
  s.d_model = kD;
  s.num_heads = kHeads;
  s.num_shapes = kShapes;
  s.max_stages = kStages;
  for (int k = 0; k < kSlots; ++k) {
    const int b = kSlot0 + k * kSlotCols;
    for (int c = 0; c < 3; ++c) {
      s.pos_ix.push_back(b + c);
      s.rgb_ix.push_back(b + 3 + c);
      s.size_ix.push_back(b + 7 + c);
    }
    s.shape_ix.push_back(b + 6);
    s.present_ix.push_back(b + 10);
  }
  s.ee_ix = {0, 1, 2};
  s.proprio_ix = {0, 1, 2, 3};
  s.stage_col = kStageCol;
  s.token1 = random_dense(rng, 12 + kShapes, 16);
  s.token2 = random_dense(rng, 16, kD);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < kD; ++i) {
    s.film_scale.push_back(1.0f + 0.2f * u(rng));
    s.film_shift.push_back(0.2f * u(rng));
  }
  s.blocks.push_back(TokenBlock{random_norm(rng), random_dense(rng, kD, 3 * kD), random_dense(rng, kD, kD),
                                random_norm(rng), random_dense(rng, kD, 12), random_dense(rng, 12, kD)});
  s.lang = {0.3f, -0.2f, 0.1f};
  const int queries = 2;
  for (int i = 0; i < queries * kD; ++i) s.query_base.push_back(u(rng));
  s.proprio = random_dense(rng, 4 + kStages + 1, kD);
  s.cross_q = random_dense(rng, kD, kD);
  s.cross_kv = random_dense(rng, kD, 2 * kD);
  s.cross_out = random_dense(rng, kD, kD);
  const std::size_t head_in = s.lang.size() + 4 + kStages + 1 + queries * kD + queries * 6;
  s.head = {random_dense(rng, head_in, 10), random_dense(rng, 10, 4)};
  return s;
}

std::vector<float> random_obs(std::mt19937& rng, int present) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> obs(kObsDim);
  for (float& v : obs) v = u(rng);
  for (int k = 0; k < kSlots; ++k) {
    obs[kSlot0 + k * kSlotCols + 6] = static_cast<float>(k % kShapes);
    obs[kSlot0 + k * kSlotCols + 10] = k < present ? 1.0f : 0.0f;
  }
  obs[kStageCol] = 1.0f;
  return obs;
}

std::vector<float> act(const ObjectTokenActor& a, const std::vector<float>& obs) {
  std::vector<float> out(a.action_dim());
  a.forward(obs.data(), out.data());
  return out;
}

std::string error_of(ActorSpec s) {
  try {
    ObjectTokenActor a(std::move(s));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(sizes_and_bounded_output) {
  ObjectTokenActor a(random_spec(1));
  CHECK(a.obs_dim() == static_cast<std::size_t>(kObsDim));
  CHECK(a.action_dim() == 4u);
  CHECK(a.num_slots() == static_cast<std::size_t>(kSlots));
  std::mt19937 rng(2);
  for (int i = 0; i < 20; ++i) {
    for (float v : act(a, random_obs(rng, 2))) CHECK(std::isfinite(v) && v >= -1.0f && v <= 1.0f);
  }
}

TEST(zero_weights_give_tanh_of_the_last_bias) {
  ActorSpec s = random_spec(3);
  for (DenseLayer& l : s.head) std::fill(l.weight.begin(), l.weight.end(), 0.0f);
  s.head.back().bias = {0.5f, -1.0f, 0.0f, 2.0f};
  ObjectTokenActor a(std::move(s));
  std::mt19937 rng(4);
  const std::vector<float> out = act(a, random_obs(rng, 3));
  CHECK_NEAR(out[0], std::tanh(0.5f), 1e-7);
  CHECK_NEAR(out[1], std::tanh(-1.0f), 1e-7);
  CHECK_NEAR(out[2], 0.0, 1e-7);
  CHECK_NEAR(out[3], std::tanh(2.0f), 1e-7);
}

TEST(object_order_does_not_matter) {
  ObjectTokenActor a(random_spec(5));
  std::mt19937 rng(6);
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<float> obs = random_obs(rng, 3);
    std::vector<float> swapped = obs;  // slots 0 and 2 exchanged
    for (int c = 0; c < kSlotCols; ++c) std::swap(swapped[kSlot0 + c], swapped[kSlot0 + 2 * kSlotCols + c]);
    const auto x = act(a, obs), y = act(a, swapped);
    for (std::size_t j = 0; j < x.size(); ++j) CHECK_NEAR(x[j], y[j], 1e-5);
  }
}

TEST(absent_slots_are_ignored) {
  ObjectTokenActor a(random_spec(7));
  std::mt19937 rng(8);
  std::vector<float> obs = random_obs(rng, 2);
  const auto before = act(a, obs);
  for (int c = 0; c < 10; ++c) obs[kSlot0 + 2 * kSlotCols + c] = 7.0f;  // everything but the presence flag
  const auto after = act(a, obs);
  for (std::size_t j = 0; j < before.size(); ++j) CHECK(before[j] == after[j]);
  obs[kSlot0 + 2 * kSlotCols + 10] = 1.0f;  // now present: the output changes
  const auto present = act(a, obs);
  bool changed = false;
  for (std::size_t j = 0; j < before.size(); ++j) changed |= std::fabs(before[j] - present[j]) > 1e-6f;
  CHECK(changed);
}

TEST(stage_index_changes_the_action) {
  ObjectTokenActor a(random_spec(9));
  std::mt19937 rng(10);
  std::vector<float> obs = random_obs(rng, 2);
  obs[kStageCol] = 0.0f;
  const auto s0 = act(a, obs);
  obs[kStageCol] = 99.0f;  // clipped to the last stage
  const auto s_last = act(a, obs);
  obs[kStageCol] = static_cast<float>(kStages);
  const auto s_max = act(a, obs);
  bool changed = false;
  for (std::size_t j = 0; j < s0.size(); ++j) {
    changed |= std::fabs(s0[j] - s_last[j]) > 1e-6f;
    CHECK(s_last[j] == s_max[j]);
  }
  CHECK(changed);
}

TEST(unusable_inputs_give_nan) {
  ObjectTokenActor a(random_spec(11));
  std::mt19937 rng(12);
  std::vector<float> obs = random_obs(rng, 2);
  obs[1] = std::nanf("");
  for (float v : act(a, obs)) CHECK(std::isnan(v));
  const auto none_present = act(a, random_obs(rng, 0));
  for (float v : none_present) CHECK(std::isnan(v));
}

TEST(sizes_are_checked_and_named) {
  ActorSpec s = random_spec(13);
  s.token1.in += 1;
  s.token1.weight.resize(s.token1.in * s.token1.out);
  CHECK(error_of(s).find("ActorSpec.token1.in") != std::string::npos);
  s = random_spec(13);
  s.pos_ix[4] = kObsDim;
  CHECK(error_of(s).find("ActorSpec.pos_ix") != std::string::npos);
  s = random_spec(13);
  s.num_heads = 3;
  CHECK(error_of(s).find("ActorSpec.num_heads") != std::string::npos);
  s = random_spec(13);
  s.blocks[0].ff2.bias.pop_back();
  CHECK(error_of(s).find("ActorSpec.blocks[0].ff2.bias") != std::string::npos);
  s = random_spec(13);
  std::mt19937 other(1);
  s.head[0] = random_dense(other, 5, 10);
  CHECK(error_of(s).find("ActorSpec.head[0].in") != std::string::npos);
  s = random_spec(13);
  s.query_base.pop_back();
  CHECK(error_of(s).find("ActorSpec.query_base") != std::string::npos);
  CHECK(error_of(random_spec(13)).empty());
}

int main() { return coda_test::run_all(); }
