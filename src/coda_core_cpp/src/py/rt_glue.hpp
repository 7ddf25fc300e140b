// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// Python <-> the real-time control parts (module coda_core_cpp._rt): the tick's and the model's spec
// dictionaries (built by coda_policy.control; ValueError naming the key), the loop's and the probe's calls with
// the GIL released. The binding file (bindings/rt_module.cpp) only registers these functions.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "coda_core/control_tick.hpp"
#include "coda_rt/control_loop.hpp"
#include "coda_rt/probe.hpp"

namespace coda_rt {
namespace glue {

namespace py = pybind11;

// ---- the tick without ROS (tests compare it with the Python path)
std::unique_ptr<coda_core::ControlTick> make_tick(py::dict spec);
std::shared_ptr<const coda_core::ControlModel> make_model(py::dict model);
void tick_set_model(coda_core::ControlTick& tick, py::dict model);
std::string tick_set_joints(coda_core::ControlTick& tick, double stamp, const std::vector<std::string>& names,
                            const std::vector<double>& positions);
void tick_set_objects(coda_core::ControlTick& tick, double stamp, py::list objects);
py::dict tick_run(coda_core::ControlTick& tick, double now);
py::array_t<float> tick_observation(const coda_core::ControlTick& tick);

// ---- the loop over rcl
std::unique_ptr<ControlLoop> make_loop(py::dict tick_spec, py::dict options);
void loop_set_model(ControlLoop& loop, py::dict model);
py::dict loop_stats(const ControlLoop& loop);

// ---- the benchmark's probe
std::unique_ptr<Probe> make_probe(const std::string& node_name, const std::vector<std::string>& joint_names,
                                  const std::vector<double>& positions);
std::size_t probe_add_policy(Probe& probe, const std::string& joints, const std::string& objects,
                             const std::string& commands, py::bytes objects_cdr, std::int64_t objects_period_ns);
std::tuple<std::int64_t, bool, std::int64_t> probe_round_trip(Probe& probe, std::size_t route, std::int64_t at_ns,
                                                              std::int64_t timeout_ns);
std::tuple<py::array_t<std::int64_t>, py::array_t<bool>> probe_periodic(Probe& probe, std::size_t route,
                                                                        double rate_hz, std::size_t count);

}  // namespace glue
}  // namespace coda_rt
