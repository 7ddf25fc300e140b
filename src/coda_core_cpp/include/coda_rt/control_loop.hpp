// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// The `policy` node's control loop on a C++ thread of its own, over rcl: joint_states and object_states in,
// arm_command out, coda_core::ControlTick in between. Python (coda_policy.ros.policy_node) starts and stops it
// and hands over each (version, instruction) as a coda_core::ControlModel; the thread never touches Python.
#pragma once

#include <atomic>
#include <future>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "coda_core/control_tick.hpp"

namespace coda_rt {

struct ControlLoopOptions {
  std::string node_name = "policy_control";  // the loop's own rcl node
  std::string node_namespace = "/";          // the Python node's namespace
  std::string joint_states_topic = "joint_states";  // resolved names (the Python node applies its remappings)
  std::string object_states_topic = "object_states";
  std::string arm_command_topic = "arm_command";
  bool tick_on_joint_states = false;  // true: one command per joint_states message; false: at rate_hz
  double rate_hz = 10.0;              // ticks per second when not ticking on joint_states
  std::int64_t idle_timeout_ns = 100000000;  // longest wait when ticking on joint_states (stop requests wake it)
  std::size_t depth = 10;             // queue depth of the subscriptions and the publisher
  int realtime_priority = 0;  // > 0: the loop thread runs SCHED_FIFO at this priority (needs CAP_SYS_NICE or an
                              // rtprio limit; refused: it runs on, normally scheduled, and stats say why); 0: off
};

// What the loop has done so far (a copy; counters are totals since start).
struct ControlLoopStats {
  std::uint64_t ticks = 0;          // commands computed
  std::uint64_t holds = 0;          // of which holds
  std::uint64_t published = 0;      // commands rcl_publish accepted
  std::uint64_t publish_errors = 0;
  std::uint64_t joint_messages = 0, object_messages = 0;
  std::uint64_t ignored_joint_messages = 0;  // joint_states without the needed joints (not ticked on)
  std::uint64_t late_ticks = 0;     // timer mode: ticks that started more than one period late
  std::uint64_t reason_changes = 0; // how often the latest command's hold reason changed
  std::string reason;               // the latest command's hold reason (empty: it ran the policy)
  std::string ignored;              // why the latest ignored joint_states was ignored
  std::string error;                // what stopped the loop, if an rcl call failed
  std::string realtime;             // "SCHED_FIFO <priority>", "off", or why the priority was refused
  bool running = false;
};

class ControlLoop {
 public:
  // Checks the options (std::invalid_argument); the rcl objects are made by start().
  ControlLoop(ControlLoopOptions options, std::unique_ptr<coda_core::ControlTick> tick);
  ~ControlLoop();  // stops the thread, then releases everything
  ControlLoop(const ControlLoop&) = delete;
  ControlLoop& operator=(const ControlLoop&) = delete;

  // Starts the thread (once), which sets its scheduling, then creates the context, node, subscriptions and
  // publisher (std::runtime_error naming the rcl call that failed, rethrown here), then loops.
  void start();
  void stop();   // wakes the thread through a guard condition and joins it; idempotent
  // Any thread: the model used from the next tick on.
  void set_model(std::shared_ptr<const coda_core::ControlModel> model) { tick_->set_model(std::move(model)); }
  ControlLoopStats stats() const;
  // Any thread: how many readers / writers the loop's topics have matched (for start-up checks).
  std::size_t command_subscribers() const;
  std::size_t joint_state_publishers() const;

 private:
  struct Rcl;
  void run(std::promise<void>& ready);
  void run_loop();
  void on_command(const coda_core::TickCommand& cmd, std::int32_t sec, std::uint32_t nanosec);

  ControlLoopOptions options_;
  std::unique_ptr<coda_core::ControlTick> tick_;
  std::unique_ptr<Rcl> rcl_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
  std::atomic<std::uint64_t> ticks_{0}, holds_{0}, published_{0}, publish_errors_{0}, joint_messages_{0},
      object_messages_{0}, ignored_joint_messages_{0}, late_ticks_{0}, reason_changes_{0};
  mutable std::mutex text_mutex_;  // reason_, ignored_, error_ (written only when they change)
  std::string reason_, ignored_, error_, realtime_ = "off";
  std::string last_reason_;  // the control thread's own copy, compared every tick
  bool first_command_ = true;
};

}  // namespace coda_rt
