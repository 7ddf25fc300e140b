// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// A small world for the control tick's C++ tests: a two-hinge arm, an observation of three object slots, a
// one-stage program and random action means laid out like the policy's.
#pragma once

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "coda_core/actor.hpp"
#include "coda_core/control_tick.hpp"

namespace control_fixture {

using namespace coda_core;

// ee 0..2, velocity 3..5, gripper 6, three slots of 11 columns from 7, stage index last
constexpr std::size_t kSlots = 3, kSlot0 = 7, kSlotCols = 11, kStageCol = kSlot0 + kSlots * kSlotCols,
                      kObsDim = kStageCol + 1;
constexpr int kShapes = 3, kStages = 2, kD = 8;

inline ObservationLayout layout() {
  ObservationLayout l;
  l.obs_dim = kObsDim;
  for (std::size_t k = 0; k < kSlots; ++k) l.slot_base.push_back(kSlot0 + k * kSlotCols);
  l.stage_col = kStageCol;
  return l;
}

// base at (0, 0, 0.5) turning about z, an upper arm of 0.3 m turning about y, the point 0.2 m further
inline SerialChain chain() {
  ChainBody base;
  base.pos = {0.0, 0.0, 0.5};
  base.hinges.push_back(ChainHinge{{0, 0, 0}, {0, 0, 1}, 0.0, 0});
  ChainBody upper;
  upper.pos = {0.3, 0.0, 0.0};
  upper.hinges.push_back(ChainHinge{{0, 0, 0}, {0, 1, 0}, 0.0, 1});
  return SerialChain({base, upper}, {0.2, 0.0, 0.0}, 2);
}

inline std::vector<std::string> joint_names() { return {"j1", "j2", "finger_l", "finger_r"}; }

inline PotentialProgram program() {
  return PotentialProgram::compile(
      "stage reach:\n"
      "  progress = 1 - clip(dist(ee_pos, target_pos) / 0.3, 0, 1)\n"
      "  done     = dist(ee_pos, target_pos) < 0.05\n",
      {{"ee_pos", 0, 3}, {"target_pos", static_cast<std::int64_t>(kSlot0), 3}});
}

inline TickSettings settings(double max_delta = 0.05) {
  TickSettings s;
  s.control_rate_hz = 10.0;
  s.max_input_age = 0.5;
  s.max_delta = max_delta;
  return s;
}

inline std::unique_ptr<ControlTick> make_tick(double max_delta = 0.05) {
  return std::make_unique<ControlTick>(settings(max_delta), layout(), program(), chain(), joint_names());
}

inline DenseLayer dense(std::mt19937& rng, std::size_t in, std::size_t out) {
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

inline NormLayer norm() {
  NormLayer n;
  n.gain.assign(kD, 1.0f);
  n.bias.assign(kD, 0.0f);
  return n;
}

// A random action mean over this layout; `bias` is added to the last layer's bias (large: saturated actions).
inline std::shared_ptr<const ObjectTokenActor> actor(unsigned seed, float bias = 0.0f) {
  std::mt19937 rng(seed);
  ActorSpec s;
  s.obs_dim = kObsDim;
  s.d_model = kD;
  s.num_heads = 2;
  s.num_shapes = kShapes;
  s.max_stages = kStages;
  for (std::size_t k = 0; k < kSlots; ++k) {
    const int b = static_cast<int>(kSlot0 + k * kSlotCols);
    for (int c = 0; c < 3; ++c) {
      s.pos_ix.push_back(b + c);
      s.rgb_ix.push_back(b + 3 + c);
      s.size_ix.push_back(b + 7 + c);
    }
    s.shape_ix.push_back(b + 6);
    s.present_ix.push_back(b + 10);
  }
  s.ee_ix = {0, 1, 2};
  s.proprio_ix = {0, 1, 2, 3, 4, 5, 6};
  s.stage_col = static_cast<int>(kStageCol);
  s.token1 = dense(rng, 12 + kShapes, 16);
  s.token2 = dense(rng, 16, kD);
  s.film_scale.assign(kD, 1.0f);
  s.film_shift.assign(kD, 0.0f);
  s.blocks.push_back(TokenBlock{norm(), dense(rng, kD, 3 * kD), dense(rng, kD, kD), norm(), dense(rng, kD, 12),
                                dense(rng, 12, kD)});
  s.lang = {0.3f, -0.2f};
  std::normal_distribution<float> n(0.0f, 0.5f);
  for (int i = 0; i < 2 * kD; ++i) s.query_base.push_back(n(rng));
  s.proprio = dense(rng, 7 + kStages + 1, kD);
  s.cross_q = dense(rng, kD, kD);
  s.cross_kv = dense(rng, kD, 2 * kD);
  s.cross_out = dense(rng, kD, kD);
  s.head = {dense(rng, s.lang.size() + 7 + kStages + 1 + 2 * kD + 2 * 6, 10), dense(rng, 10, 4)};
  for (float& b : s.head.back().bias) b += bias;
  return std::make_shared<const ObjectTokenActor>(std::move(s));
}

inline std::shared_ptr<const ControlModel> model(std::shared_ptr<const ObjectTokenActor> actor, const std::string& version,
                                                 std::uint64_t episode = 1, double net_max_delta = 0.05) {
  auto m = std::make_shared<ControlModel>();
  m->has_policy = true;
  m->has_instruction = true;
  m->episode = episode;
  m->version = version;
  m->sha256 = version + "-sha";
  m->net_max_delta = net_max_delta;
  m->actor = std::move(actor);
  return m;
}

inline std::vector<ObjectInput> scene() {
  ObjectInput target{{0.45, 0.05, 0.42}, {0.9, 0.0, 0.0}, 0, {0.02, 0.02, 0.02}, 1};
  ObjectInput other{{0.40, -0.10, 0.43}, {0.0, 0.0, 0.9}, 2, {0.025, 0.025, 0.025}, 0};
  return {other, target};
}

}  // namespace control_fixture
