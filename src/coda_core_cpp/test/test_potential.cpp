// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "coda_core/potential.hpp"

using coda_core::LayoutEntry;
using coda_core::PotentialError;
using coda_core::PotentialProgram;

namespace {

const std::vector<LayoutEntry> kLayout = {{"ee_pos", 0, 3}, {"red_cube_pos", 3, 3}, {"gripper", 6, 1}, {"xy", 7, 2}};

const char* kExample =
    "stage reach:\n"
    "  progress = 1 - clip(dist(ee_pos, red_cube_pos) / 0.3, 0, 1)\n"
    "  done     = dist(ee_pos, red_cube_pos) < 0.02\n"
    "stage lift:\n"
    "  progress = clip((red_cube_pos.z - 0.42) / 0.1, 0, 1)\n"
    "  done     = red_cube_pos.z > 0.50\n";

std::vector<float> state(float ex, float ey, float ez, float cx, float cy, float cz) {
  return {ex, ey, ez, cx, cy, cz, 0.0f, 0.0f, 0.0f};
}

// Compile and expect a PotentialError at (line, column) whose message contains `needle`.
void expect_error(const std::string& src, int line, int col, const std::string& needle) {
  try {
    PotentialProgram::compile(src, kLayout);
    std::fprintf(stderr, "no error for: %s\n", src.c_str());
    ++coda_test::failures();
  } catch (const PotentialError& e) {
    if (e.line() != line || e.column() != col || e.message().find(needle) == std::string::npos) {
      std::fprintf(stderr, "for %s\n  got %s (want line %d col %d '%s')\n", src.c_str(), e.what(), line, col,
                   needle.c_str());
      ++coda_test::failures();
    }
  }
}

std::string one_stage(const std::string& progress, const std::string& done = "0") {
  return "stage s:\n  progress = " + progress + "\n  done = " + done + "\n";
}

float eval1(const std::string& progress_expr, const std::vector<float>& s) {
  const auto p = PotentialProgram::compile(one_stage(progress_expr), kLayout);
  return p.evaluate(s.data(), s.size(), 0).first;
}

}  // namespace

TEST(example_program_compiles_with_metadata) {
  const auto p = PotentialProgram::compile(kExample, kLayout);
  CHECK(p.num_stages() == 2);
  CHECK(p.stages()[0].name == "reach" && p.stages()[1].name == "lift");
  CHECK(p.stages()[0].progress_source == "1 - clip(dist(ee_pos, red_cube_pos) / 0.3, 0, 1)");
  CHECK(p.stages()[1].done_source == "red_cube_pos.z > 0.50");
  CHECK(p.required_dim() == 9);
  CHECK(p.source() == kExample);
}

TEST(stage_semantics) {
  const auto p = PotentialProgram::compile(kExample, kLayout);
  // Far away: stage 0, progress 1 - 0.15/0.3 = 0.5, phi = 0.25.
  auto s = state(0.0f, 0.0f, 0.4f, 0.15f, 0.0f, 0.4f);
  auto r = p.evaluate(s.data(), s.size(), 0);
  CHECK(r.second == 0);
  CHECK_NEAR(r.first, 0.25, 1e-6);
  // Gripper at the cube, cube at 0.47: reach done, lift progress 0.5 -> phi = (1 + 0.5) / 2.
  s = state(0.1f, 0.1f, 0.47f, 0.1f, 0.1f, 0.47f);
  r = p.evaluate(s.data(), s.size(), 0);
  CHECK(r.second == 1);
  CHECK_NEAR(r.first, 0.75, 1e-6);
  // Cube lifted above 0.5: both done in one call -> stage K, phi = 1.
  s = state(0.1f, 0.1f, 0.6f, 0.1f, 0.1f, 0.6f);
  r = p.evaluate(s.data(), s.size(), 0);
  CHECK(r.second == 2 && r.first == 1.0f);
  // Stages never go back: starting at 1 with the gripper far away stays in lift.
  s = state(0.0f, 0.0f, 0.0f, 0.5f, 0.5f, 0.44f);
  r = p.evaluate(s.data(), s.size(), 1);
  CHECK(r.second == 1);
  CHECK_NEAR(r.first, (1.0 + 0.2) / 2.0, 1e-6);
  r = p.evaluate(s.data(), s.size(), 2);
  CHECK(r.second == 2 && r.first == 1.0f);
  CHECK_THROWS(p.evaluate(s.data(), s.size(), 3), std::invalid_argument);
  CHECK_THROWS(p.evaluate(s.data(), s.size(), -1), std::invalid_argument);
  CHECK_THROWS(p.evaluate(s.data(), 8, 0), std::invalid_argument);
}

