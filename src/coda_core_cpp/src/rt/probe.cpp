// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_rt/probe.hpp"

#include <coda_msgs/msg/arm_command.h>
#include <coda_msgs/msg/object_states.h>
#include <rcl/rcl.h>
#include <rmw/serialized_message.h>
#include <rosidl_runtime_c/primitives_sequence_functions.h>
#include <rosidl_runtime_c/string_functions.h>
#include <sensor_msgs/msg/joint_state.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "coda_rt/messages.hpp"
#include "coda_rt/rcl_node.hpp"

namespace coda_rt {

namespace {

std::int64_t stamp_ns(const builtin_interfaces__msg__Time& t) {
  return static_cast<std::int64_t>(t.sec) * 1000000000 + t.nanosec;
}

}  // namespace

struct Probe::Impl {
  struct Route {
    std::unique_ptr<Publisher> joints, objects;
    std::unique_ptr<Subscription> answers;
    std::unique_ptr<WaitSet> waits;
    bool policy = false;
    rcl_serialized_message_t objects_cdr = rmw_get_zero_initialized_serialized_message();
    std::int64_t objects_period_ns = 0, objects_due_ns = 0;
    ~Route() {
      if (objects_cdr.buffer) rmw_serialized_message_fini(&objects_cdr);
    }
  };

  RclNode node;
  std::vector<std::unique_ptr<Route>> routes;
  Message<sensor_msgs__msg__JointState> joints{sensor_msgs__msg__JointState__init, sensor_msgs__msg__JointState__fini};
  Message<sensor_msgs__msg__JointState> echo{sensor_msgs__msg__JointState__init, sensor_msgs__msg__JointState__fini};
  Message<coda_msgs__msg__ArmCommand> command{coda_msgs__msg__ArmCommand__init, coda_msgs__msg__ArmCommand__fini};
  std::int64_t last_key = 0;

  explicit Impl(const std::string& name) : node(name, "/") {}

  Route& route(std::size_t i) {
    if (i >= routes.size()) throw std::out_of_range("Probe: no route " + std::to_string(i));
    return *routes[i];
  }

  void refresh_objects(std::int64_t now) {
    for (auto& r : routes) {
      if (r->policy && now >= r->objects_due_ns) {
        r->objects->publish_serialized(&r->objects_cdr);
        r->objects_due_ns = now + r->objects_period_ns;
      }
    }
  }

  std::int64_t next_objects_due() const {
    std::int64_t due = INT64_MAX;
    for (const auto& r : routes) {
      if (r->policy) due = std::min(due, r->objects_due_ns);
    }
    return due;
  }

  // Waits on the route's answers until `until_ns` (steady) or until the answer stamped `key` arrives; returns
  // its arrival time and hold flag, or -1 when it did not come. key < 0: just drains until until_ns.
  std::int64_t await(Route& r, std::int64_t key, std::int64_t until_ns, bool* hold) {
    while (true) {
      // answers already waiting first (late answers of earlier observations are dropped on the way)
      while (true) {
        bool taken;
        std::int64_t got;
        bool is_hold = false;
        if (r.policy) {
          taken = r.answers->take(command.get());
          got = taken ? stamp_ns(command->header.stamp) : 0;
          is_hold = taken && command->hold;
        } else {
          taken = r.answers->take(echo.get());
          got = taken ? stamp_ns(echo->header.stamp) : 0;
        }
        if (!taken) break;
        if (key >= 0 && got == key) {
          const std::int64_t arrival = steady_now_ns();
          if (hold) *hold = is_hold;
          return arrival;
        }
      }
      const std::int64_t now = steady_now_ns();
      refresh_objects(now);
      if (now >= until_ns) return -1;
      const std::int64_t timeout = std::min(until_ns, next_objects_due()) - now;
      r.waits->clear();
      r.waits->add(*r.answers);
      r.waits->wait(std::max<std::int64_t>(timeout, 0));
    }
  }

