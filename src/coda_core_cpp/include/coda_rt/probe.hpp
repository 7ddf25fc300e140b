// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// The arm side of `coda bench control`, in C++ over rcl so that the figures measure the node under test and not
// the probe: it sends sensor_msgs/JointState observations with unique stamps along "routes" (a policy node:
// joint_states in, arm_command out; a relay: JointState in, the same JointState out) and times, on a monotonic
// clock, the arrival of the answer that carries each observation's stamp. Object states for the policy routes
// are republished every 100 ms from a serialized message (unstamped: the node takes them as received now).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace coda_rt {

// One answered (or lost) observation.
struct RoundTrip {
  std::int64_t latency_ns = -1;  // -1: no answer within the time allowed
  bool hold = false;             // the answer was an ArmCommand with hold set
  std::int64_t sent_ns = 0;      // steady clock when it was published
};

class Probe {
 public:
  // joint_names / positions: the JointState sent as the observation.
  Probe(const std::string& node_name, const std::vector<std::string>& joint_names,
        const std::vector<double>& positions);
  ~Probe();
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  // A policy node: JointState on joints_topic, serialized ObjectStates (CDR bytes) on objects_topic every
  // objects_period_ns, ArmCommand answers on command_topic. Returns the route's index.
  std::size_t add_policy(const std::string& joints_topic, const std::string& objects_topic,
                         const std::string& command_topic, const std::vector<std::uint8_t>& objects_cdr,
                         std::int64_t objects_period_ns);
  // A relay: JointState on in_topic, the echo on out_topic. Returns the route's index.
  std::size_t add_relay(const std::string& in_topic, const std::string& out_topic);

  // Whether every publisher and subscription of the route has found its peer.
  bool matched(std::size_t route) const;
  // Waits until the steady clock reaches at_ns (object states keep going out), publishes one observation on the
  // route and waits up to timeout_ns for its answer.
  RoundTrip round_trip(std::size_t route, std::int64_t at_ns, std::int64_t timeout_ns);
  // One observation every 1e9 / rate_hz ns for count periods; an answer later than one period after the
  // observation was due (or none) is a miss. Returns the round trips (latency from the due time's send).
  std::vector<RoundTrip> periodic(std::size_t route, double rate_hz, std::size_t count);
  // Keeps object states going out until the steady clock reaches until_ns.
  void idle(std::int64_t until_ns);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace coda_rt
