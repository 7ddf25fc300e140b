// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "rt_glue.hpp"

#include <pybind11/stl.h>

#include <stdexcept>
#include <string_view>
#include <utility>

#include "glue.hpp"

namespace coda_rt {
namespace glue {

namespace {

py::handle item(py::handle mapping, const char* key, const std::string& where) {
  if (!py::isinstance<py::dict>(mapping)) throw py::value_error(where + ": expected a dict");
  auto d = py::reinterpret_borrow<py::dict>(mapping);
  if (!d.contains(key)) throw py::value_error(where + ": missing key '" + key + "'");
  return d[key];
}

template <std::size_t N>
std::array<double, N> fixed(py::handle obj, const std::string& name) {
  const auto v = obj.cast<std::vector<double>>();
  if (v.size() != N) {
    throw py::value_error(name + ": expected " + std::to_string(N) + " numbers, got " + std::to_string(v.size()));
  }
  std::array<double, N> out{};
  std::copy(v.begin(), v.end(), out.begin());
  return out;
}

template <typename T>
T value(py::handle mapping, const char* key, const std::string& where) {
  try {
    return item(mapping, key, where).cast<T>();
  } catch (const py::cast_error&) {
    throw py::value_error(where + "['" + key + "']: wrong type");
  }
}

coda_core::SerialChain make_chain(py::handle spec) {
  const std::string w = "tick spec['chain']";
  std::vector<coda_core::ChainBody> bodies;
  std::size_t b = 0;
  for (py::handle body : py::reinterpret_borrow<py::sequence>(item(spec, "bodies", w))) {
    const std::string bw = w + "['bodies'][" + std::to_string(b++) + "]";
    coda_core::ChainBody out;
    out.pos = fixed<3>(item(body, "pos", bw), bw + "['pos']");
    out.quat = fixed<4>(item(body, "quat", bw), bw + "['quat']");
    std::size_t h = 0;
    for (py::handle hinge : py::reinterpret_borrow<py::sequence>(item(body, "hinges", bw))) {
      const std::string hw = bw + "['hinges'][" + std::to_string(h++) + "]";
      coda_core::ChainHinge ch;
      ch.anchor = fixed<3>(item(hinge, "anchor", hw), hw + "['anchor']");
      ch.axis = fixed<3>(item(hinge, "axis", hw), hw + "['axis']");
      ch.reference = value<double>(hinge, "reference", hw);
      ch.q_index = value<std::size_t>(hinge, "q_index", hw);
      out.hinges.push_back(ch);
    }
    bodies.push_back(std::move(out));
  }
  try {
    return coda_core::SerialChain(std::move(bodies), fixed<3>(item(spec, "point", w), w + "['point']"),
                                  value<std::size_t>(spec, "num_q", w));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

}  // namespace

std::unique_ptr<coda_core::ControlTick> make_tick(py::dict spec) {
  const std::string w = "tick spec";
  coda_core::TickSettings settings;
  settings.control_rate_hz = value<double>(spec, "control_rate_hz", w);
  settings.max_input_age = value<double>(spec, "max_input_age", w);
  settings.max_delta = value<double>(spec, "max_delta", w);
  coda_core::ObservationLayout layout;
  layout.obs_dim = value<std::size_t>(spec, "obs_dim", w);
  layout.slot_base = value<std::vector<std::size_t>>(spec, "slot_base", w);
  layout.stage_col = value<std::size_t>(spec, "stage_col", w);
  std::unique_ptr<coda_core::PotentialProgram> program =
      coda_core::glue::compile_program(item(spec, "program", w), item(spec, "program_layout", w));
  coda_core::SerialChain chain = make_chain(item(spec, "chain", w));
  auto names = value<std::vector<std::string>>(spec, "joint_names", w);
  try {
    return std::make_unique<coda_core::ControlTick>(settings, std::move(layout), std::move(*program),
                                                    std::move(chain), std::move(names));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

std::shared_ptr<const coda_core::ControlModel> make_model(py::dict model) {
  const std::string w = "control model";
  auto m = std::make_shared<coda_core::ControlModel>();
  m->has_policy = value<bool>(model, "has_policy", w);
  m->has_instruction = value<bool>(model, "has_instruction", w);
  m->instruction_fits = value<bool>(model, "instruction_fits", w);
  m->episode = value<std::uint64_t>(model, "episode", w);
  m->version = value<std::string>(model, "version", w);
  m->sha256 = value<std::string>(model, "sha256", w);
  m->net_max_delta = value<double>(model, "net_max_delta", w);
  m->unavailable = value<std::string>(model, "unavailable", w);
  py::handle actor = item(model, "actor", w);
  if (!actor.is_none()) {
    if (!py::isinstance<py::dict>(actor)) throw py::value_error(w + "['actor']: expected an actor spec dict or None");
    std::unique_ptr<coda_core::ObjectTokenActor> built =
        coda_core::glue::make_actor(py::reinterpret_borrow<py::dict>(actor));
    m->actor = std::shared_ptr<const coda_core::ObjectTokenActor>(std::move(built));
  }
  return m;
}

void tick_set_model(coda_core::ControlTick& tick, py::dict model) {
  auto m = make_model(model);
  try {
    tick.set_model(std::move(m));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

std::string tick_set_joints(coda_core::ControlTick& tick, double stamp, const std::vector<std::string>& names,
                            const std::vector<double>& positions) {
  std::vector<std::string_view> views(names.begin(), names.end());
  std::string why;
  return tick.set_joints(stamp, views, positions.data(), positions.size(), &why) ? std::string() : why;
}

void tick_set_objects(coda_core::ControlTick& tick, double stamp, py::list objects) {
  // each object: (position (3), rgb (3), shape, size (3), role), as coda_policy.control.ObjectInfo's fields
  std::vector<coda_core::ObjectInput> in;
  std::size_t i = 0;
  for (py::handle o : objects) {
    const std::string w = "objects[" + std::to_string(i++) + "]";
    auto t = py::reinterpret_borrow<py::sequence>(o);
    if (t.size() != 5) throw py::value_error(w + ": expected (position, rgb, shape, size, role)");
    coda_core::ObjectInput obj;
    obj.position = fixed<3>(t[0], w + ".position");
    obj.rgb = fixed<3>(t[1], w + ".rgb");
    obj.shape = t[2].cast<int>();
    obj.size = fixed<3>(t[3], w + ".size");
    obj.role = t[4].cast<int>();
    in.push_back(obj);
  }
  tick.set_objects(stamp, in);
}

py::dict tick_run(coda_core::ControlTick& tick, double now) {
  const coda_core::TickCommand& c = tick.tick(now);
  py::dict out;
  out["delta"] = py::make_tuple(c.delta[0], c.delta[1], c.delta[2]);
  out["gripper"] = c.gripper;
  out["hold"] = c.hold;
  out["reason"] = c.reason;
  out["stage"] = c.stage;
  out["version"] = c.version;
  out["sha256"] = c.sha256;
  return out;
}

py::array_t<float> tick_observation(const coda_core::ControlTick& tick) {
  const std::vector<float>& obs = tick.observation();
  py::array_t<float> out(static_cast<py::ssize_t>(obs.size()));
  std::copy(obs.begin(), obs.end(), out.mutable_data());
  return out;
}

std::unique_ptr<ControlLoop> make_loop(py::dict tick_spec, py::dict options) {
  const std::string w = "loop options";
  ControlLoopOptions o;
  o.node_name = value<std::string>(options, "node_name", w);
  o.node_namespace = value<std::string>(options, "node_namespace", w);
  o.joint_states_topic = value<std::string>(options, "joint_states_topic", w);
  o.object_states_topic = value<std::string>(options, "object_states_topic", w);
  o.arm_command_topic = value<std::string>(options, "arm_command_topic", w);
  o.tick_on_joint_states = value<bool>(options, "tick_on_joint_states", w);
  o.rate_hz = value<double>(options, "rate_hz", w);
  if (options.contains("realtime_priority")) o.realtime_priority = value<int>(options, "realtime_priority", w);
  std::unique_ptr<coda_core::ControlTick> tick = make_tick(tick_spec);
  try {
    return std::make_unique<ControlLoop>(std::move(o), std::move(tick));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

void loop_set_model(ControlLoop& loop, py::dict model) {
  auto m = make_model(model);  // parsed with the GIL; the hand-over itself is one pointer store
  try {
    loop.set_model(std::move(m));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

py::dict loop_stats(const ControlLoop& loop) {
  ControlLoopStats s;
  {
    py::gil_scoped_release nogil;
    s = loop.stats();
  }
  py::dict out;
  out["ticks"] = s.ticks;
  out["holds"] = s.holds;
  out["published"] = s.published;
  out["publish_errors"] = s.publish_errors;
  out["joint_messages"] = s.joint_messages;
  out["object_messages"] = s.object_messages;
  out["ignored_joint_messages"] = s.ignored_joint_messages;
  out["late_ticks"] = s.late_ticks;
  out["reason_changes"] = s.reason_changes;
  out["reason"] = s.reason;
  out["ignored"] = s.ignored;
  out["error"] = s.error;
  out["realtime"] = s.realtime;
  out["running"] = s.running;
  return out;
}

std::unique_ptr<Probe> make_probe(const std::string& node_name, const std::vector<std::string>& joint_names,
                                  const std::vector<double>& positions) {
  try {
    py::gil_scoped_release nogil;
    return std::make_unique<Probe>(node_name, joint_names, positions);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

std::size_t probe_add_policy(Probe& probe, const std::string& joints, const std::string& objects,
                             const std::string& commands, py::bytes objects_cdr, std::int64_t objects_period_ns) {
  const std::string raw = objects_cdr;
  std::vector<std::uint8_t> bytes(raw.begin(), raw.end());
  py::gil_scoped_release nogil;
  return probe.add_policy(joints, objects, commands, bytes, objects_period_ns);
}

std::tuple<std::int64_t, bool, std::int64_t> probe_round_trip(Probe& probe, std::size_t route, std::int64_t at_ns,
                                                              std::int64_t timeout_ns) {
  RoundTrip t;
  {
    py::gil_scoped_release nogil;
    t = probe.round_trip(route, at_ns, timeout_ns);
  }
  return {t.latency_ns, t.hold, t.sent_ns};
}

std::tuple<py::array_t<std::int64_t>, py::array_t<bool>> probe_periodic(Probe& probe, std::size_t route,
                                                                        double rate_hz, std::size_t count) {
  std::vector<RoundTrip> trips;
  {
    py::gil_scoped_release nogil;
    trips = probe.periodic(route, rate_hz, count);
  }
  py::array_t<std::int64_t> latency(static_cast<py::ssize_t>(trips.size()));
  py::array_t<bool> hold(static_cast<py::ssize_t>(trips.size()));
  for (std::size_t i = 0; i < trips.size(); ++i) {
    latency.mutable_data()[i] = trips[i].latency_ns;
    hold.mutable_data()[i] = trips[i].hold;
  }
  return {latency, hold};
}

}  // namespace glue
}  // namespace coda_rt
