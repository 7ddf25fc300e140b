// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// Instruction set and per-operation semantics of the compiled potential language, shared by the
// compiler (potential.cpp) and the evaluators (potential_eval.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace coda_core {
namespace pot {

enum Op : std::uint8_t {
  kNeg, kAdd, kSub, kMul, kDiv, kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr, kNot, kMin, kMax, kAbs, kExp,
  kSqrt
};

// Single-state evaluation keeps registers on the stack up to this many (else on the heap).
constexpr std::uint32_t kStackRegisters = 256;

inline bool truthy(float x) { return (x > 0.0f) | (x < 0.0f); }
inline float as_float(bool b) { return b ? 1.0f : 0.0f; }
inline float f_min(float a, float b) {
  return ((a != a) | (b != b)) ? std::numeric_limits<float>::quiet_NaN() : (b < a ? b : a);
}
inline float f_max(float a, float b) {
  return ((a != a) | (b != b)) ? std::numeric_limits<float>::quiet_NaN() : (b > a ? b : a);
}
inline float f_exp(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
// Progress clipped to [0, 1]; NaN counts as no progress.
inline float clip01(float p) { return (p != p) ? 0.0f : (p < 0.0f ? 0.0f : (p > 1.0f ? 1.0f : p)); }

}  // namespace pot
}  // namespace coda_core
