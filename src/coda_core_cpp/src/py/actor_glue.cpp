// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// numpy <-> ObjectTokenActor: the spec dictionary of coda_policy.control.NumpyActionMean.spec() to an
// ActorSpec (ValueError naming the key), and the per-observation forward.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "glue.hpp"

namespace coda_core {
namespace glue {

namespace {

py::handle item(py::handle mapping, const std::string& key, const std::string& where) {
  if (!py::isinstance<py::dict>(mapping)) throw py::value_error(where + ": expected a dict");
  auto d = py::reinterpret_borrow<py::dict>(mapping);
  if (!d.contains(key)) throw py::value_error(where + ": missing key '" + key + "'");
  return d[key.c_str()];
}

std::vector<float> floats(py::handle obj, const std::string& name) {
  F32 a = to_f32(obj, name, {});
  return std::vector<float>(a.data(), a.data() + a.size());
}

std::vector<int> columns(py::handle obj, const std::string& name) {
  py::array a = py::array::ensure(obj);
  if (!a || (a.dtype().kind() != 'i' && a.dtype().kind() != 'u')) {
    throw py::value_error(name + ": expected an integer array of observation columns");
  }
  auto c = py::array_t<int, py::array::c_style | py::array::forcecast>::ensure(a);
  return std::vector<int>(c.data(), c.data() + c.size());
}

std::size_t count(py::handle obj, const std::string& name) {
  const auto v = obj.cast<std::int64_t>();
  if (v < 0) throw py::value_error(name + ": must be >= 0, got " + std::to_string(v));
  return static_cast<std::size_t>(v);
}

DenseLayer dense_layer(py::handle pair, const std::string& name) {
  auto t = py::reinterpret_borrow<py::sequence>(pair);
  if (t.size() != 2) throw py::value_error(name + ": expected (weight (in, out), bias (out,))");
  F32 w = to_f32(t[0], name + ".weight", {});
  if (w.ndim() != 2) throw py::value_error(name + ".weight: expected a 2-d (in, out) array");
  DenseLayer l;
  l.in = static_cast<std::size_t>(w.shape(0));
  l.out = static_cast<std::size_t>(w.shape(1));
  l.weight.assign(w.data(), w.data() + w.size());
  l.bias = floats(t[1], name + ".bias");
  return l;
}

NormLayer norm_layer(py::handle triple, const std::string& name) {
  auto t = py::reinterpret_borrow<py::sequence>(triple);
  if (t.size() != 3) throw py::value_error(name + ": expected (gain, bias, eps)");
  return NormLayer{floats(t[0], name + ".gain"), floats(t[1], name + ".bias"), t[2].cast<float>()};
}

}  // namespace

std::unique_ptr<ObjectTokenActor> make_actor(py::dict spec) {
  const std::string w = "actor spec";
  auto get = [&](const char* key) { return item(spec, key, w); };
  ActorSpec s;
  s.obs_dim = count(get("obs_dim"), "obs_dim");
  s.d_model = count(get("d_model"), "d_model");
  s.num_heads = count(get("num_heads"), "num_heads");
  s.num_shapes = count(get("num_shapes"), "num_shapes");
  s.max_stages = count(get("max_stages"), "max_stages");
  for (auto [key, field] : {std::pair{"pos_ix", &s.pos_ix}, {"rgb_ix", &s.rgb_ix}, {"size_ix", &s.size_ix},
                            {"shape_ix", &s.shape_ix}, {"present_ix", &s.present_ix}, {"ee_ix", &s.ee_ix},
                            {"proprio_ix", &s.proprio_ix}}) {
    *field = columns(get(key), key);
  }
  s.stage_col = get("stage_col").cast<int>();
  s.token1 = dense_layer(get("token1"), "token1");
  s.token2 = dense_layer(get("token2"), "token2");
  s.film_scale = floats(get("film_scale"), "film_scale");
  s.film_shift = floats(get("film_shift"), "film_shift");
  std::size_t b = 0;
  for (py::handle blk : py::reinterpret_borrow<py::sequence>(get("blocks"))) {
    const std::string name = "blocks[" + std::to_string(b++) + "]";
    auto field = [&](const char* key) { return item(blk, key, name); };
    s.blocks.push_back(TokenBlock{norm_layer(field("norm1"), name + ".norm1"),
                                  dense_layer(field("qkv"), name + ".qkv"),
                                  dense_layer(field("attn_out"), name + ".attn_out"),
                                  norm_layer(field("norm2"), name + ".norm2"),
                                  dense_layer(field("ff1"), name + ".ff1"), dense_layer(field("ff2"), name + ".ff2")});
  }
  s.lang = floats(get("lang"), "lang");
  s.query_base = floats(get("query_base"), "query_base");
  for (auto [key, field] : {std::pair{"proprio", &s.proprio}, {"cross_q", &s.cross_q}, {"cross_kv", &s.cross_kv},
                            {"cross_out", &s.cross_out}}) {
    *field = dense_layer(get(key), key);
  }
  std::size_t h = 0;
  for (py::handle layer : py::reinterpret_borrow<py::sequence>(get("head"))) {
    s.head.push_back(dense_layer(layer, "head[" + std::to_string(h++) + "]"));
  }
  try {
    return std::make_unique<ObjectTokenActor>(std::move(s));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

F32 actor_forward(const ObjectTokenActor& actor, py::handle obs) {
  // Holds the GIL: one observation takes microseconds, and the scratch buffers are the object's own.
  F32 o = to_f32(obs, "obs", {static_cast<py::ssize_t>(actor.obs_dim())});
  F32 out(static_cast<py::ssize_t>(actor.action_dim()));
  actor.forward(o.data(), out.mutable_data());
  return out;
}

}  // namespace glue
}  // namespace coda_core
