// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// SerialChain against closed-form kinematics of a small arm, hinge offsets and references, and its checks.
// Agreement with MuJoCo on the Panda is tested from Python (src/coda_policy/test/test_native_control.py).
#include <cmath>
#include <stdexcept>

#include "check.hpp"
#include "coda_core/kinematics.hpp"
#include "control_fixture.hpp"

using coda_core::ChainBody;
using coda_core::ChainHinge;
using coda_core::SerialChain;

TEST(two_hinges_match_the_closed_form) {
  const SerialChain arm = control_fixture::chain();
  for (double a = -3.0; a <= 3.0; a += 0.37) {
    for (double b = -2.0; b <= 2.0; b += 0.29) {
      const double q[2] = {a, b};
      const auto p = arm.forward(q);
      // R_z(a) * ((0.3, 0, 0) + R_y(b) (0.2, 0, 0)) + (0, 0, 0.5)
      const double r = 0.3 + 0.2 * std::cos(b);
      CHECK_NEAR(p[0], r * std::cos(a), 1e-12);
      CHECK_NEAR(p[1], r * std::sin(a), 1e-12);
      CHECK_NEAR(p[2], 0.5 - 0.2 * std::sin(b), 1e-12);
    }
  }
}

TEST(an_anchor_off_the_origin_and_a_reference_angle) {
  // one body whose hinge (about z) sits at (0.1, 0, 0) of its frame; the point is 0.1 m beyond the anchor
  ChainBody body;
  body.quat = {std::cos(0.25), 0.0, 0.0, std::sin(0.25)};  // body frame turned 0.5 rad about z
  body.hinges.push_back(ChainHinge{{0.1, 0.0, 0.0}, {0.0, 0.0, 1.0}, 0.3, 0});
  const SerialChain chain({body}, {0.2, 0.0, 0.0}, 1);
  const double q[1] = {0.3 + 0.7};  // 0.7 rad past the reference
  const auto p = chain.forward(q);
  const double anchor_x = 0.1 * std::cos(0.5), anchor_y = 0.1 * std::sin(0.5);
  CHECK_NEAR(p[0], anchor_x + 0.1 * std::cos(1.2), 1e-12);
  CHECK_NEAR(p[1], anchor_y + 0.1 * std::sin(1.2), 1e-12);
  CHECK_NEAR(p[2], 0.0, 1e-12);
}

TEST(bad_chains_are_refused) {
  CHECK_THROWS(SerialChain({}, {0, 0, 0}, 1), std::invalid_argument);
  ChainBody body;
  body.hinges.push_back(ChainHinge{{0, 0, 0}, {0, 0, 1}, 0.0, 3});
  CHECK_THROWS(SerialChain({body}, {0, 0, 0}, 2), std::invalid_argument);  // reads joint 3 of 2
  body.hinges[0] = ChainHinge{{0, 0, 0}, {0, 0, 2}, 0.0, 0};
  CHECK_THROWS(SerialChain({body}, {0, 0, 0}, 2), std::invalid_argument);  // not a unit axis
}

TEST_MAIN
