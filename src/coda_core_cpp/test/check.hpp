// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// A minimal self-registering test harness for the C++ unit tests (no external dependency).
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace coda_test {

inline std::vector<std::pair<std::string, std::function<void()>>>& registry() {
  static std::vector<std::pair<std::string, std::function<void()>>> r;
  return r;
}
inline int& failures() {
  static int f = 0;
  return f;
}
struct Register {
  Register(const char* name, std::function<void()> fn) { registry().emplace_back(name, std::move(fn)); }
};

inline int run_all() {
  for (auto& [name, fn] : registry()) {
    const int before = failures();
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: unexpected exception: %s\n", name.c_str(), e.what());
      ++failures();
    }
    std::printf("[%s] %s\n", failures() == before ? "  OK  " : " FAIL ", name.c_str());
  }
  std::printf("%zu tests, %d failed checks\n", registry().size(), failures());
  return failures() == 0 ? 0 : 1;
}

}  // namespace coda_test

#define CODA_CAT2(a, b) a##b
#define CODA_CAT(a, b) CODA_CAT2(a, b)
#define TEST(name)                                                                \
  static void name();                                                             \
  static coda_test::Register CODA_CAT(reg_, name)(#name, name);                   \
  static void name()

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
      ++coda_test::failures();                                                           \
    }                                                                                    \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                        \
  do {                                                                                               \
    const double va_ = (a), vb_ = (b);                                                               \
    if (!(std::fabs(va_ - vb_) <= (tol))) {                                                          \
      std::fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s=%.9g %s=%.9g\n", __FILE__, __LINE__, #a, va_, \
                   #b, vb_);                                                                         \
      ++coda_test::failures();                                                                       \
    }                                                                                                \
  } while (0)

#define CHECK_THROWS(expr, Type)                                                                  \
  do {                                                                                            \
    bool thrown_ = false;                                                                         \
    try {                                                                                         \
      (void)(expr);                                                                               \
    } catch (const Type&) {                                                                       \
      thrown_ = true;                                                                             \
    }                                                                                             \
    if (!thrown_) {                                                                               \
      std::fprintf(stderr, "%s:%d: expected %s from %s\n", __FILE__, __LINE__, #Type, #expr);     \
      ++coda_test::failures();                                                                    \
    }                                                                                             \
  } while (0)

#define TEST_MAIN \
  int main() { return coda_test::run_all(); }
