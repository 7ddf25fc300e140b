// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <vector>

namespace coda_core {

// A revolute joint of a chain body, in that body's frame (MuJoCo's hinge: jnt_pos, jnt_axis, qpos0).
struct ChainHinge {
  std::array<double, 3> anchor{};     // point on the axis, body frame
  std::array<double, 3> axis{};       // unit axis, body frame
  double reference = 0.0;             // joint position at which the body has its rest pose (qpos0)
  std::size_t q_index = 0;            // which entry of the joint vector drives it
};

// One body of a serial chain: its rest pose relative to its parent, then its hinges in order.
struct ChainBody {
  std::array<double, 3> pos{};              // body_pos
  std::array<double, 4> quat{1, 0, 0, 0};   // body_quat (w, x, y, z)
  std::vector<ChainHinge> hinges;
};

// Forward kinematics of a serial chain of bodies from the world to one point (a site), with MuJoCo's
// conventions (mj_kinematics): a body's pose is its parent's composed with (pos, quat); each hinge then
// rotates the body about its anchor by (q - reference). Built from a MuJoCo model by
// coda_policy.control.PandaKinematics.chain_spec(); double precision, no allocation per call.
class SerialChain {
 public:
  // Checks the sizes; std::invalid_argument names what does not fit.
  SerialChain(std::vector<ChainBody> bodies, std::array<double, 3> point, std::size_t num_q);

  // The point's world position for the joint vector q (num_q() values).
  std::array<double, 3> forward(const double* q) const;

  std::size_t num_q() const { return num_q_; }
  std::size_t num_bodies() const { return bodies_.size(); }

 private:
  std::vector<ChainBody> bodies_;
  std::array<double, 3> point_;
  std::size_t num_q_;
};

}  // namespace coda_core