TEST(operators_and_functions) {
  const auto s = std::vector<float>{1.0f, 2.0f, 2.0f, 4.0f, 6.0f, 2.0f, -0.25f, 3.0f, 4.0f};
  CHECK_NEAR(eval1("norm(ee_pos) / 3", s), 1.0, 1e-7);                 // |(1,2,2)| = 3
  CHECK_NEAR(eval1("dist(ee_pos, red_cube_pos) / 10", s), 0.5, 1e-7);  // |(3,4,0)| = 5
  CHECK_NEAR(eval1("dist_xy(ee_pos, red_cube_pos) / 10", s), 0.5, 1e-7);
  CHECK_NEAR(eval1("norm(xy) / 10", s), 0.5, 1e-7);
  CHECK_NEAR(eval1("abs(gripper)", s), 0.25, 1e-7);
  CHECK_NEAR(eval1("exp(-1)", s), std::exp(-1.0), 1e-7);
  CHECK_NEAR(eval1("min(0.7, 0.3, 0.5)", s), 0.3, 1e-7);
  CHECK_NEAR(eval1("max(0.1, 0.3, 0.2)", s), 0.3, 1e-7);
  CHECK_NEAR(eval1("clip(gripper, 0.1, 0.9)", s), 0.1, 1e-7);
  CHECK_NEAR(eval1("(ee_pos * 2 - red_cube_pos).z / 4", s), 0.5, 1e-7);
  CHECK_NEAR(eval1("(0.5 * ee_pos).x", s), 0.5, 1e-7);
  CHECK_NEAR(eval1("(red_cube_pos / 8).y", s), 0.75, 1e-7);
  CHECK_NEAR(eval1("(-ee_pos).x + 1.5", s), 0.5, 1e-7);
  CHECK_NEAR(eval1("(1 < 2) * 0.5", s), 0.5, 1e-7);
  CHECK_NEAR(eval1("(2 <= 2) and (3 >= 4) or (1 == 1) and not (1 != 1)", s), 1.0, 1e-7);
  CHECK_NEAR(eval1("(gripper > 0) or (xy.y < 0)", s), 0.0, 1e-7);
  CHECK_NEAR(eval1("1.5e-1 + .05 + 1. - 1", s), 0.2, 1e-6);
  CHECK_NEAR(eval1("--0.5", s), 0.5, 1e-7);
  CHECK_NEAR(eval1("+0.5 # trailing comment", s), 0.5, 1e-7);
  CHECK_NEAR(eval1("(0.25 +\n   0.25)", s), 0.5, 1e-7);  // newline inside parentheses
}

TEST(non_finite_inputs_give_defined_results) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> s = {nan, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, inf, 0.0f, 0.0f};
  CHECK(eval1("ee_pos.x", s) == 0.0f);        // NaN progress counts as 0
  CHECK(eval1("gripper", s) == 1.0f);         // +inf clipped to 1
  CHECK(eval1("-gripper", s) == 0.0f);        // -inf clipped to 0
  CHECK(eval1("1 / xy.x", s) == 1.0f);        // 1/0 = inf -> 1
  CHECK(eval1("0 / xy.x + 0.5", s) == 0.0f);  // NaN -> 0
  CHECK(eval1("min(ee_pos.x, 0.5)", s) == 0.0f);
  CHECK(eval1("exp(gripper) - exp(gripper) + 0.5", s) == 0.0f);  // inf - inf = NaN
  CHECK(eval1("exp(100)", s) == 1.0f);  // overflows to inf
  // NaN is false for done: stays in stage 0.
  const auto p = PotentialProgram::compile(one_stage("0.5", "ee_pos.x"), kLayout);
  CHECK(p.evaluate(s.data(), s.size(), 0).second == 0);
  const auto q = PotentialProgram::compile(one_stage("0.5", "not ee_pos.x"), kLayout);
  CHECK(q.evaluate(s.data(), s.size(), 0).second == 1);
  const auto c = PotentialProgram::compile(one_stage("0.5", "ee_pos.x < 1 or ee_pos.x >= 1"), kLayout);
  CHECK(c.evaluate(s.data(), s.size(), 0).second == 0);  // comparisons with NaN are false
}

