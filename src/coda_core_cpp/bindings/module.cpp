// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// The only binding file of coda_core_cpp: .def calls, no logic (argument handling lives in
// src/py/glue.cpp, the algorithms in src/*.cpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../src/py/glue.hpp"
#include "coda_core/version.hpp"

namespace py = pybind11;
namespace g = coda_core::glue;
using coda_core::ObjectTokenActor;
using coda_core::PotentialProgram;
using coda_core::RolloutBuffer;
using coda_core::TransitionRing;

PYBIND11_MODULE(_core, m) {
  m.doc() = "CoDA core hot paths (C++17): rollout buffer, GAE, transition ring, staged potentials, policy action mean.";
  m.def("version", &coda_core::version, "Version of the C++ core.");
  py::register_exception_translator(&g::translate_potential_error);

  m.def("compute_gae", &g::compute_gae, py::arg("rewards"), py::arg("values"), py::arg("episode_starts"),
        py::arg("last_values"), py::arg("dones"), py::arg("gamma") = 0.99, py::arg("gae_lambda") = 0.95,
        "GAE with Stable-Baselines3 semantics; returns (advantages, returns), float32 (T, n_envs).");

  py::class_<g::Minibatch>(m, "Minibatch", "Copies of one shuffled minibatch of transitions.")
      .def_readonly("indices", &g::Minibatch::indices)
      .def_readonly("observations", &g::Minibatch::observations)
      .def_readonly("actions", &g::Minibatch::actions)
      .def_readonly("old_values", &g::Minibatch::old_values)
      .def_readonly("old_log_probs", &g::Minibatch::old_log_probs)
      .def_readonly("advantages", &g::Minibatch::advantages)
      .def_readonly("returns", &g::Minibatch::returns)
      .def_readonly("stages", &g::Minibatch::stages);

  py::class_<g::MinibatchIterator>(m, "MinibatchIterator", "Seeded shuffled minibatches of a RolloutBuffer.")
      .def("__iter__", &g::iterator_self, py::return_value_policy::reference_internal)
      .def("__next__", &g::iterator_next)
      .def("__len__", &g::MinibatchIterator::num_batches);

  py::class_<RolloutBuffer>(m, "RolloutBuffer", "Preallocated float32 rollout storage laid out (T, n_envs, ...).")
      .def(py::init(&g::make_buffer), py::arg("buffer_size"), py::arg("n_envs"), py::arg("obs_dim"),
           py::arg("action_dim"))
      .def("add", &g::buffer_add, py::arg("obs"), py::arg("action"), py::arg("reward"), py::arg("episode_start"),
           py::arg("value"), py::arg("log_prob"), py::arg("stage"))
      .def("reset", &g::buffer_reset)
      .def("compute_gae", &g::buffer_compute_gae, py::arg("last_values"), py::arg("dones"), py::arg("gamma") = 0.99,
           py::arg("gae_lambda") = 0.95)
      .def("minibatches", &g::buffer_minibatches, py::arg("batch_size"), py::arg("seed"))
      .def_property_readonly("buffer_size", &RolloutBuffer::buffer_size)
      .def_property_readonly("n_envs", &RolloutBuffer::n_envs)
      .def_property_readonly("obs_dim", &RolloutBuffer::obs_dim)
      .def_property_readonly("action_dim", &RolloutBuffer::action_dim)
      .def_property_readonly("pos", &g::buffer_pos)
      .def_property_readonly("full", &g::buffer_full)
      .def_property_readonly("observations", &g::buffer_observations)
      .def_property_readonly("actions", &g::buffer_actions)
      .def_property_readonly("rewards", &g::buffer_rewards)
      .def_property_readonly("episode_starts", &g::buffer_episode_starts)
      .def_property_readonly("values", &g::buffer_values)
      .def_property_readonly("log_probs", &g::buffer_log_probs)
      .def_property_readonly("advantages", &g::buffer_advantages)
      .def_property_readonly("returns", &g::buffer_returns)
      .def_property_readonly("stages", &g::buffer_stages)
      .def("__repr__", &g::buffer_repr);

  py::class_<TransitionRing>(m, "TransitionRing", "SPSC ring of float32 records with drop-oldest overflow.")
      .def(py::init(&g::make_ring), py::arg("capacity"), py::arg("record_size"))
      .def("push", &g::ring_push, py::arg("record"))
      .def("drain", &g::ring_drain, py::arg("max_records") = -1)
      .def_property_readonly("capacity", &TransitionRing::capacity)
      .def_property_readonly("record_size", &TransitionRing::record_size)
      .def_property_readonly("size", &TransitionRing::size)
      .def_property_readonly("pushed", &TransitionRing::pushed)
      .def_property_readonly("dropped", &TransitionRing::dropped)
      .def_property_readonly("popped", &TransitionRing::popped);

  py::class_<PotentialProgram>(m, "PotentialProgram", "A compiled staged-potential program.")
      .def_static("compile", &g::compile_program, py::arg("source"), py::arg("layout"))
      .def_property_readonly("num_stages", &PotentialProgram::num_stages)
      .def_property_readonly("stage_names", &g::program_stage_names)
      .def_property_readonly("stages", &g::program_stages)
      .def_property_readonly("source", &g::program_source)
      .def_property_readonly("layout", &g::program_layout)
      .def_property_readonly("required_dim", &PotentialProgram::required_dim)
      .def("evaluate", &g::program_evaluate, py::arg("state"), py::arg("stage"))
      .def("evaluate_batch", &g::program_evaluate_batch, py::arg("states"), py::arg("stages"))
      .def("__repr__", &g::program_repr);

  m.def("shape_rewards", &g::shape_rewards, py::arg("rewards"), py::arg("phi"), py::arg("next_phi"), py::arg("dones"),
        py::arg("gamma"), "Potential-based shaping: rewards + gamma * next_phi * (1 - dones) - phi (float32).");

  py::class_<ObjectTokenActor>(m, "ObjectTokenActor", "Action mean of the object-token policy for one observation.")
      .def(py::init(&g::make_actor), py::arg("spec"))
      .def("__call__", &g::actor_forward, py::arg("obs"))
      .def_property_readonly("obs_dim", &ObjectTokenActor::obs_dim)
      .def_property_readonly("action_dim", &ObjectTokenActor::action_dim)
      .def_property_readonly("num_slots", &ObjectTokenActor::num_slots);
}
