// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_rt/control_loop.hpp"

#include <coda_msgs/msg/arm_command.h>
#include <coda_msgs/msg/object_states.h>
#include <rosidl_runtime_c/string_functions.h>
#include <sensor_msgs/msg/joint_state.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <future>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "coda_rt/messages.hpp"
#include "coda_rt/rcl_node.hpp"

namespace coda_rt {

struct ControlLoop::Rcl {
  RclNode node;
  Subscription joints, objects;
  Publisher commands;
  Guard wake;
  WaitSet waits;
  Message<sensor_msgs__msg__JointState> joint_msg{sensor_msgs__msg__JointState__init, sensor_msgs__msg__JointState__fini};
  Message<coda_msgs__msg__ObjectStates> object_msg{coda_msgs__msg__ObjectStates__init,
                                                   coda_msgs__msg__ObjectStates__fini};
  Message<coda_msgs__msg__ArmCommand> command_msg{coda_msgs__msg__ArmCommand__init, coda_msgs__msg__ArmCommand__fini};

  explicit Rcl(const ControlLoopOptions& o)
      : node(o.node_name, o.node_namespace),
        joints(node, ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, JointState), o.joint_states_topic, o.depth),
        objects(node, ROSIDL_GET_MSG_TYPE_SUPPORT(coda_msgs, msg, ObjectStates), o.object_states_topic, o.depth),
        commands(node, ROSIDL_GET_MSG_TYPE_SUPPORT(coda_msgs, msg, ArmCommand), o.arm_command_topic, o.depth),
        wake(node),
        waits(node, 2, 1) {
    assign(command_msg->header.frame_id, "world");
  }
};

ControlLoop::ControlLoop(ControlLoopOptions options, std::unique_ptr<coda_core::ControlTick> tick)
    : options_(std::move(options)), tick_(std::move(tick)) {
  if (!tick_) throw std::invalid_argument("ControlLoop needs a ControlTick");
  if (!options_.tick_on_joint_states && !(options_.rate_hz > 0.0 && options_.rate_hz <= 10000.0)) {
    throw std::invalid_argument("ControlLoop: rate_hz must be in (0, 10000]");
  }
  if (options_.idle_timeout_ns <= 0) throw std::invalid_argument("ControlLoop: idle_timeout_ns must be > 0");
  if (options_.realtime_priority < 0 || options_.realtime_priority > 99) {
    throw std::invalid_argument("ControlLoop: realtime_priority must be in [0, 99]");
  }
}

ControlLoop::~ControlLoop() {
  stop();
  rcl_.reset();
}

void ControlLoop::start() {
  if (thread_.joinable()) throw std::logic_error("ControlLoop: already started");
  stop_.store(false);
  running_.store(true);
  std::promise<void> ready;
  std::future<void> created = ready.get_future();
  thread_ = std::thread([this, &ready] { run(ready); });
  try {
    created.get();  // the rcl objects exist (or their error is rethrown here)
  } catch (...) {
    thread_.join();
    running_.store(false);
    throw;
  }
}

void ControlLoop::stop() {
  stop_.store(true);
  if (rcl_) rcl_->wake.trigger();
  if (thread_.joinable()) thread_.join();
  running_.store(false);
}

ControlLoopStats ControlLoop::stats() const {
  ControlLoopStats s;
  s.ticks = ticks_.load();
  s.holds = holds_.load();
  s.published = published_.load();
  s.publish_errors = publish_errors_.load();
  s.joint_messages = joint_messages_.load();
  s.object_messages = object_messages_.load();
  s.ignored_joint_messages = ignored_joint_messages_.load();
  s.late_ticks = late_ticks_.load();
  s.reason_changes = reason_changes_.load();
  s.running = running_.load();
  std::lock_guard<std::mutex> lock(text_mutex_);
  s.reason = reason_;
  s.ignored = ignored_;
  s.error = error_;
  s.realtime = realtime_;
  return s;
}

std::size_t ControlLoop::command_subscribers() const { return rcl_ ? rcl_->commands.subscription_count() : 0; }
std::size_t ControlLoop::joint_state_publishers() const { return rcl_ ? rcl_->joints.publisher_count() : 0; }

void ControlLoop::run(std::promise<void>& ready) {
  // The scheduling first, then the rcl objects: the middleware's threads (DDS receive and event threads) are
  // created from this thread and inherit its policy, so with a realtime priority the whole path runs at it.
  if (options_.realtime_priority > 0) {
    sched_param param{};
    param.sched_priority = options_.realtime_priority;
    const int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
    std::lock_guard<std::mutex> lock(text_mutex_);
    realtime_ = rc == 0 ? "SCHED_FIFO " + std::to_string(options_.realtime_priority)
                        : "SCHED_FIFO " + std::to_string(options_.realtime_priority) + " refused: " + std::strerror(rc);
  }
  try {
    rcl_ = std::make_unique<Rcl>(options_);
  } catch (...) {
    ready.set_exception(std::current_exception());
    return;
  }
  ready.set_value();  // `ready` belongs to start(), which returns now: not touched again
  try {
    run_loop();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(text_mutex_);
    error_ = e.what();
  }
  running_.store(false);
}