TEST(errors_name_line_column_and_problem) {
  expect_error(one_stage("foo"), 2, 14, "unknown name 'foo'");
  expect_error(one_stage("1 + ee_pos"), 2, 16, "type mismatch: cannot add scalar and vec3");
  expect_error(one_stage("ee_pos"), 2, 14, "'progress' must be a scalar, got vec3");
  expect_error(one_stage("1 +"), 2, 17, "expected an expression, got end of line");
  expect_error(one_stage("gripper.x"), 2, 21, "'.x' needs a vector, got scalar");
  expect_error(one_stage("xy.z"), 2, 16, "'.z' on a vec2");
  expect_error(one_stage("ee_pos.w"), 2, 21, "unknown component '.w'");
  expect_error(one_stage("dist(ee_pos, xy)"), 2, 14, "same length");
  expect_error(one_stage("dist(ee_pos)"), 2, 14, "'dist' takes 2 arguments, got 1");
  expect_error(one_stage("min(1)"), 2, 14, "at least 2 arguments");
  expect_error(one_stage("abs(ee_pos)"), 2, 18, "'abs' argument 1 must be a scalar, got vec3");
  expect_error(one_stage("norm(1)"), 2, 19, "must be a vector");
  expect_error(one_stage("sin(1)"), 2, 14, "unknown function 'sin'");
  expect_error(one_stage("1 < 2 < 3"), 2, 20, "cannot be chained");
  expect_error(one_stage("ee_pos * ee_pos"), 2, 21, "cannot multiply vec3 and vec3");
  expect_error(one_stage("1 / ee_pos"), 2, 16, "cannot divide scalar by vec3");
  expect_error(one_stage("(1"), 3, 3, "expected ')', got 'done'");  // newlines continue inside ( )
  expect_error(one_stage("1 $ 2"), 2, 16, "unexpected character '$'");
  expect_error(one_stage("1e"), 2, 14, "malformed number '1e'");
  expect_error(one_stage("1e39"), 2, 14, "number out of range");
  expect_error(one_stage("1 2"), 2, 16, "expected end of line, got '2'");
  expect_error("", 1, 1, "no stages");
  expect_error("progress = 1\n", 1, 1, "expected 'stage', got 'progress'");
  expect_error("stage a\n", 1, 8, "expected ':' after the stage name");
  expect_error("stage a:\n  progress = 1\n", 1, 7, "stage 'a' has no 'done'");
  expect_error("stage a:\n  done = 1\n", 1, 7, "stage 'a' has no 'progress'");
  expect_error("stage a:\n  done = 1\n  done = 0\n", 3, 3, "duplicate 'done'");
  expect_error(one_stage("1") + "stage s:\n progress = 1\n done = 1\n", 4, 7, "duplicate stage name 's'");
  expect_error("stage a:\n  progress = 1\n  done = 1\n  reward = 2\n", 4, 3, "expected 'progress', 'done'");
  expect_error("stage a:\n  progress = 1\n  done = 1\n\xff", 4, 1, "unexpected character '\\xff'");
  // A comment holds any UTF-8 text, and only that (found by fuzzing: lone surrogates passed).
  expect_error("# ok \xc3\xa9 \xff\n" + one_stage("1"), 1, 9, "invalid UTF-8 byte '\\xff' in a comment");
  expect_error("# \xed\xa0\x80\n" + one_stage("1"), 1, 3, "invalid UTF-8 byte '\\xed' in a comment");
  expect_error(one_stage("1") + "# cut \xe6\x9c", 4, 7, "invalid UTF-8 byte '\\xe6' in a comment");
}

TEST(limits_bound_hostile_input) {
  coda_core::PotentialLimits limits;
  std::string deep = std::string(100, '(') + "1" + std::string(100, ')');
  expect_error(one_stage(deep), 2, 14 + 64, "nested too deeply");
  std::string chain = "1";
  for (int i = 0; i < 100; ++i) chain += " + 1";
  expect_error(one_stage(chain), 2, 14 + 64 * 4 - 2, "nested too deeply");
  std::string negs(100000, '-');
  expect_error(one_stage(negs + "1"), 1, 1, "too large");
  expect_error(one_stage(std::string(200, '-') + "1"), 2, 14 + 64, "nested too deeply");
  std::string many;
  for (int i = 0; i < 40; ++i) many += "stage s" + std::to_string(i) + ":\n progress = 0\n done = 0\n";
  expect_error(many, 3 * limits.max_stages + 1, 1, "too many stages");
  // Right at the limits is fine.
  std::string ok_deep = std::string(63, '(') + "1" + std::string(63, ')');
  CHECK(PotentialProgram::compile(one_stage(ok_deep), kLayout).num_stages() == 1);
}

