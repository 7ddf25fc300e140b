// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_core/transition_ring.hpp"

#include <stdexcept>

namespace coda_core {

TransitionRing::TransitionRing(std::size_t capacity, std::size_t record_size)
    : capacity_(capacity), record_size_(record_size) {
  if (capacity == 0) throw std::invalid_argument("TransitionRing: capacity must be >= 1, got 0");
  if (record_size == 0) throw std::invalid_argument("TransitionRing: record_size must be >= 1, got 0");
  if (capacity > (SIZE_MAX / sizeof(float)) / record_size) {
    throw std::length_error("TransitionRing: capacity * record_size is too large");
  }
  slots_.reset(new std::atomic<float>[capacity * record_size]);
  for (std::size_t i = 0; i < capacity * record_size; ++i) slots_[i].store(0.0f, std::memory_order_relaxed);
}

bool TransitionRing::push(const float* record) noexcept {
  const std::uint64_t tail = tail_.load(std::memory_order_relaxed);  // only this thread writes it
  std::uint64_t head = head_.load(std::memory_order_acquire);
  bool kept_all = true;
  if (tail - head >= capacity_) {
    // Full: claim the oldest record. If the CAS fails, the consumer took it meanwhile; either
    // way head has now moved past tail - capacity and the slot is ours.
    if (head_.compare_exchange_strong(head, head + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      kept_all = false;
    }
  }
  std::atomic<float>* slot = slots_.get() + (tail % capacity_) * record_size_;
  for (std::size_t i = 0; i < record_size_; ++i) slot[i].store(record[i], std::memory_order_relaxed);
  tail_.store(tail + 1, std::memory_order_release);
  return kept_all;
}

std::size_t TransitionRing::pop(float* out, std::size_t max_records) noexcept {
  std::size_t count = 0;
  std::uint64_t head = head_.load(std::memory_order_acquire);
  while (count < max_records) {
    const std::uint64_t tail = tail_.load(std::memory_order_acquire);
    if (head >= tail) break;
    const std::atomic<float>* slot = slots_.get() + (head % capacity_) * record_size_;
    float* dst = out + count * record_size_;
    for (std::size_t i = 0; i < record_size_; ++i) dst[i] = slot[i].load(std::memory_order_relaxed);
    // Success proves the producer did not claim this record, hence did not overwrite the slot
    // before our loads (they are ordered before this release). On failure `head` is reloaded.
    if (head_.compare_exchange_strong(head, head + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      ++head;
      ++count;
    }
  }
  popped_.fetch_add(count, std::memory_order_release);
  return count;
}

std::size_t TransitionRing::size() const noexcept {
  const std::uint64_t head = head_.load(std::memory_order_acquire);
  const std::uint64_t tail = tail_.load(std::memory_order_acquire);
  return tail > head ? static_cast<std::size_t>(tail - head) : 0;
}

}  // namespace coda_core
