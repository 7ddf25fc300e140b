// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace coda_core {

// Single-producer / single-consumer ring of fixed-size float32 records (transitions) between a
// real-time control loop and a trainer thread.
//
// * push() never blocks and never allocates: all storage is allocated by the constructor.
// * Overflow policy: drop-oldest. When the ring is full, push() discards the oldest record that
//   the consumer has not taken yet and counts it in dropped(); the newest data always gets in.
// * Every pushed record is either popped exactly once or counted as dropped exactly once.
//
// Dropping the oldest record means the producer moves the consumer's read index. Both indices
// are monotonically increasing 64-bit counters (no ABA). The read index `head_` is advanced
// only by compare-and-swap, by either side: the consumer copies slot `head % capacity`, then
// CASes head -> head + 1; if that fails the producer has claimed (dropped) the record and may be
// overwriting the slot, so the copy is discarded and the consumer retries with the new head. The
// producer only writes a slot after head has moved past the record that used it, so a successful
// consumer CAS proves the copy was not overwritten. Slot words are relaxed atomics, so the
// concurrent copy/overwrite of a discarded record is not a data race.
class TransitionRing {
 public:
  TransitionRing(std::size_t capacity, std::size_t record_size);

  // Producer side. Copies record_size floats. Returns false when the oldest record was dropped
  // to make room, true otherwise.
  bool push(const float* record) noexcept;

  // Consumer side. Moves up to max_records records, oldest first, into out
  // (max_records * record_size floats). Returns how many were written.
  std::size_t pop(float* out, std::size_t max_records) noexcept;

  std::size_t capacity() const { return capacity_; }
  std::size_t record_size() const { return record_size_; }
  // Records currently held (exact when neither side is running).
  std::size_t size() const noexcept;
  std::uint64_t pushed() const noexcept { return tail_.load(std::memory_order_acquire); }
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_acquire); }
  std::uint64_t popped() const noexcept { return popped_.load(std::memory_order_acquire); }

 private:
  std::size_t capacity_, record_size_;
  std::unique_ptr<std::atomic<float>[]> slots_;
  alignas(64) std::atomic<std::uint64_t> head_{0};  // next record to read (consumer or dropper)
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // next record to write (producer only)
  alignas(64) std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> popped_{0};
};

}  // namespace coda_core
