// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
//
// The staged-potential language. A program is a list of stages, each with a `progress` and a
// `done` expression over named slices of the observation vector:
//
//   stage reach:
//     progress = 1 - clip(dist(ee_pos, red_cube_pos) / 0.3, 0, 1)
//     done     = dist(ee_pos, red_cube_pos) < 0.02
//
// Grammar (one statement per line; newlines inside parentheses continue the line; `#` starts
// a comment; indentation is free):
//   program   := stage+
//   stage     := 'stage' NAME ':' NEWLINE (('progress' | 'done') '=' expr NEWLINE)*
//   expr      := and ('or' and)*
//   and       := not ('and' not)*
//   not       := 'not' not | cmp
//   cmp       := sum (('<' | '<=' | '>' | '>=' | '==' | '!=') sum)?      (no chaining)
//   sum       := term (('+' | '-') term)*
//   term      := unary (('*' | '/') unary)*
//   unary     := ('-' | '+') unary | postfix
//   postfix   := primary ('.' ('x' | 'y' | 'z'))*
//   primary   := NUMBER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'
//
// Types: scalar, vec2, vec3 (layout entries of length 1, 2, 3). `+ -` need equal types; `*`
// takes scalar*scalar, scalar*vec, vec*scalar; `/` takes scalar/scalar and vec/scalar;
// comparisons, `and`, `or`, `not` take scalars and give 0 or 1. Functions: dist(v, v) and
// norm(v) (same-length vectors), dist_xy(v, v) (x and y of any vectors), abs(s), exp(s),
// min(s, s, ...), max(s, s, ...), clip(s, lo, hi). `progress` and `done` must be scalars.
//
// Numerics (shared bit for bit with the Python reference, coda_core_cpp/reference.py): every
// literal and every intermediate result is float32, rounded after each operation, with IEEE
// semantics (x/0 = +-inf, 0/0 = NaN). Vectors are evaluated component by component; dist and
// norm sum the squares left to right, then take sqrt. exp(x) is the float32 rounding of the
// double exp. A value is *true* when it is > 0 or < 0 (so 0 and NaN are false). Comparisons
// with NaN are false. min/max return NaN if either argument is NaN; clip(x, lo, hi) is
// min(max(x, lo), hi).
//
// Stage semantics: starting from the given stage s, while s < K and done_s holds, s += 1. Then
// phi = 1 if s == K, else phi = (s + p) / K where p = progress_s clipped to [0, 1] (NaN -> 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace coda_core {

// A compile error in a potential program: 1-based line and byte column, and the problem.
class PotentialError : public std::runtime_error {
 public:
  PotentialError(int line, int column, const std::string& message);
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  int line_, column_;
  std::string message_;
};

// Limits that bound the work hostile input can cause.
struct PotentialLimits {
  std::size_t max_source_bytes = 65536;
  int max_depth = 64;    // nesting of parentheses / operators / calls (expression tree depth)
  int max_stages = 32;
};

// One named slice of the observation vector.
struct LayoutEntry {
  std::string name;
  std::int64_t offset = 0;
  std::int64_t length = 1;  // 1 (scalar), 2 (vec2) or 3 (vec3)
};

// One instruction of the scalarised register code: r[dst] = op(r[a], r[b]).
//
// The register file is [temporaries | constants | state slots]: constants are filled once per
// call, state slots hold the state entries the program reads (gathered once per state or per
// block of states), so leaves cost no instruction and vector components are plain register
// references.
struct PotentialInstr {
  std::uint8_t op;
  std::uint32_t dst, a, b;
};

// A compiled expression: its code and the register that holds its scalar value afterwards.
struct PotentialExprCode {
  std::vector<PotentialInstr> code;
  std::uint32_t result = 0;
};

struct PotentialStageCode {
  std::string name;
  std::string progress_source, done_source;
  PotentialExprCode progress, done;
};

class PotentialProgram {
 public:
  // Parse, type-check and compile. Throws PotentialError for problems in the source and
  // std::invalid_argument for a malformed layout.
  static PotentialProgram compile(const std::string& source, const std::vector<LayoutEntry>& layout,
                                  const PotentialLimits& limits = PotentialLimits());

  int num_stages() const { return static_cast<int>(stages_.size()); }
  const std::vector<PotentialStageCode>& stages() const { return stages_; }
  const std::string& source() const { return source_; }
  const std::vector<LayoutEntry>& layout() const { return layout_; }
  // The smallest state length the program can read (max offset + length over the layout).
  std::size_t required_dim() const { return required_dim_; }
  // Register file: [0, const_base) temporaries, then constants, then state slots.
  std::uint32_t num_registers() const { return slot_base_ + static_cast<std::uint32_t>(slot_index_.size()); }
  std::uint32_t const_base() const { return const_base_; }
  std::uint32_t slot_base() const { return slot_base_; }
  const std::vector<float>& constants() const { return constants_; }
  const std::vector<std::int64_t>& slot_index() const { return slot_index_; }

  // One state of dim >= required_dim() floats (std::invalid_argument otherwise). stage must be
  // in [0, num_stages()] (std::invalid_argument otherwise). Returns (phi, new_stage).
  std::pair<float, std::int32_t> evaluate(const float* state, std::size_t dim, std::int32_t stage) const;

  // n states of dim floats each (row-major, dim >= required_dim()); stages in [0, K] (checked
  // first; throws std::invalid_argument naming the first bad index). Writes phi[n], new_stages[n].
  void evaluate_batch(const float* states, std::size_t n, std::size_t dim, const std::int32_t* stages,
                      float* phi, std::int32_t* new_stages) const;

 private:
  std::string source_;
  std::vector<LayoutEntry> layout_;
  std::vector<PotentialStageCode> stages_;
  std::size_t required_dim_ = 0;
  std::uint32_t const_base_ = 0, slot_base_ = 0;
  std::vector<float> constants_;
  std::vector<std::int64_t> slot_index_;  // state index held by each slot
};

// Potential-based shaping over n transitions, float32:
//   out = rewards + gamma * next_phi * (1 - dones) - phi      (a terminal state's potential is 0)
void shape_rewards(const float* rewards, const float* phi, const float* next_phi, const float* dones,
                   std::size_t n, double gamma, float* out);

}  // namespace coda_core
