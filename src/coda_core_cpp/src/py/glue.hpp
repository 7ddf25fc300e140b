// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// numpy <-> core glue for the Python module: argument checking (ValueError naming the argument,
// the expected and the actual shape/dtype), zero-copy views, GIL release. The binding file
// (bindings/module.cpp) only registers these functions.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "coda_core/actor.hpp"
#include "coda_core/potential.hpp"
#include "coda_core/rollout_buffer.hpp"
#include "coda_core/transition_ring.hpp"

namespace coda_core {
namespace glue {

namespace py = pybind11;
using F32 = py::array_t<float, py::array::c_style>;
using I32 = py::array_t<std::int32_t, py::array::c_style>;

// ---- arguments
// A C-contiguous float32 view of obj (converted if needed); ValueError naming `name` for another dtype or,
// when `shape` is not empty, another shape.
F32 to_f32(py::handle obj, const std::string& name, const std::vector<py::ssize_t>& shape);

// ---- errors
void translate_potential_error(std::exception_ptr p);

// ---- GAE and the rollout buffer
std::tuple<F32, F32> compute_gae(py::handle rewards, py::handle values, py::handle episode_starts,
                                 py::handle last_values, py::handle dones, double gamma, double gae_lambda);

std::unique_ptr<RolloutBuffer> make_buffer(std::int64_t buffer_size, std::int64_t n_envs, std::int64_t obs_dim,
                                           std::int64_t action_dim);
void buffer_add(RolloutBuffer& buf, py::handle obs, py::handle action, py::handle reward, py::handle episode_start,
                py::handle value, py::handle log_prob, py::handle stage);
void buffer_reset(RolloutBuffer& buf);
void buffer_compute_gae(RolloutBuffer& buf, py::handle last_values, py::handle dones, double gamma, double gae_lambda);
py::array buffer_observations(py::object self);
py::array buffer_actions(py::object self);
py::array buffer_rewards(py::object self);
py::array buffer_episode_starts(py::object self);
py::array buffer_values(py::object self);
py::array buffer_log_probs(py::object self);
py::array buffer_advantages(py::object self);
py::array buffer_returns(py::object self);
py::array buffer_stages(py::object self);
std::size_t buffer_pos(const RolloutBuffer& buf);
bool buffer_full(const RolloutBuffer& buf);
std::string buffer_repr(const RolloutBuffer& buf);

// One minibatch: copies of the selected transitions (flat index = step * n_envs + env).
struct Minibatch {
  py::array indices, observations, actions, old_values, old_log_probs, advantages, returns, stages;
};

// Iterates over seeded shuffled minibatches of the stored transitions; keeps the buffer alive.
class MinibatchIterator {
 public:
  MinibatchIterator(py::object owner, std::size_t batch_size, std::uint64_t seed);
  Minibatch next();
  std::size_t num_batches() const;

 private:
  py::object owner_;
  RolloutBuffer* buf_;
  std::vector<std::int64_t> order_;
  std::size_t batch_size_, next_ = 0;
};

MinibatchIterator buffer_minibatches(py::object self, std::int64_t batch_size, std::uint64_t seed);
MinibatchIterator& iterator_self(MinibatchIterator& it);
Minibatch iterator_next(MinibatchIterator& it);

// ---- transition ring
std::unique_ptr<TransitionRing> make_ring(std::int64_t capacity, std::int64_t record_size);
bool ring_push(TransitionRing& ring, py::handle record);
F32 ring_drain(TransitionRing& ring, std::int64_t max_records);

// ---- potential programs
std::unique_ptr<PotentialProgram> compile_program(py::handle source, py::handle layout);
py::tuple program_evaluate(const PotentialProgram& prog, py::handle state, std::int64_t stage);
std::tuple<F32, I32> program_evaluate_batch(const PotentialProgram& prog, py::handle states, py::handle stages);
std::vector<std::string> program_stage_names(const PotentialProgram& prog);
py::list program_stages(const PotentialProgram& prog);
py::str program_source(const PotentialProgram& prog);
py::dict program_layout(const PotentialProgram& prog);
std::string program_repr(const PotentialProgram& prog);
F32 shape_rewards(py::handle rewards, py::handle phi, py::handle next_phi, py::handle dones, double gamma);

// ---- the policy's action mean (src/py/actor_glue.cpp)
std::unique_ptr<ObjectTokenActor> make_actor(py::dict spec);
F32 actor_forward(const ObjectTokenActor& actor, py::handle obs);

}  // namespace glue
}  // namespace coda_core
