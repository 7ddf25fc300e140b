// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// Model hand-over while the control thread ticks: every command comes whole from one model (version, hash and
// action agree), and every hand-over takes effect. Run under ThreadSanitizer by
// scripts/run_sanitized_cpp_tests.sh (and under ASan + UBSan with the other tests).
#include <algorithm>
#include <atomic>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "check.hpp"
#include "control_fixture.hpp"

using namespace control_fixture;

namespace {

bool set_joints_ok(ControlTick& t, double stamp, double angle) {
  const auto names = joint_names();
  const std::vector<std::string_view> views(names.begin(), names.end());
  const double q[4] = {angle, 0.5 * angle, 0.01, 0.01};
  return t.set_joints(stamp, views, q, 4, nullptr);
}

}  // namespace

TEST(commands_come_whole_from_one_model_while_models_are_swapped) {
  auto t = make_tick();
  // the tick's models and, separately, the checker's own copies of the same action means (an actor is used by
  // one thread only)
  const unsigned seeds[2] = {11, 12};
  std::vector<std::shared_ptr<const ObjectTokenActor>> mine = {actor(seeds[0]), actor(seeds[1])};
  std::atomic<bool> done{false};
  std::atomic<int> swaps{0};
  t->set_model(model(actor(seeds[0]), "a", 1));
  std::thread swapper([&] {
    int k = 0;
    while (!done.load()) {
      ++k;
      // a fresh model each time (as Python hands over), alternating between the two weights
      t->set_model(model(actor(seeds[k % 2]), k % 2 ? "b" : "a", 1));
      swaps.fetch_add(1);
      std::this_thread::yield();
    }
  });
  t->set_objects(1.0, scene());
  int seen[2] = {0, 0};
  std::vector<float> expected(4);
  for (int i = 0; i < 3000 || seen[0] == 0 || seen[1] == 0; ++i) {
    const double a = 0.001 * (i % 500);
    CHECK(set_joints_ok(*t, 1.0, a));
    const TickCommand& c = t->tick(1.0);
    CHECK(!c.hold);
    const int which = c.version == "b" ? 1 : 0;
    CHECK(c.sha256 == c.version + "-sha");
    ++seen[which];
    mine[which]->forward(t->observation().data(), expected.data());
    for (int k = 0; k < 3; ++k) CHECK(c.delta[k] == std::clamp(static_cast<double>(expected[k]) * 0.05, -0.05, 0.05));
    if (i > 200000) break;
  }
  done.store(true);
  swapper.join();
  CHECK(seen[0] > 0 && seen[1] > 0);
  CHECK(swaps.load() > 0);
}

TEST_MAIN
