// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// The binding file of coda_core_cpp._rt (the control tick, its loop over rcl, the benchmark's probe): .def calls
// only (argument handling in src/py/rt_glue.cpp). A module of its own so that coda_core_cpp._core needs no ROS.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../src/py/glue.hpp"
#include "../src/py/rt_glue.hpp"
#include "coda_rt/rcl_node.hpp"

namespace py = pybind11;
namespace g = coda_rt::glue;
using coda_core::ControlTick;
using coda_rt::ControlLoop;
using coda_rt::Probe;

PYBIND11_MODULE(_rt, m) {
  m.doc() = "The policy node's control tick in C++ and its loop on a thread of its own over rcl; the bench probe.";
  py::register_exception_translator(&coda_core::glue::translate_potential_error);
  m.def("steady_now_ns", &coda_rt::steady_now_ns, "The probe's monotonic clock, ns (time.monotonic_ns's clock).");
  m.def("python_float_repr", &coda_core::python_float_repr, py::arg("value"), "Python's repr of a float, in C++.");

  py::class_<ControlTick>(m, "ControlTick", "The control step without ROS (the loop's tick; for tests).")
      .def(py::init(&g::make_tick), py::arg("spec"))
      .def("set_model", &g::tick_set_model, py::arg("model"))
      .def("set_joints", &g::tick_set_joints, py::arg("stamp"), py::arg("names"), py::arg("positions"))
      .def("set_objects", &g::tick_set_objects, py::arg("stamp"), py::arg("objects"))
      .def("tick", &g::tick_run, py::arg("now"))
      .def_property_readonly("observation", &g::tick_observation);

  py::class_<ControlLoop>(m, "ControlLoop", "The control loop on its own C++ thread over rcl (no GIL).")
      .def(py::init(&g::make_loop), py::arg("tick_spec"), py::arg("options"))
      .def("start", &ControlLoop::start, py::call_guard<py::gil_scoped_release>())
      .def("stop", &ControlLoop::stop, py::call_guard<py::gil_scoped_release>())
      .def("set_model", &g::loop_set_model, py::arg("model"))
      .def("stats", &g::loop_stats)
      .def("command_subscribers", &ControlLoop::command_subscribers, py::call_guard<py::gil_scoped_release>())
      .def("joint_state_publishers", &ControlLoop::joint_state_publishers,
           py::call_guard<py::gil_scoped_release>());

  py::class_<Probe>(m, "Probe", "The arm side of coda bench control over rcl.")
      .def(py::init(&g::make_probe), py::arg("node_name"), py::arg("joint_names"), py::arg("positions"))
      .def("add_policy", &g::probe_add_policy, py::arg("joints_topic"), py::arg("objects_topic"),
           py::arg("command_topic"), py::arg("objects_cdr"), py::arg("objects_period_ns"))
      .def("add_relay", &Probe::add_relay, py::arg("in_topic"), py::arg("out_topic"),
           py::call_guard<py::gil_scoped_release>())
      .def("matched", &Probe::matched, py::arg("route"), py::call_guard<py::gil_scoped_release>())
      .def("round_trip", &g::probe_round_trip, py::arg("route"), py::arg("at_ns"), py::arg("timeout_ns"))
      .def("periodic", &g::probe_periodic, py::arg("route"), py::arg("rate_hz"), py::arg("count"))
      .def("idle", &Probe::idle, py::arg("until_ns"), py::call_guard<py::gil_scoped_release>());
}
