// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_core/control_tick.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace coda_core {

namespace {

constexpr int kRoleTarget = 1, kRoleGoal = 2;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("ControlTick: " + what); }

bool all_finite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

}  // namespace

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Python's repr: the shortest round-trip digits; positional for 1e-4 <= |x| < 1e16, else scientific with a
  // two-digit exponent at least; a positional integer value keeps ".0".
  char buf[64];
  const double mag = std::fabs(value);
  const bool scientific = mag != 0.0 && (mag < 1e-4 || mag >= 1e16);
  auto res = std::to_chars(buf, buf + sizeof buf, value,
                           scientific ? std::chars_format::scientific : std::chars_format::fixed);
  std::string s(buf, res.ptr);
  if (scientific) {
    const auto e = s.find('e');
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    const char sign = exp[0] == '-' ? '-' : '+';
    if (exp[0] == '-' || exp[0] == '+') exp = exp.substr(1);
    while (exp.size() > 2 && exp[0] == '0') exp = exp.substr(1);
    if (exp.size() < 2) exp = "0" + exp;
    return mant + "e" + sign + exp;
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

ControlTick::ControlTick(TickSettings settings, ObservationLayout layout, PotentialProgram program,
                         SerialChain chain, std::vector<std::string> joint_names)
    : settings_(settings),
      layout_(std::move(layout)),
      program_(std::move(program)),
      chain_(std::move(chain)),
      wanted_(std::move(joint_names)),
      model_(std::make_shared<const ControlModel>()) {
  if (!(settings_.control_rate_hz > 0.0)) bad("control_rate_hz must be > 0");
  if (!(settings_.max_input_age > 0.0)) bad("max_input_age must be > 0");
  if (!(settings_.max_delta > 0.0)) bad("max_delta must be > 0");
  if (layout_.obs_dim < 7) bad("the observation needs at least 7 columns (end effector, velocity, gripper)");
  if (layout_.stage_col >= layout_.obs_dim) bad("stage_col is outside the observation");
  for (std::size_t base : layout_.slot_base) {
    if (base < 7 || base + 11 > layout_.obs_dim) bad("an object slot lies outside the observation");
  }
  if (layout_.slot_base.empty()) bad("the layout has no object slot");
  if (program_.required_dim() > layout_.obs_dim) bad("the stage program reads past the observation");
  if (wanted_.size() != chain_.num_q() + 2) {
    bad("needs " + std::to_string(chain_.num_q()) + " arm and 2 finger joint names, got " +
        std::to_string(wanted_.size()));
  }
  q_.resize(wanted_.size());
  index_.resize(wanted_.size());
  slots_.assign(layout_.obs_dim, 0.0f);
  obs_.assign(layout_.obs_dim, 0.0f);
  command_.reason.reserve(160);
}

void ControlTick::set_model(std::shared_ptr<const ControlModel> model) {
  if (!model) bad("set_model needs a model");
  if (model->actor) {
    if (model->actor->obs_dim() != layout_.obs_dim) {
      bad("the action mean reads " + std::to_string(model->actor->obs_dim()) + " observation columns, the layout has " +
          std::to_string(layout_.obs_dim));
    }
    if (model->actor->action_dim() < 4) bad("the action mean must give at least 4 values (displacement, gripper)");
  }
  std::lock_guard<std::mutex> lock(model_mutex_);
  model_.swap(model);
  // the previous model is released here, outside the control thread unless it still holds it
}

std::shared_ptr<const ControlModel> ControlTick::model() const {
  std::lock_guard<std::mutex> lock(model_mutex_);
  return model_;
}

bool ControlTick::set_joints(double stamp, const std::vector<std::string_view>& names, const double* positions,
                             std::size_t num_positions, std::string* error) {
  if (names.size() != num_positions) {
    if (error) {
      *error = "joint_states has " + std::to_string(names.size()) + " names but " + std::to_string(num_positions) +
               " positions";
    }
    return false;
  }
  bool same = names.size() == names_seen_.size();
  for (std::size_t i = 0; same && i < names.size(); ++i) same = names[i] == names_seen_[i];
  if (!same) {
    std::string missing;
    std::vector<std::size_t> index(wanted_.size());
    for (std::size_t w = 0; w < wanted_.size(); ++w) {
      bool found = false;
      for (std::size_t i = names.size(); i-- > 0;) {  // a repeated name: the last one counts
        if (names[i] == wanted_[w]) {
          index[w] = i;
          found = true;
          break;
        }
      }
      if (!found) missing += (missing.empty() ? "'" : ", '") + wanted_[w] + "'";
    }
    if (!missing.empty()) {
      if (error) *error = "joint_states lacks [" + missing + "]";
      return false;
    }
    names_seen_.assign(names.begin(), names.end());
    index_ = std::move(index);
  }
  for (std::size_t w = 0; w < wanted_.size(); ++w) q_[w] = positions[index_[w]];
  ee_ = chain_.forward(q_.data());
  const std::size_t f = chain_.num_q();
  opening_ = q_[f] + q_[f + 1];
  joints_stamp_ = stamp;
  have_joints_ = true;
  return true;
}

void ControlTick::set_objects(double stamp, const std::vector<ObjectInput>& objects) {
  std::fill(slots_.begin(), slots_.end(), 0.0f);
  // target in slot 0, goal in slot 1 (first of each), then every other object in order
  const ObjectInput* target = nullptr;
  const ObjectInput* goal = nullptr;
  for (const ObjectInput& o : objects) {
    if (o.role == kRoleTarget && !target) target = &o;
    if (o.role == kRoleGoal && !goal) goal = &o;
  }
  auto fill = [&](std::size_t slot, const ObjectInput& o) {
    float* s = slots_.data() + layout_.slot_base[slot];
    for (int c = 0; c < 3; ++c) {
      s[c] = static_cast<float>(o.position[c]);
      s[3 + c] = static_cast<float>(o.rgb[c]);
      s[7 + c] = static_cast<float>(o.size[c]);
    }
    s[6] = static_cast<float>(o.shape);
    s[10] = 1.0f;
  };
  const std::size_t slots = layout_.slot_base.size();
  if (target) fill(0, *target);
  if (goal && slots > 1) fill(1, *goal);
  std::size_t slot = 2;
  for (const ObjectInput& o : objects) {
    if (slot >= slots) break;
    if (o.role == kRoleTarget || o.role == kRoleGoal) continue;
    fill(slot++, o);
  }
  objects_stamp_ = stamp;
  have_objects_ = true;
}

const TickCommand& ControlTick::hold(const char* reason, const ControlModel& model) {
  command_.delta = {0.0, 0.0, 0.0};
  command_.gripper = 0.0;
  command_.hold = true;
  command_.reason.assign(reason);
  command_.stage = stage_;
  command_.version = model.has_policy ? model.version : std::string();
  command_.sha256 = model.has_policy ? model.sha256 : std::string();
  return command_;
}

const TickCommand& ControlTick::hold(const std::string& reason, const ControlModel& model) {
  return hold(reason.c_str(), model);
}

const TickCommand& ControlTick::tick(double now) {
  const std::shared_ptr<const ControlModel> held = model();  // read once: a swap during the tick applies next tick
  const ControlModel& model = *held;
  if (model.episode != episode_) {  // a new instruction: the task starts over
    episode_ = model.episode;
    stage_ = 0;
    have_prev_ee_ = false;
  }
  if (!model.has_policy) return hold("no policy version loaded", model);
  if (!model.has_instruction) return hold("no instruction", model);
  if (!have_joints_ || !have_objects_) {
    return hold(!have_joints_ ? "waiting for joint_states" : "waiting for object_states", model);
  }
  const std::pair<const char*, double> inputs[2] = {{"joint_states", joints_stamp_}, {"object_states", objects_stamp_}};
  for (const auto& [name, stamp] : inputs) {
    if (now - stamp > settings_.max_input_age) {
      char age[48];
      std::snprintf(age, sizeof age, "%.3f", now - stamp);
      reason_.assign(name).append(" stale: ").append(age).append(" s old > ");
      reason_.append(python_float_repr(settings_.max_input_age)).append(" s");
      return hold(reason_, model);
    }
  }
  // the observation (coda_policy.control.ObservationBuilder.build), advancing the stage
  std::copy(slots_.begin(), slots_.end(), obs_.begin());
  for (int c = 0; c < 3; ++c) {
    obs_[c] = static_cast<float>(ee_[c]);
    obs_[3 + c] = have_prev_ee_ ? static_cast<float>((ee_[c] - prev_ee_[c]) * settings_.control_rate_hz) : 0.0f;
  }
  obs_[6] = static_cast<float>(opening_);
  obs_[layout_.stage_col] = static_cast<float>(stage_);
  if (all_finite(obs_)) {
    stage_ = program_.evaluate(obs_.data(), obs_.size(), stage_).second;
    obs_[layout_.stage_col] = static_cast<float>(stage_);
  }
  prev_ee_ = ee_;
  have_prev_ee_ = true;
  if (!all_finite(obs_)) return hold("non-finite input in the observation", model);
  if (!model.instruction_fits) return hold("instruction embedding does not fit the policy", model);
  if (!model.actor) return hold(model.unavailable.empty() ? "no action mean for this version" : model.unavailable, model);
  if (action_.size() != model.actor->action_dim()) action_.resize(model.actor->action_dim());  // once per shape
  model.actor->forward(obs_.data(), action_.data());
  for (float a : action_) {
    if (!std::isfinite(a)) return hold("policy output not finite", model);
  }
  const double limit = std::min(settings_.max_delta, model.net_max_delta);
  for (int c = 0; c < 3; ++c) {
    command_.delta[c] = std::clamp(static_cast<double>(action_[c]) * model.net_max_delta, -limit, limit);
  }
  command_.gripper = std::clamp(static_cast<double>(action_[3]), -1.0, 1.0);
  command_.hold = false;
  command_.reason.clear();
  command_.stage = stage_;
  command_.version = model.version;
  command_.sha256 = model.sha256;
  return command_;
}

}  // namespace coda_core
