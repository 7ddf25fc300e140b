// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// Evaluation of compiled potential programs: one state at a time, and batched column-wise
// (each instruction runs over a block of states, so the dispatch cost is shared and the inner
// loops vectorise).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "coda_core/potential.hpp"
#include "coda_core/potential_ops.hpp"

namespace coda_core {

namespace {

using namespace pot;  // NOLINT

float run_scalar(const PotentialExprCode& expr, float* r) {
  for (const PotentialInstr& in : expr.code) {
    const float a = r[in.a], b = r[in.b];
    float v;
    switch (in.op) {
      case kNeg: v = -a; break;
      case kAdd: v = a + b; break;
      case kSub: v = a - b; break;
      case kMul: v = a * b; break;
      case kDiv: v = a / b; break;
      case kLt: v = as_float(a < b); break;
      case kLe: v = as_float(a <= b); break;
      case kGt: v = as_float(a > b); break;
      case kGe: v = as_float(a >= b); break;
      case kEq: v = as_float(a == b); break;
      case kNe: v = as_float(a != b); break;
      case kAnd: v = as_float(truthy(a) & truthy(b)); break;
      case kOr: v = as_float(truthy(a) | truthy(b)); break;
      case kNot: v = as_float(!truthy(a)); break;
      case kMin: v = f_min(a, b); break;
      case kMax: v = f_max(a, b); break;
      case kAbs: v = std::fabs(a); break;
      case kExp: v = f_exp(a); break;
      default: v = std::sqrt(a); break;  // kSqrt
    }
    r[in.dst] = v;
  }
  return r[expr.result];
}

constexpr std::size_t kBlock = 64;

// Run `expr` over m <= kBlock lanes; register k of lane i lives at r[k * kBlock + i]. Operands
// may coincide with the destination (same register), never overlap it partially, so the
// element-wise loops have no loop-carried dependency (ivdep) and vectorise.
void run_block(const PotentialExprCode& expr, std::size_t m, float* r) {
  for (const PotentialInstr& in : expr.code) {
    float* d = r + in.dst * kBlock;
    const float* pa = r + in.a * kBlock;
    const float* pb = r + in.b * kBlock;
#define CODA_BLOCK_OP(EXPR)                     \
  {                                             \
    _Pragma("GCC ivdep") for (std::size_t i = 0; i < m; ++i) { \
      const float x = pa[i], y = pb[i];         \
      (void)y;                                  \
      d[i] = (EXPR);                            \
    }                                           \
    break;                                      \
  }
    switch (in.op) {
      case kNeg: CODA_BLOCK_OP(-x)
      case kAdd: CODA_BLOCK_OP(x + y)
      case kSub: CODA_BLOCK_OP(x - y)
      case kMul: CODA_BLOCK_OP(x * y)
      case kDiv: CODA_BLOCK_OP(x / y)
      case kLt: CODA_BLOCK_OP(x < y ? 1.0f : 0.0f)
      case kLe: CODA_BLOCK_OP(x <= y ? 1.0f : 0.0f)
      case kGt: CODA_BLOCK_OP(x > y ? 1.0f : 0.0f)
      case kGe: CODA_BLOCK_OP(x >= y ? 1.0f : 0.0f)
      case kEq: CODA_BLOCK_OP(x == y ? 1.0f : 0.0f)
      case kNe: CODA_BLOCK_OP(x != y ? 1.0f : 0.0f)
      case kAnd: CODA_BLOCK_OP(as_float(truthy(x) & truthy(y)))
      case kOr: CODA_BLOCK_OP(as_float(truthy(x) | truthy(y)))
      case kNot: CODA_BLOCK_OP(as_float(!truthy(x)))
      case kMin: CODA_BLOCK_OP(f_min(x, y))
      case kMax: CODA_BLOCK_OP(f_max(x, y))
      case kAbs: CODA_BLOCK_OP(std::fabs(x))
      case kExp: CODA_BLOCK_OP(f_exp(x))
      default: CODA_BLOCK_OP(std::sqrt(x))  // kSqrt
    }
#undef CODA_BLOCK_OP
  }
}

}  // namespace

std::pair<float, std::int32_t> PotentialProgram::evaluate(const float* state, std::size_t dim, std::int32_t stage) const {
  const std::int32_t k = num_stages();
  if (stage < 0 || stage > k) {
    throw std::invalid_argument("stage must be in [0, " + std::to_string(k) + "], got " + std::to_string(stage));
  }
  if (dim < required_dim_) {
    throw std::invalid_argument("the state has " + std::to_string(dim) + " entries; the layout needs at least " +
                                std::to_string(required_dim_));
  }
  float stack_regs[kStackRegisters];
  std::vector<float> heap_regs;
  float* regs = stack_regs;
  if (num_registers() > kStackRegisters) {
    heap_regs.resize(num_registers());
    regs = heap_regs.data();
  }
  std::fill(regs, regs + const_base_, 0.0f);
  std::copy(constants_.begin(), constants_.end(), regs + const_base_);
  for (std::size_t j = 0; j < slot_index_.size(); ++j) regs[slot_base_ + j] = state[slot_index_[j]];
  std::int32_t s = stage;
  while (s < k && truthy(run_scalar(stages_[s].done, regs))) ++s;
  if (s == k) return {1.0f, s};
  const float p = clip01(run_scalar(stages_[s].progress, regs));
  return {(static_cast<float>(s) + p) / static_cast<float>(k), s};
}

void PotentialProgram::evaluate_batch(const float* states, std::size_t n, std::size_t dim, const std::int32_t* stages,
                                      float* phi, std::int32_t* new_stages) const {
  const std::int32_t k = num_stages();
  for (std::size_t i = 0; i < n; ++i) {
    if (stages[i] < 0 || stages[i] > k) {
      throw std::invalid_argument("stages[" + std::to_string(i) + "] must be in [0, " + std::to_string(k) + "], got " +
                              std::to_string(stages[i]));
    }
  }
  if (dim < required_dim_) {
    throw std::invalid_argument("states have " + std::to_string(dim) + " columns; the layout needs at least " +
                                std::to_string(required_dim_));
  }
  std::vector<float> regs(static_cast<std::size_t>(num_registers()) * kBlock, 0.0f);
  for (std::size_t c = 0; c < constants_.size(); ++c) {
    std::fill_n(regs.begin() + (const_base_ + c) * kBlock, kBlock, constants_[c]);
  }
  // out[2 * j] = done_j, out[2 * j + 1] = progress_j, per lane.
  std::vector<float> out(static_cast<std::size_t>(2 * k) * kBlock);
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::size_t m = std::min(kBlock, n - start);
    const float* block = states + start * dim;
    const std::int32_t* st = stages + start;
    for (std::size_t j = 0; j < slot_index_.size(); ++j) {
      float* dst = regs.data() + (slot_base_ + j) * kBlock;
      const float* src = block + slot_index_[j];
      for (std::size_t i = 0; i < m; ++i) dst[i] = src[i * dim];
    }
    std::int32_t lowest = k;
    for (std::size_t i = 0; i < m; ++i) lowest = std::min(lowest, st[i]);
    // Stages below the lowest starting stage are never looked at in this block.
    for (std::int32_t j = lowest; j < k; ++j) {
      for (int which = 0; which < 2; ++which) {
        const PotentialExprCode& e = which == 0 ? stages_[j].done : stages_[j].progress;
        run_block(e, m, regs.data());
        const float* res = regs.data() + e.result * kBlock;
        std::copy(res, res + m, out.begin() + (2 * j + which) * kBlock);
      }
    }
    for (std::size_t i = 0; i < m; ++i) {
      std::int32_t s = st[i];
      while (s < k && truthy(out[(2 * s) * kBlock + i])) ++s;
      new_stages[start + i] = s;
      phi[start + i] =
          s == k ? 1.0f : (static_cast<float>(s) + clip01(out[(2 * s + 1) * kBlock + i])) / static_cast<float>(k);
    }
  }
}

void shape_rewards(const float* rewards, const float* phi, const float* next_phi, const float* dones, std::size_t n,
                   double gamma, float* out) {
  const float g = static_cast<float>(gamma);
  for (std::size_t i = 0; i < n; ++i) out[i] = rewards[i] + g * next_phi[i] * (1.0f - dones[i]) - phi[i];
}

}  // namespace coda_core
