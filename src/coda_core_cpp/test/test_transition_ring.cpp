// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "check.hpp"
#include "coda_core/transition_ring.hpp"

using coda_core::TransitionRing;

TEST(fifo_order_and_counters_without_overflow) {
  TransitionRing ring(4, 2);
  for (int i = 0; i < 3; ++i) {
    const float rec[2] = {static_cast<float>(i), static_cast<float>(10 * i)};
    CHECK(ring.push(rec));
  }
  CHECK(ring.size() == 3);
  float out[8];
  CHECK(ring.pop(out, 2) == 2);
  CHECK(out[0] == 0.0f && out[1] == 0.0f && out[2] == 1.0f && out[3] == 10.0f);
  CHECK(ring.pop(out, 8) == 1);
  CHECK(out[0] == 2.0f && out[1] == 20.0f);
  CHECK(ring.pop(out, 8) == 0);
  CHECK(ring.pushed() == 3 && ring.popped() == 3 && ring.dropped() == 0);
}

TEST(overflow_drops_the_oldest_and_counts_it) {
  TransitionRing ring(3, 1);
  for (int i = 0; i < 3; ++i) {
    const float v = static_cast<float>(i);
    CHECK(ring.push(&v));
  }
  const float v3 = 3.0f, v4 = 4.0f;
  CHECK(!ring.push(&v3));  // drops 0
  CHECK(!ring.push(&v4));  // drops 1
  CHECK(ring.dropped() == 2);
  CHECK(ring.size() == 3);
  float out[3];
  CHECK(ring.pop(out, 3) == 3);
  CHECK(out[0] == 2.0f && out[1] == 3.0f && out[2] == 4.0f);
  CHECK(ring.pushed() == ring.popped() + ring.dropped());
}

TEST(invalid_sizes_are_rejected) {
  CHECK_THROWS(TransitionRing(0, 1), std::invalid_argument);
  CHECK_THROWS(TransitionRing(1, 0), std::invalid_argument);
}

// Two threads: every record is either popped exactly once (in order, never torn) or counted as
// dropped. Record i holds (i, -i, i + 0.5, ...) so a torn copy is detected.
TEST(two_threads_lose_and_duplicate_nothing) {
  for (std::size_t capacity : {1u, 2u, 7u, 64u}) {
    const std::size_t width = 5;
    const std::uint64_t n = 100000;
    TransitionRing ring(capacity, width);
    std::atomic<bool> done{false};
    std::vector<float> seen;
    bool torn = false;
    std::thread consumer([&] {
      std::vector<float> buf(16 * width);
      while (true) {
        const bool finished = done.load(std::memory_order_acquire);
        const std::size_t got = ring.pop(buf.data(), 16);
        for (std::size_t k = 0; k < got; ++k) {
          const float* r = buf.data() + k * width;
          for (std::size_t j = 1; j < width; ++j) {
            const float want = j % 2 ? -r[0] : r[0] + 0.5f * static_cast<float>(j);
            if (r[j] != want) torn = true;
          }
          seen.push_back(r[0]);
        }
        if (finished && got == 0) break;
      }
    });
    std::uint64_t reported_drops = 0;
    std::vector<float> rec(width);
    for (std::uint64_t i = 0; i < n; ++i) {
      rec[0] = static_cast<float>(i);
      for (std::size_t j = 1; j < width; ++j) {
        rec[j] = j % 2 ? -rec[0] : rec[0] + 0.5f * static_cast<float>(j);
      }
      if (!ring.push(rec.data())) ++reported_drops;
    }
    done.store(true, std::memory_order_release);
    consumer.join();
    CHECK(!torn);
    bool increasing = true;
    for (std::size_t k = 1; k < seen.size(); ++k) increasing &= seen[k] > seen[k - 1];
    CHECK(increasing);  // in order, hence no duplicates
    CHECK(seen.size() + ring.dropped() == n);
    CHECK(ring.dropped() == reported_drops);
    CHECK(ring.popped() == seen.size());
    CHECK(ring.pushed() == n);
    CHECK(ring.size() == 0);
    if (!seen.empty()) CHECK(seen.back() == static_cast<float>(n - 1));  // the newest is never dropped
  }
}

TEST_MAIN
