// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// coda_rcl_relay: the bare C reference of `coda bench control`. Republishes every sensor_msgs/JointState of one
// topic on another, over rcl alone (one node, one wait set, no executor), until SIGINT or SIGTERM.
//   coda_rcl_relay IN_TOPIC OUT_TOPIC
#include <sensor_msgs/msg/joint_state.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <exception>

#include "coda_rt/messages.hpp"
#include "coda_rt/rcl_node.hpp"

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN_TOPIC OUT_TOPIC\n", argv[0]);
    return 2;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  try {
    coda_rt::RclNode node("coda_bench_rcl_relay", "/");
    const auto* type = ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, JointState);
    coda_rt::Subscription in(node, type, argv[1], 10);
    coda_rt::Publisher out(node, type, argv[2], 10);
    coda_rt::WaitSet waits(node, 1, 0);
    coda_rt::Message<sensor_msgs__msg__JointState> msg(sensor_msgs__msg__JointState__init,
                                                       sensor_msgs__msg__JointState__fini);
    while (!g_stop.load()) {
      waits.clear();
      waits.add(in);
      waits.wait(100000000);  // 100 ms: signals are seen within that
      while (in.take(msg.get())) {
        if (!out.publish(msg.get())) std::fprintf(stderr, "coda_rcl_relay: publish failed\n");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coda_rcl_relay: %s\n", e.what());
    return 1;
  }
  return 0;
}
