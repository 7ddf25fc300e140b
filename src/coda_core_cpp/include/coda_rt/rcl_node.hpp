// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// The rcl pieces every real-time part of coda_core_cpp needs (the control loop, the benchmark's probe and its
// bare relay): a context and a node of their own, publishers, subscriptions and a wait set, each released by
// its destructor. rcl is ROS 2's C client library; it comes from the ros-rcl wheel or a ROS 2 install.
#pragma once

#include <rcl/rcl.h>

#include <cstdint>
#include <string>

namespace coda_rt {

// std::runtime_error with rcl's error string, which is then reset.
[[noreturn]] void throw_rcl(const std::string& what, rcl_ret_t ret);

// A context (rcl_init with no arguments: ROS_DOMAIN_ID and the discovery settings come from the environment)
// and one node in it (no rosout: the process's own logging is left alone, e.g. an rclpy node beside it).
class RclNode {
 public:
  RclNode(const std::string& name, const std::string& ns);
  ~RclNode();
  RclNode(const RclNode&) = delete;
  RclNode& operator=(const RclNode&) = delete;

  rcl_node_t* node() { return &node_; }
  rcl_context_t* context() { return &context_; }

 private:
  rcl_context_t context_;
  rcl_node_t node_;
  bool context_ok_ = false, node_ok_ = false;
};

// Subscription with the default QoS of rclpy's create_subscription(type, topic, depth): reliable, volatile,
// keep last `depth`.
class Subscription {
 public:
  Subscription(RclNode& node, const rosidl_message_type_support_t* type, const std::string& topic, std::size_t depth);
  ~Subscription();
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;
  rcl_subscription_t* get() { return &sub_; }
  // rcl_take into msg: true when a message was taken, false when none is waiting (throws on other errors).
  bool take(void* msg);
  std::size_t publisher_count() const;

 private:
  rcl_node_t* node_;
  rcl_subscription_t sub_;
};

class Publisher {
 public:
  Publisher(RclNode& node, const rosidl_message_type_support_t* type, const std::string& topic, std::size_t depth);
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;
  // rcl_publish; false (and the rcl error reset) when it fails.
  bool publish(const void* msg);
  // rcl_publish_serialized_message (CDR bytes of the publisher's type); false when it fails.
  bool publish_serialized(const rcl_serialized_message_t* msg);
  std::size_t subscription_count() const;

 private:
  rcl_node_t* node_;
  rcl_publisher_t pub_;
};

// A guard condition to wake a waiting thread (stop requests).
class Guard {
 public:
  explicit Guard(RclNode& node);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  rcl_guard_condition_t* get() { return &guard_; }
  void trigger();

 private:
  rcl_guard_condition_t guard_;
};

// A wait set for `subscriptions` subscriptions and `guards` guard conditions.
class WaitSet {
 public:
  WaitSet(RclNode& node, std::size_t subscriptions, std::size_t guards);
  ~WaitSet();
  WaitSet(const WaitSet&) = delete;
  WaitSet& operator=(const WaitSet&) = delete;
  void clear();
  void add(Subscription& sub);
  void add(Guard& guard);
  // rcl_wait with a timeout in ns (< 0: forever); false on timeout.
  bool wait(std::int64_t timeout_ns);
  // After wait(): whether the i-th added subscription / guard is ready.
  bool subscription_ready(std::size_t i) const { return ws_.subscriptions[i] != nullptr; }
  bool guard_ready(std::size_t i) const { return ws_.guard_conditions[i] != nullptr; }

 private:
  rcl_wait_set_t ws_;
};

// Nanoseconds since the epoch by the system clock (the clock of header stamps and of rclpy's node clock).
std::int64_t system_now_ns();
// Nanoseconds of a monotonic clock (for latencies and schedules).
std::int64_t steady_now_ns();

}  // namespace coda_rt
