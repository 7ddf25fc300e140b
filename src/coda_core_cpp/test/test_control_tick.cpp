// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// ControlTick: the holds in the Python path's order and words, clipping, the observation and its stage, joint
// order, object slots, a new instruction restarting the task, Python's float repr. Command-for-command agreement
// with coda_policy.control.PolicyController on a real policy is tested from Python.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "check.hpp"
#include "control_fixture.hpp"

using namespace control_fixture;

namespace {

std::vector<std::string_view> views(const std::vector<std::string>& names) {
  return std::vector<std::string_view>(names.begin(), names.end());
}

bool set_joints(ControlTick& t, double stamp, std::vector<double> q, std::string* why = nullptr) {
  const auto names = joint_names();
  return t.set_joints(stamp, views(names), q.data(), q.size(), why);
}

}  // namespace

TEST(holds_come_in_the_python_order_with_its_reasons) {
  auto t = make_tick();
  CHECK(t->tick(0.0).reason == "no policy version loaded");
  CHECK(t->tick(0.0).version.empty() && t->tick(0.0).hold);
  auto m = std::make_shared<ControlModel>(*model(actor(1), "v1"));
  m->has_instruction = false;
  t->set_model(m);
  const TickCommand& c = t->tick(0.0);
  CHECK(c.reason == "no instruction" && c.version == "v1" && c.sha256 == "v1-sha");
  t->set_model(model(actor(1), "v1"));
  CHECK(t->tick(10.0).reason == "waiting for joint_states");
  CHECK(set_joints(*t, 10.0, {0.1, 0.2, 0.02, 0.02}));
  CHECK(t->tick(10.0).reason == "waiting for object_states");
  t->set_objects(10.0, scene());
  CHECK(!t->tick(10.1).hold);
  CHECK(t->tick(10.6).reason == "joint_states stale: 0.600 s old > 0.5 s");
  CHECK(set_joints(*t, 10.7, {0.1, 0.2, 0.02, 0.02}));
  CHECK(t->tick(10.75).reason == "object_states stale: 0.750 s old > 0.5 s");
  t->set_objects(10.7, scene());
  CHECK(!t->tick(10.75).hold);
  // a NaN joint: the observation is not finite, and neither is the next one (its velocity uses the NaN position)
  CHECK(set_joints(*t, 10.8, {std::nan(""), 0.2, 0.02, 0.02}));
  CHECK(t->tick(10.8).reason == "non-finite input in the observation");
  CHECK(set_joints(*t, 10.9, {0.1, 0.2, 0.02, 0.02}));
  CHECK(t->tick(10.9).reason == "non-finite input in the observation");
  CHECK(!t->tick(10.9).hold);
  auto unfit = std::make_shared<ControlModel>(*model(actor(1), "v1"));
  unfit->instruction_fits = false;
  t->set_model(unfit);
  CHECK(t->tick(10.9).reason == "instruction embedding does not fit the policy");
  auto none = std::make_shared<ControlModel>(*model(nullptr, "v1"));
  none->unavailable = "the C++ action mean is not available: test";
  t->set_model(none);
  CHECK(t->tick(10.9).reason == "the C++ action mean is not available: test");
  const TickCommand& held = t->tick(10.9);
  CHECK(held.delta[0] == 0.0 && held.delta[1] == 0.0 && held.delta[2] == 0.0 && held.gripper == 0.0);
}

TEST(commands_are_clipped_to_the_arm_and_the_network) {
  for (double max_delta : {0.05, 0.01}) {
    auto t = make_tick(max_delta);
    t->set_model(model(actor(2, 50.0f), "v1", 1, 0.03));  // saturated: the action mean is 1 on every axis
    CHECK(set_joints(*t, 1.0, {0.0, 0.0, 0.01, 0.01}));
    t->set_objects(1.0, scene());
    const TickCommand& c = t->tick(1.0);
    CHECK(!c.hold);
    const double limit = std::min(max_delta, 0.03);
    for (double d : c.delta) CHECK_NEAR(d, limit, 1e-12);
    CHECK_NEAR(c.gripper, 1.0, 1e-6);
  }
}