TEST(layout_is_validated) {
  CHECK_THROWS(PotentialProgram::compile(kExample, {{"a", 0, 4}}), std::invalid_argument);
  CHECK_THROWS(PotentialProgram::compile(kExample, {{"a", 0, 0}}), std::invalid_argument);
  CHECK_THROWS(PotentialProgram::compile(kExample, {{"a", -1, 1}}), std::invalid_argument);
  CHECK_THROWS(PotentialProgram::compile(kExample, {{"and", 0, 1}}), std::invalid_argument);
  CHECK_THROWS(PotentialProgram::compile(kExample, {{"1a", 0, 1}}), std::invalid_argument);
  CHECK_THROWS(PotentialProgram::compile(kExample, {{"a", 0, 1}, {"a", 1, 1}}), std::invalid_argument);
}

TEST(batch_equals_single_state_evaluation) {
  const std::string src = std::string(kExample) +
                          "stage place:\n  progress = exp(-abs(gripper)) * (xy.x > 0)\n"
                          "  done = max(gripper, xy.y) > 0.9 and not (xy.x < -0.5)\n";
  const auto p = PotentialProgram::compile(src, kLayout);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-0.2f, 1.0f);
  const std::size_t n = 1000, dim = 11;
  std::vector<float> states(n * dim);
  std::vector<std::int32_t> stages(n);
  for (auto& x : states) x = u(rng);
  for (std::size_t i = 0; i < n; ++i) {
    stages[i] = static_cast<std::int32_t>(i % 4);
    if (i % 97 == 0) states[i * dim + 6] = std::numeric_limits<float>::quiet_NaN();
  }
  std::vector<float> phi(n);
  std::vector<std::int32_t> out(n);
  p.evaluate_batch(states.data(), n, dim, stages.data(), phi.data(), out.data());
  for (std::size_t i = 0; i < n; ++i) {
    const auto r = p.evaluate(states.data() + i * dim, dim, stages[i]);
    CHECK(r.first == phi[i]);
    CHECK(r.second == out[i]);
    CHECK(out[i] >= stages[i]);
    CHECK(phi[i] >= 0.0f && phi[i] <= 1.0f);
  }
  stages[5] = 4;
  CHECK_THROWS(p.evaluate_batch(states.data(), n, dim, stages.data(), phi.data(), out.data()), std::invalid_argument);
  stages[5] = 0;
  CHECK_THROWS(p.evaluate_batch(states.data(), n, 8, stages.data(), phi.data(), out.data()), std::invalid_argument);
}

TEST(shape_rewards_formula) {
  const float r[3] = {1.0f, 0.0f, -1.0f}, phi[3] = {0.25f, 0.5f, 0.75f}, nphi[3] = {0.5f, 1.0f, 0.0f},
              d[3] = {0.0f, 1.0f, 0.0f};
  float out[3];
  coda_core::shape_rewards(r, phi, nphi, d, 3, 0.5, out);
  CHECK_NEAR(out[0], 1.0 + 0.5 * 0.5 - 0.25, 1e-7);
  CHECK_NEAR(out[1], 0.0 + 0.0 - 0.5, 1e-7);  // terminal: next potential counts as 0
  CHECK_NEAR(out[2], -1.0 + 0.0 - 0.75, 1e-7);
}

// Random bytes and mutations of a valid program: compile either succeeds or throws
// PotentialError; nothing else, and nothing crashes (run under ASan/UBSan too).
TEST(fuzzed_sources_never_crash) {
  std::mt19937 rng(11);
  const std::string alphabet = "stage progress done = ( ) , . : + - * / < > ! # \n\t 0123456789.e abcxyz_ and or not"
                               "dist dist_xy norm abs exp min max clip ee_pos red_cube_pos gripper xy";
  const std::string base = kExample;
  int compiled = 0, rejected = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string src;
    if (iter % 3 == 0) {
      const int len = static_cast<int>(rng() % 120);
      for (int i = 0; i < len; ++i) src += static_cast<char>(rng() % 256);
    } else {
      src = base;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !src.empty(); ++e) {
        const std::size_t at = rng() % src.size();
        switch (rng() % 4) {
          case 0: src.erase(at, 1 + rng() % 4); break;
          case 1: src.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
          case 2: src[at] = alphabet[rng() % alphabet.size()]; break;
          default: src.insert(at, src.substr(rng() % src.size(), rng() % 12)); break;
        }
      }
    }
    try {
      const auto p = PotentialProgram::compile(src, kLayout);
      std::vector<float> s(9, 0.3f);
      const auto r = p.evaluate(s.data(), s.size(), 0);
      CHECK(r.first >= 0.0f && r.first <= 1.0f);
      ++compiled;
    } catch (const PotentialError& e) {
      CHECK(e.line() >= 1 && e.column() >= 1);
      ++rejected;
    }
  }
  CHECK(compiled > 100);
  CHECK(rejected > 1000);
}

TEST_MAIN