  // Publishes the observation with a fresh unique stamp (system clock: the node checks its age).
  std::int64_t send(Route& r, std::int64_t* sent) {
    const std::int64_t key = std::max(system_now_ns(), last_key + 1);
    last_key = key;
    joints->header.stamp.sec = static_cast<std::int32_t>(key / 1000000000);
    joints->header.stamp.nanosec = static_cast<std::uint32_t>(key % 1000000000);
    *sent = steady_now_ns();
    if (!r.joints->publish(joints.get())) throw std::runtime_error("Probe: publishing the observation failed");
    return key;
  }
};

Probe::Probe(const std::string& node_name, const std::vector<std::string>& joint_names,
             const std::vector<double>& positions)
    : impl_(std::make_unique<Impl>(node_name)) {
  if (joint_names.size() != positions.size()) throw std::invalid_argument("Probe: one position per joint name");
  sensor_msgs__msg__JointState& js = *impl_->joints;
  if (!rosidl_runtime_c__String__Sequence__init(&js.name, joint_names.size()) ||
      !rosidl_runtime_c__double__Sequence__init(&js.position, positions.size())) {
    throw std::bad_alloc();
  }
  for (std::size_t i = 0; i < joint_names.size(); ++i) {
    assign(js.name.data[i], joint_names[i]);
    js.position.data[i] = positions[i];
  }
}

Probe::~Probe() = default;

std::size_t Probe::add_policy(const std::string& joints_topic, const std::string& objects_topic,
                              const std::string& command_topic, const std::vector<std::uint8_t>& objects_cdr,
                              std::int64_t objects_period_ns) {
  auto r = std::make_unique<Impl::Route>();
  Impl& p = *impl_;
  r->policy = true;
  r->joints = std::make_unique<Publisher>(p.node, ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, JointState),
                                          joints_topic, 10);
  r->objects = std::make_unique<Publisher>(p.node, ROSIDL_GET_MSG_TYPE_SUPPORT(coda_msgs, msg, ObjectStates),
                                           objects_topic, 10);
  // A deep reader queue: answers must not be dropped while this process is descheduled for a while.
  r->answers = std::make_unique<Subscription>(p.node, ROSIDL_GET_MSG_TYPE_SUPPORT(coda_msgs, msg, ArmCommand),
                                              command_topic, 1000);
  r->waits = std::make_unique<WaitSet>(p.node, 1, 0);
  const rcutils_allocator_t allocator = rcutils_get_default_allocator();
  if (rmw_serialized_message_init(&r->objects_cdr, objects_cdr.size(), &allocator) != RMW_RET_OK) {
    throw std::bad_alloc();
  }
  std::memcpy(r->objects_cdr.buffer, objects_cdr.data(), objects_cdr.size());
  r->objects_cdr.buffer_length = objects_cdr.size();
  r->objects_period_ns = objects_period_ns;
  r->objects_due_ns = 0;
  p.routes.push_back(std::move(r));
  return p.routes.size() - 1;
}

std::size_t Probe::add_relay(const std::string& in_topic, const std::string& out_topic) {
  auto r = std::make_unique<Impl::Route>();
  Impl& p = *impl_;
  r->joints =
      std::make_unique<Publisher>(p.node, ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, JointState), in_topic, 10);
  r->answers = std::make_unique<Subscription>(p.node, ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, JointState),
                                              out_topic, 1000);
  r->waits = std::make_unique<WaitSet>(p.node, 1, 0);
  p.routes.push_back(std::move(r));
  return p.routes.size() - 1;
}

bool Probe::matched(std::size_t route) const {
  Impl::Route& r = impl_->route(route);
  if (r.joints->subscription_count() == 0 || r.answers->publisher_count() == 0) return false;
  return !r.policy || r.objects->subscription_count() > 0;
}

RoundTrip Probe::round_trip(std::size_t route, std::int64_t at_ns, std::int64_t timeout_ns) {
  Impl& p = *impl_;
  Impl::Route& r = p.route(route);
  p.await(r, -1, at_ns, nullptr);  // until it is time; stale answers are dropped on the way
  RoundTrip out;
  const std::int64_t key = p.send(r, &out.sent_ns);
  const std::int64_t arrival = p.await(r, key, out.sent_ns + timeout_ns, &out.hold);
  if (arrival >= 0) out.latency_ns = arrival - out.sent_ns;
  return out;
}

std::vector<RoundTrip> Probe::periodic(std::size_t route, double rate_hz, std::size_t count) {
  if (!(rate_hz > 0.0)) throw std::invalid_argument("Probe.periodic: rate_hz must be > 0");
  Impl& p = *impl_;
  Impl::Route& r = p.route(route);
  const std::int64_t period = static_cast<std::int64_t>(1e9 / rate_hz);
  std::vector<RoundTrip> out(count);
  const std::int64_t start = steady_now_ns() + period;
  for (std::size_t k = 0; k < count; ++k) {
    const std::int64_t due = start + static_cast<std::int64_t>(k) * period;
    p.await(r, -1, due, nullptr);
    RoundTrip& t = out[k];
    const std::int64_t key = p.send(r, &t.sent_ns);
    const std::int64_t arrival = p.await(r, key, due + period, &t.hold);
    if (arrival >= 0) t.latency_ns = arrival - t.sent_ns;
  }
  return out;
}

void Probe::idle(std::int64_t until_ns) {
  Impl& p = *impl_;
  if (p.routes.empty()) return;
  p.await(*p.routes.front(), -1, until_ns, nullptr);
}

}  // namespace coda_rt