TEST(the_observation_velocity_and_stage) {
  auto t = make_tick();
  t->set_model(model(actor(3), "v1"));
  t->set_objects(1.0, scene());
  CHECK(set_joints(*t, 1.0, {0.0, 0.0, 0.015, 0.02}));
  t->tick(1.0);
  std::vector<float> obs = t->observation();
  CHECK_NEAR(obs[0], 0.5f, 1e-7);  // 0.3 + 0.2 straight out along x at z = 0.5
  CHECK_NEAR(obs[2], 0.5f, 1e-7);
  CHECK(obs[3] == 0.0f && obs[4] == 0.0f && obs[5] == 0.0f);  // no previous tick
  CHECK_NEAR(obs[6], 0.035f, 1e-7);                           // finger opening
  // target (listed second) in slot 0, the distractor in slot 2 (slot 1 is the goal's, empty here)
  CHECK_NEAR(obs[kSlot0 + 0], 0.45f, 1e-7);
  CHECK(obs[kSlot0 + 10] == 1.0f && obs[kSlot0 + kSlotCols + 10] == 0.0f && obs[kSlot0 + 2 * kSlotCols + 10] == 1.0f);
  CHECK(obs[kSlot0 + 2 * kSlotCols + 6] == 2.0f);
  CHECK(obs[kStageCol] == 0.0f);
  // move the point onto the target: x = 0.45 needs cos(b) = 0.75 (z = 0.5 - 0.2 sin b); the stage advances
  const double b = std::acos(0.75);
  CHECK(set_joints(*t, 1.1, {0.1, b, 0.015, 0.02}));
  t->tick(1.1);
  obs = t->observation();
  const double x = 0.45 * std::cos(0.1);
  CHECK_NEAR(obs[3], static_cast<float>((x - 0.5) * 10.0), 1e-5);  // (ee - previous ee) * control rate
  CHECK_NEAR(obs[kStageCol], 0.0f, 0.0);  // not yet: the point is 0.11 m below and beside the target
  ObjectInput under{{x, 0.45 * std::sin(0.1), 0.5 - 0.2 * std::sin(b)}, {1, 0, 0}, 0, {0.02, 0.02, 0.02}, 1};
  t->set_objects(1.1, {under});
  t->tick(1.1);
  CHECK(t->observation()[kStageCol] == 1.0f);
  CHECK(t->tick(1.1).stage == 1);
  // a new instruction (new episode number) restarts the stage and forgets the previous position
  t->set_model(model(actor(3), "v1", 2));
  t->set_objects(1.2, scene());
  CHECK(t->tick(1.2).stage == 0);
  CHECK(t->observation()[3] == 0.0f);
}

TEST(joints_by_name_in_any_order_and_missing_ones_refused) {
  auto t = make_tick();
  t->set_model(model(actor(4), "v1"));
  t->set_objects(1.0, scene());
  const std::vector<std::string> names = {"finger_r", "extra", "j2", "finger_l", "j1"};
  const std::vector<double> q = {0.02, 9.0, 0.0, 0.01, 0.0};
  std::string why;
  CHECK(t->set_joints(1.0, views(names), q.data(), q.size(), &why));
  t->tick(1.0);
  CHECK_NEAR(t->observation()[0], 0.5f, 1e-7);
  CHECK_NEAR(t->observation()[6], 0.03f, 1e-7);
  const std::vector<std::string> short_names = {"j1", "j2", "finger_l"};
  CHECK(!t->set_joints(2.0, views(short_names), q.data(), 3, &why));
  CHECK(why == "joint_states lacks ['finger_r']");
  CHECK(!t->set_joints(2.0, views(names), q.data(), 4, &why));
  CHECK(why == "joint_states has 5 names but 4 positions");
  CHECK(t->tick(1.1).reason.empty());  // the refused messages left the last good state in place
}

TEST(objects_beyond_the_slots_and_second_targets_are_left_out) {
  auto t = make_tick();
  t->set_model(model(actor(5), "v1"));
  CHECK(set_joints(*t, 1.0, {0.0, 0.0, 0.01, 0.01}));
  std::vector<ObjectInput> objects;
  for (int i = 0; i < 4; ++i) objects.push_back(ObjectInput{{0.1 * i, 0, 0}, {0, 0, 0}, 0, {0.02, 0.02, 0.02}, 0});
  objects.push_back(ObjectInput{{0.9, 0, 0}, {1, 0, 0}, 1, {0.02, 0.02, 0.02}, 1});
  objects.push_back(ObjectInput{{0.8, 0, 0}, {1, 0, 0}, 1, {0.02, 0.02, 0.02}, 1});  // a second target
  objects.push_back(ObjectInput{{0.7, 0, 0}, {0, 1, 0}, 3, {0.1, 0.1, 0.05}, 2});
  t->set_objects(1.0, objects);
  t->tick(1.0);
  const std::vector<float>& obs = t->observation();
  CHECK_NEAR(obs[kSlot0], 0.9f, 1e-7);              // the first target
  CHECK_NEAR(obs[kSlot0 + kSlotCols], 0.7f, 1e-7);  // the goal
  CHECK(obs[kSlot0 + kSlotCols + 6] == 3.0f);
  CHECK_NEAR(obs[kSlot0 + 2 * kSlotCols], 0.0f, 1e-7);  // the first distractor; the others have no slot
}

TEST(python_float_repr_matches_python) {
  CHECK(python_float_repr(0.5) == "0.5");
  CHECK(python_float_repr(1.0) == "1.0");
  CHECK(python_float_repr(0.25) == "0.25");
  CHECK(python_float_repr(100.0) == "100.0");
  CHECK(python_float_repr(0.1) == "0.1");
  CHECK(python_float_repr(1e-05) == "1e-05");
  CHECK(python_float_repr(0.0001) == "0.0001");
  CHECK(python_float_repr(1e16) == "1e+16");
  CHECK(python_float_repr(1.5e-7) == "1.5e-07");
}

TEST(bad_settings_are_refused) {
  CHECK_THROWS(ControlTick(settings(), layout(), program(), chain(), {"j1", "j2", "f"}), std::invalid_argument);
  ObservationLayout l = layout();
  l.stage_col = kObsDim;
  CHECK_THROWS(ControlTick(settings(), l, program(), chain(), joint_names()), std::invalid_argument);
  TickSettings s = settings();
  s.max_input_age = 0.0;
  CHECK_THROWS(ControlTick(s, layout(), program(), chain(), joint_names()), std::invalid_argument);
  auto t = make_tick();
  CHECK_THROWS(t->set_model(nullptr), std::invalid_argument);
}

TEST_MAIN
