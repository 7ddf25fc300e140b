// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_core/kinematics.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace coda_core {

namespace {

using Vec3 = std::array<double, 3>;
using Quat = std::array<double, 4>;

Quat mul(const Quat& a, const Quat& b) {
  return {a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
          a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
          a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
          a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0]};
}

// v rotated by the unit quaternion q.
Vec3 rotate(const Quat& q, const Vec3& v) {
  // t = 2 * cross(q.xyz, v); v' = v + w * t + cross(q.xyz, t)
  const double x = q[1], y = q[2], z = q[3], w = q[0];
  const Vec3 t = {2.0 * (y * v[2] - z * v[1]), 2.0 * (z * v[0] - x * v[2]), 2.0 * (x * v[1] - y * v[0])};
  return {v[0] + w * t[0] + (y * t[2] - z * t[1]), v[1] + w * t[1] + (z * t[0] - x * t[2]),
          v[2] + w * t[2] + (x * t[1] - y * t[0])};
}

Quat normalized(const Quat& q) {
  const double n = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  if (!(n > 0.0)) return {1.0, 0.0, 0.0, 0.0};
  return {q[0] / n, q[1] / n, q[2] / n, q[3] / n};
}

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("SerialChain: " + what); }

}  // namespace

SerialChain::SerialChain(std::vector<ChainBody> bodies, std::array<double, 3> point, std::size_t num_q)
    : bodies_(std::move(bodies)), point_(point), num_q_(num_q) {
  if (bodies_.empty()) bad("needs at least one body");
  for (std::size_t b = 0; b < bodies_.size(); ++b) {
    ChainBody& body = bodies_[b];
    body.quat = normalized(body.quat);
    for (const ChainHinge& h : body.hinges) {
      if (h.q_index >= num_q_) {
        bad("bodies[" + std::to_string(b) + "] hinge reads joint " + std::to_string(h.q_index) + " of " +
            std::to_string(num_q_));
      }
      const double n = std::sqrt(h.axis[0] * h.axis[0] + h.axis[1] * h.axis[1] + h.axis[2] * h.axis[2]);
      if (!(std::fabs(n - 1.0) < 1e-6)) bad("bodies[" + std::to_string(b) + "] hinge axis is not a unit vector");
    }
  }
}

std::array<double, 3> SerialChain::forward(const double* q) const {
  Vec3 pos = {0.0, 0.0, 0.0};
  Quat quat = {1.0, 0.0, 0.0, 0.0};
  for (const ChainBody& body : bodies_) {
    const Vec3 offset = rotate(quat, body.pos);
    pos = {pos[0] + offset[0], pos[1] + offset[1], pos[2] + offset[2]};
    quat = mul(quat, body.quat);
    for (const ChainHinge& h : body.hinges) {
      const Vec3 a = rotate(quat, h.anchor);
      const Vec3 anchor = {a[0] + pos[0], a[1] + pos[1], a[2] + pos[2]};
      const double half = 0.5 * (q[h.q_index] - h.reference);
      const double s = std::sin(half);
      quat = mul(quat, {std::cos(half), h.axis[0] * s, h.axis[1] * s, h.axis[2] * s});
      const Vec3 back = rotate(quat, h.anchor);
      pos = {anchor[0] - back[0], anchor[1] - back[1], anchor[2] - back[2]};
    }
    quat = normalized(quat);
  }
  const Vec3 p = rotate(quat, point_);
  return {pos[0] + p[0], pos[1] + p[1], pos[2] + p[2]};
}

}  // namespace coda_core
