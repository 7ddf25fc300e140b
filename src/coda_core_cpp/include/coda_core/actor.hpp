// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace coda_core {

// A dense layer y = x W + b with W stored row-major as (in, out).
struct DenseLayer {
  std::vector<float> weight;  // in * out
  std::vector<float> bias;    // out
  std::size_t in = 0, out = 0;
};

// Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * gain + bias.
struct NormLayer {
  std::vector<float> gain, bias;  // d_model each
  float eps = 1e-5f;
};

// One pre-norm self-attention block over the object tokens (ReLU feed-forward).
struct TokenBlock {
  NormLayer norm1;
  DenseLayer qkv;  // d -> 3d (queries, keys, values side by side)
  DenseLayer attn_out;
  NormLayer norm2;
  DenseLayer ff1, ff2;
};

// Everything the action mean of coda_policy's object-token actor needs for one instruction:
// sizes, where each input sits in the flat observation, and the weights with the instruction
// branch already applied (FiLM scale/shift, language vector, query base). Built from Python by
// coda_policy.control.NumpyActionMean.spec(); the field names are the dictionary keys there.
struct ActorSpec {
  std::size_t obs_dim = 0, d_model = 0, num_heads = 0, num_shapes = 0, max_stages = 0;
  // Observation columns, per object slot: position (slots x 3), colour (slots x 3), size (slots x 3),
  // shape id (slots), presence flag (slots); then the end effector (3), proprioception, stage index.
  std::vector<int> pos_ix, rgb_ix, size_ix, shape_ix, present_ix, ee_ix, proprio_ix;
  int stage_col = 0;
  DenseLayer token1, token2;            // per-slot token MLP (GELU between)
  std::vector<float> film_scale, film_shift;  // d_model each
  std::vector<TokenBlock> blocks;
  std::vector<float> lang;               // projected instruction, added to the actor input
  std::vector<float> query_base;         // num_queries x d_model
  DenseLayer proprio;                    // proprioception + one-hot stage -> d_model
  DenseLayer cross_q, cross_kv, cross_out;  // cross-attention of the queries over the tokens
  std::vector<DenseLayer> head;          // actor MLP (GELU between), tanh at the end
};

// The deterministic action mean tanh(actor(obs)) of one observation, float32, no allocation per call
// (scratch buffers are made once by the constructor). Only present objects are computed, so the cost grows
// with the scene, not with the slot count. Not thread-safe (one scratch per object).
//
// Semantics follow coda_policy.control.NumpyActionMean: absent slots (presence < 0.5) are masked out of
// every attention; with no slot present the attention is undefined and the result is NaN (the caller
// holds). Shape and stage ids are rounded and clipped to their ranges.
class ObjectTokenActor {
 public:
  // Checks every size; std::invalid_argument names the first field that does not fit.
  explicit ObjectTokenActor(ActorSpec spec);

  // Writes action_dim() floats to `action` from obs_dim() floats of `obs`.
  void forward(const float* obs, float* action) const;

  std::size_t obs_dim() const { return spec_.obs_dim; }
  std::size_t action_dim() const { return spec_.head.back().out; }
  std::size_t num_slots() const { return slots_; }

 private:
  // Multi-head attention of num_q query rows over num_kv key/value rows (row strides q_stride, kv_stride);
  // writes num_q x d_model to `out` and, if not null, the head-averaged weights (num_q x num_kv).
  void attend(const float* q, std::size_t q_stride, std::size_t num_q, const float* k, const float* v,
              std::size_t kv_stride, std::size_t num_kv, float* out, float* mean_weights) const;

  ActorSpec spec_;
  std::size_t slots_ = 0, token_in_ = 0, num_queries_ = 0, proprio_dim_ = 0;
  mutable std::vector<float> tokens_, token_in_buf_, hidden_, normed_, qkv_, attn_, scores_, weights_;
  mutable std::vector<float> proprio_, query_, q_, kv_, pooled_, x_, y_;
  mutable std::vector<std::size_t> live_;  // slot index of each present object, in slot order
};

}  // namespace coda_core
