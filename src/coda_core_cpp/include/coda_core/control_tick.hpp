// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "coda_core/actor.hpp"
#include "coda_core/kinematics.hpp"
#include "coda_core/potential.hpp"

namespace coda_core {

// The control step of the `policy` node in C++: the same decisions, in the same order and with the same hold
// reasons, as coda_policy.control.PolicyController.tick (the Python path, which is the reference). No ROS here:
// coda_core/rcl_control_loop.hpp feeds it from rcl subscriptions and publishes what it returns.

// Settings of coda_policy.control.ControlConfig.
struct TickSettings {
  double control_rate_hz = 10.0;  // the end-effector velocity is (ee - previous ee) * this
  double max_input_age = 0.5;     // s: older joint or object inputs make the tick hold
  double max_delta = 0.05;        // m: the arm's largest displacement per tick and axis
};

// Where the inputs go in the flat observation (coda_policy.config.default_layout): the end effector at 0..2, its
// velocity at 3..5 and the finger opening at 6, as in the engine; the object slots and the stage index as given.
struct ObservationLayout {
  std::size_t obs_dim = 0;
  std::vector<std::size_t> slot_base;  // offset of obj<i>_pos; the slot is pos 3, rgb 3, shape 1, size 3, present 1
  std::size_t stage_col = 0;
};

// One object of coda_msgs/ObjectStates (visible ones only).
struct ObjectInput {
  std::array<double, 3> position{};
  std::array<double, 3> rgb{};
  int shape = 0;
  std::array<double, 3> size{};
  int role = 0;  // 0 distractor, 1 target, 2 goal
};

// What the tick runs with: one policy version for one instruction, handed over from Python and swapped as one
// pointer between ticks (ControlTick::set_model). Immutable once handed over.
struct ControlModel {
  bool has_policy = false;        // false: hold "no policy version loaded"
  bool has_instruction = false;   // false: hold "no instruction"
  bool instruction_fits = true;   // false: hold "instruction embedding does not fit the policy"
  std::uint64_t episode = 0;      // a new value (a new instruction) restarts the stage and the velocity
  std::string version, sha256;    // named by every command, holds included
  double net_max_delta = 0.05;    // the network's action scale (m per unit action)
  std::shared_ptr<const ObjectTokenActor> actor;  // the action mean for this version and instruction
  std::string unavailable;        // why actor is null although the model could run (the tick holds with it)
};

// One tick's command (coda_policy.control.Command).
struct TickCommand {
  std::array<double, 3> delta{};  // m, within the limits; zeros when holding
  double gripper = 0.0;           // policy gripper command in [-1, 1] (+1 closes); 0 when holding
  bool hold = true;
  std::string reason;
  int stage = 0;
  std::string version, sha256;
};

// Python's repr() of a float ("0.5", "1.0", "1e-05"): hold reasons quote settings the way the Python path does.
std::string python_float_repr(double value);

class ControlTick {
 public:
  // joint_names: the driver's names of the chain's joints, then the two fingers (chain.num_q() + 2 names).
  // program: the staged potential program that tracks the stage, compiled for this layout.
  // std::invalid_argument names what does not fit.
  ControlTick(TickSettings settings, ObservationLayout layout, PotentialProgram program, SerialChain chain,
              std::vector<std::string> joint_names);

  // ---- the control thread's side (not thread-safe among themselves: one thread calls these)
  // Latest arm state from a joint_states message (stamp in s): forward kinematics of the named joints. Returns
  // false and says why in *error when a joint is missing or names and positions differ in count (the message is
  // then ignored, as the Python path does).
  bool set_joints(double stamp, const std::vector<std::string_view>& names, const double* positions,
                  std::size_t num_positions, std::string* error);
  // Latest object states (stamp in s, visible objects only); their observation slots are filled here.
  void set_objects(double stamp, const std::vector<ObjectInput>& objects);
  // This tick's command at time now (s, the clock of the stamps). The reference stays valid until the next call.
  const TickCommand& tick(double now);
  // The observation of the last tick that got as far as building one (for tests).
  const std::vector<float>& observation() const { return obs_; }

  // ---- any thread
  // Makes `model` the one used from the next tick on (one pointer store; a tick in progress keeps its own).
  void set_model(std::shared_ptr<const ControlModel> model);
  std::shared_ptr<const ControlModel> model() const;

  const ObservationLayout& layout() const { return layout_; }

 private:
  const TickCommand& hold(const char* reason, const ControlModel& model);
  const TickCommand& hold(const std::string& reason, const ControlModel& model);

  TickSettings settings_;
  ObservationLayout layout_;
  PotentialProgram program_;
  SerialChain chain_;
  std::vector<std::string> wanted_;
  // joint order cache: the last name list seen and where each wanted joint is in it
  std::vector<std::string> names_seen_;
  std::vector<std::size_t> index_;
  std::vector<double> q_;

  mutable std::mutex model_mutex_;  // guards only the pointer copy
  std::shared_ptr<const ControlModel> model_;
  std::uint64_t episode_ = 0;

  bool have_joints_ = false, have_objects_ = false;
  double joints_stamp_ = 0.0, objects_stamp_ = 0.0;
  std::array<double, 3> ee_{};
  double opening_ = 0.0;
  std::vector<float> slots_, obs_;
  bool have_prev_ee_ = false;
  std::array<double, 3> prev_ee_{};
  int stage_ = 0;
  std::vector<float> action_;
  TickCommand command_;
  std::string reason_;
};

}  // namespace coda_core