void ControlLoop::on_command(const coda_core::TickCommand& cmd, std::int32_t sec, std::uint32_t nanosec) {
  coda_msgs__msg__ArmCommand& msg = *rcl_->command_msg;
  msg.header.stamp.sec = sec;
  msg.header.stamp.nanosec = nanosec;
  assign(msg.policy_version, cmd.version);
  assign(msg.policy_sha256, cmd.sha256);
  msg.delta.x = cmd.delta[0];
  msg.delta.y = cmd.delta[1];
  msg.delta.z = cmd.delta[2];
  msg.gripper = static_cast<float>(-cmd.gripper);  // ArmCommand: < 0 closes; the policy: +1 closes
  msg.hold = cmd.hold;
  assign(msg.hold_reason, cmd.reason);
  msg.stage = cmd.stage;
  if (rcl_->commands.publish(&msg)) {
    published_.fetch_add(1, std::memory_order_relaxed);
  } else {
    publish_errors_.fetch_add(1, std::memory_order_relaxed);
  }
  ticks_.fetch_add(1, std::memory_order_relaxed);
  if (cmd.hold) holds_.fetch_add(1, std::memory_order_relaxed);
  if (first_command_ || cmd.reason != last_reason_) {
    first_command_ = false;
    last_reason_ = cmd.reason;
    std::lock_guard<std::mutex> lock(text_mutex_);
    reason_ = cmd.reason;
    reason_changes_.fetch_add(1, std::memory_order_relaxed);
  }
}

void ControlLoop::run_loop() {
  Rcl& r = *rcl_;
  coda_core::ControlTick& tick = *tick_;
  std::vector<std::string_view> names;
  std::vector<coda_core::ObjectInput> objects;
  std::string why;
  bool have_stamp = false;
  std::int32_t stamp_sec = 0;
  std::uint32_t stamp_nanosec = 0;
  const std::int64_t period_ns = options_.tick_on_joint_states ? 0 : static_cast<std::int64_t>(1e9 / options_.rate_hz);
  std::int64_t next_ns = steady_now_ns() + period_ns;

  auto seconds = [](std::int32_t sec, std::uint32_t nanosec, std::int64_t now_ns) {
    const double s = static_cast<double>(sec) + 1e-9 * static_cast<double>(nanosec);
    return s > 0.0 ? s : static_cast<double>(now_ns) * 1e-9;  // unstamped input: received now
  };
  auto do_tick = [&]() {
    const std::int64_t now_ns = system_now_ns();
    const coda_core::TickCommand& cmd = tick.tick(static_cast<double>(now_ns) * 1e-9);
    if (have_stamp) {
      on_command(cmd, stamp_sec, stamp_nanosec);
    } else {  // no observation yet: stamped now
      on_command(cmd, static_cast<std::int32_t>(now_ns / 1000000000),
                 static_cast<std::uint32_t>(now_ns % 1000000000));
    }
  };

  while (!stop_.load(std::memory_order_relaxed)) {
    std::int64_t timeout = options_.idle_timeout_ns;
    if (!options_.tick_on_joint_states) timeout = std::max<std::int64_t>(0, next_ns - steady_now_ns());
    r.waits.clear();
    r.waits.add(r.joints);
    r.waits.add(r.objects);
    r.waits.add(r.wake);
    r.waits.wait(timeout);
    if (stop_.load(std::memory_order_relaxed)) break;
    while (r.objects.take(r.object_msg.get())) {
      const coda_msgs__msg__ObjectStates& m = *r.object_msg;
      objects.clear();
      for (std::size_t i = 0; i < m.objects.size; ++i) {
        const coda_msgs__msg__ObjectState& o = m.objects.data[i];
        if (!o.visible) continue;
        coda_core::ObjectInput in;
        in.position = {o.pose.position.x, o.pose.position.y, o.pose.position.z};
        in.rgb = {o.rgba.r, o.rgba.g, o.rgba.b};
        in.shape = o.shape;
        in.size = {o.size.x, o.size.y, o.size.z};
        in.role = o.role;
        objects.push_back(in);
      }
      tick.set_objects(seconds(m.header.stamp.sec, m.header.stamp.nanosec, system_now_ns()), objects);
      object_messages_.fetch_add(1, std::memory_order_relaxed);
    }
    while (r.joints.take(r.joint_msg.get())) {
      const sensor_msgs__msg__JointState& m = *r.joint_msg;
      joint_messages_.fetch_add(1, std::memory_order_relaxed);
      names.clear();
      for (std::size_t i = 0; i < m.name.size; ++i) names.emplace_back(m.name.data[i].data, m.name.data[i].size);
      const double stamp = seconds(m.header.stamp.sec, m.header.stamp.nanosec, system_now_ns());
      if (!tick.set_joints(stamp, names, m.position.data, m.position.size, &why)) {
        ignored_joint_messages_.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(text_mutex_);
        ignored_ = why;
        continue;
      }
      have_stamp = true;
      stamp_sec = m.header.stamp.sec;
      stamp_nanosec = m.header.stamp.nanosec;
      if (options_.tick_on_joint_states) do_tick();
    }
    if (!options_.tick_on_joint_states) {
      const std::int64_t now = steady_now_ns();
      if (now >= next_ns) {
        do_tick();
        next_ns += period_ns;
        if (now - next_ns > period_ns) {  // more than a period behind: skip the missed ticks, as a timer does
          late_ticks_.fetch_add(1, std::memory_order_relaxed);
          next_ns = now + period_ns;
        }
      }
    }
  }
}

}  // namespace coda_rt
