// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_rt/rcl_node.hpp"

#include <rcl/error_handling.h>

#include <chrono>
#include <stdexcept>

namespace coda_rt {

namespace {
// Clean-up calls whose failure leaves nothing to do but to forget the error.
void released(rcl_ret_t ret) {
  if (ret != RCL_RET_OK) rcl_reset_error();
}

std::string rcl_message(const std::string& what, rcl_ret_t ret) {
  std::string message = what + " failed (rcl return " + std::to_string(ret) + ")";
  if (rcl_error_is_set()) {
    message += ": " + std::string(rcl_get_error_string().str);
    rcl_reset_error();
  }
  return message;
}
}  // namespace

void throw_rcl(const std::string& what, rcl_ret_t ret) { throw std::runtime_error(rcl_message(what, ret)); }

RclNode::RclNode(const std::string& name, const std::string& ns) {
  context_ = rcl_get_zero_initialized_context();
  node_ = rcl_get_zero_initialized_node();
  rcl_allocator_t allocator = rcl_get_default_allocator();
  rcl_init_options_t options = rcl_get_zero_initialized_init_options();
  rcl_ret_t ret = rcl_init_options_init(&options, allocator);
  if (ret != RCL_RET_OK) throw_rcl("rcl_init_options_init", ret);
  ret = rcl_init(0, nullptr, &options, &context_);
  released(rcl_init_options_fini(&options));
  if (ret != RCL_RET_OK) throw_rcl("rcl_init", ret);
  context_ok_ = true;
  rcl_node_options_t node_options = rcl_node_get_default_options();
  node_options.enable_rosout = false;  // global arguments: none (rcl_init got no argv)
  ret = rcl_node_init(&node_, name.c_str(), ns.c_str(), &context_, &node_options);
  if (ret != RCL_RET_OK) {
    const std::string message = rcl_message("rcl_node_init of '" + name + "' in '" + ns + "'", ret);
    released(rcl_shutdown(&context_));
    released(rcl_context_fini(&context_));
    throw std::runtime_error(message);
  }
  node_ok_ = true;
}

RclNode::~RclNode() {
  if (node_ok_) released(rcl_node_fini(&node_));
  if (context_ok_) {
    released(rcl_shutdown(&context_));
    released(rcl_context_fini(&context_));
  }
  rcl_reset_error();
}

Subscription::Subscription(RclNode& node, const rosidl_message_type_support_t* type, const std::string& topic,
                           std::size_t depth)
    : node_(node.node()) {
  sub_ = rcl_get_zero_initialized_subscription();
  rcl_subscription_options_t options = rcl_subscription_get_default_options();
  options.qos.depth = depth;
  const rcl_ret_t ret = rcl_subscription_init(&sub_, node_, type, topic.c_str(), &options);
  if (ret != RCL_RET_OK) throw_rcl("subscription to '" + topic + "'", ret);
}

Subscription::~Subscription() {
  released(rcl_subscription_fini(&sub_, node_));
  rcl_reset_error();
}

bool Subscription::take(void* msg) {
  const rcl_ret_t ret = rcl_take(&sub_, msg, nullptr, nullptr);
  if (ret == RCL_RET_OK) return true;
  if (ret == RCL_RET_SUBSCRIPTION_TAKE_FAILED) return false;
  throw_rcl(std::string("rcl_take on '") + rcl_subscription_get_topic_name(&sub_) + "'", ret);
}

std::size_t Subscription::publisher_count() const {
  std::size_t count = 0;
  if (rcl_subscription_get_publisher_count(&sub_, &count) != RCL_RET_OK) {
    rcl_reset_error();
    return 0;
  }
  return count;
}

Publisher::Publisher(RclNode& node, const rosidl_message_type_support_t* type, const std::string& topic,
                     std::size_t depth)
    : node_(node.node()) {
  pub_ = rcl_get_zero_initialized_publisher();
  rcl_publisher_options_t options = rcl_publisher_get_default_options();
  options.qos.depth = depth;
  const rcl_ret_t ret = rcl_publisher_init(&pub_, node_, type, topic.c_str(), &options);
  if (ret != RCL_RET_OK) throw_rcl("publisher on '" + topic + "'", ret);
}

Publisher::~Publisher() {
  released(rcl_publisher_fini(&pub_, node_));
  rcl_reset_error();
}

bool Publisher::publish(const void* msg) {
  if (rcl_publish(&pub_, msg, nullptr) == RCL_RET_OK) return true;
  rcl_reset_error();
  return false;
}

bool Publisher::publish_serialized(const rcl_serialized_message_t* msg) {
  if (rcl_publish_serialized_message(&pub_, msg, nullptr) == RCL_RET_OK) return true;
  rcl_reset_error();
  return false;
}

std::size_t Publisher::subscription_count() const {
  std::size_t count = 0;
  if (rcl_publisher_get_subscription_count(&pub_, &count) != RCL_RET_OK) {
    rcl_reset_error();
    return 0;
  }
  return count;
}

Guard::Guard(RclNode& node) {
  guard_ = rcl_get_zero_initialized_guard_condition();
  const rcl_ret_t ret =
      rcl_guard_condition_init(&guard_, node.context(), rcl_guard_condition_get_default_options());
  if (ret != RCL_RET_OK) throw_rcl("rcl_guard_condition_init", ret);
}

Guard::~Guard() {
  released(rcl_guard_condition_fini(&guard_));
  rcl_reset_error();
}

void Guard::trigger() {
  if (rcl_trigger_guard_condition(&guard_) != RCL_RET_OK) rcl_reset_error();
}

WaitSet::WaitSet(RclNode& node, std::size_t subscriptions, std::size_t guards) {
  ws_ = rcl_get_zero_initialized_wait_set();
  const rcl_ret_t ret =
      rcl_wait_set_init(&ws_, subscriptions, guards, 0, 0, 0, 0, node.context(), rcl_get_default_allocator());
  if (ret != RCL_RET_OK) throw_rcl("rcl_wait_set_init", ret);
}

WaitSet::~WaitSet() {
  released(rcl_wait_set_fini(&ws_));
  rcl_reset_error();
}

void WaitSet::clear() {
  const rcl_ret_t ret = rcl_wait_set_clear(&ws_);
  if (ret != RCL_RET_OK) throw_rcl("rcl_wait_set_clear", ret);
}

void WaitSet::add(Subscription& sub) {
  const rcl_ret_t ret = rcl_wait_set_add_subscription(&ws_, sub.get(), nullptr);
  if (ret != RCL_RET_OK) throw_rcl("rcl_wait_set_add_subscription", ret);
}

void WaitSet::add(Guard& guard) {
  const rcl_ret_t ret = rcl_wait_set_add_guard_condition(&ws_, guard.get(), nullptr);
  if (ret != RCL_RET_OK) throw_rcl("rcl_wait_set_add_guard_condition", ret);
}

bool WaitSet::wait(std::int64_t timeout_ns) {
  const rcl_ret_t ret = rcl_wait(&ws_, timeout_ns);
  if (ret == RCL_RET_OK) return true;
  if (ret == RCL_RET_TIMEOUT) return false;
  throw_rcl("rcl_wait", ret);
}

std::int64_t system_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace coda_rt
