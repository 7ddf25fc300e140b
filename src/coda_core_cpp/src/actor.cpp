// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_core/actor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace coda_core {

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw std::invalid_argument("ActorSpec." + field + ": " + what);
}

void check_dense(const DenseLayer& l, const std::string& name, std::size_t in, std::size_t out) {
  if (in && l.in != in) bad(name + ".in", "is " + std::to_string(l.in) + ", expected " + std::to_string(in));
  if (out && l.out != out) bad(name + ".out", "is " + std::to_string(l.out) + ", expected " + std::to_string(out));
  if (l.in == 0 || l.out == 0) bad(name, "has a zero size");
  if (l.weight.size() != l.in * l.out) {
    bad(name + ".weight", "has " + std::to_string(l.weight.size()) + " values, expected in*out = " +
                              std::to_string(l.in * l.out));
  }
  if (l.bias.size() != l.out) {
    bad(name + ".bias", "has " + std::to_string(l.bias.size()) + " values, expected " + std::to_string(l.out));
  }
}

void check_size(const std::vector<float>& v, const std::string& name, std::size_t n) {
  if (v.size() != n) bad(name, "has " + std::to_string(v.size()) + " values, expected " + std::to_string(n));
}

void check_columns(const std::vector<int>& ix, const std::string& name, std::size_t n, std::size_t obs_dim) {
  if (ix.size() != n) bad(name, "has " + std::to_string(ix.size()) + " columns, expected " + std::to_string(n));
  for (int c : ix) {
    if (c < 0 || static_cast<std::size_t>(c) >= obs_dim) {
      bad(name, "column " + std::to_string(c) + " is outside the observation (obs_dim " + std::to_string(obs_dim) + ")");
    }
  }
}

// out (rows x l.out) = x (rows x l.in) W + b
void dense(const float* x, std::size_t rows, const DenseLayer& l, float* out) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* o = out + r * l.out;
    std::copy(l.bias.begin(), l.bias.end(), o);
    const float* xr = x + r * l.in;
    for (std::size_t i = 0; i < l.in; ++i) {
      const float xi = xr[i];
      const float* w = l.weight.data() + i * l.out;
      for (std::size_t j = 0; j < l.out; ++j) o[j] += xi * w[j];
    }
  }
}

void gelu(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

void layer_norm(const float* x, std::size_t rows, std::size_t d, const NormLayer& n, float* out) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float mean = 0.0f;
    for (std::size_t i = 0; i < d; ++i) mean += xr[i];
    mean /= static_cast<float>(d);
    float var = 0.0f;
    for (std::size_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<float>(d);
    const float inv = 1.0f / std::sqrt(var + n.eps);
    for (std::size_t i = 0; i < d; ++i) out[r * d + i] = (xr[i] - mean) * inv * n.gain[i] + n.bias[i];
  }
}

int rounded_id(float value, int max_id) {
  const float r = std::nearbyint(value);  // half to even, like numpy.rint
  return static_cast<int>(std::clamp(r, 0.0f, static_cast<float>(max_id)));
}

}  // namespace

ObjectTokenActor::ObjectTokenActor(ActorSpec spec) : spec_(std::move(spec)) {
  const ActorSpec& s = spec_;
  if (s.obs_dim == 0) bad("obs_dim", "must be > 0");
  if (s.d_model == 0) bad("d_model", "must be > 0");
  if (s.num_heads == 0 || s.d_model % s.num_heads) bad("num_heads", "must be > 0 and divide d_model");
  if (s.num_shapes == 0) bad("num_shapes", "must be > 0");
  slots_ = s.shape_ix.size();
  if (slots_ == 0) bad("shape_ix", "must name at least one object slot");
  check_columns(s.pos_ix, "pos_ix", 3 * slots_, s.obs_dim);
  check_columns(s.rgb_ix, "rgb_ix", 3 * slots_, s.obs_dim);
  check_columns(s.size_ix, "size_ix", 3 * slots_, s.obs_dim);
  check_columns(s.shape_ix, "shape_ix", slots_, s.obs_dim);
  check_columns(s.present_ix, "present_ix", slots_, s.obs_dim);
  check_columns(s.ee_ix, "ee_ix", 3, s.obs_dim);
  check_columns(s.proprio_ix, "proprio_ix", s.proprio_ix.size(), s.obs_dim);
  check_columns({s.stage_col}, "stage_col", 1, s.obs_dim);
  const std::size_t d = s.d_model;
  token_in_ = 12 + s.num_shapes;
  check_dense(s.token1, "token1", token_in_, 0);
  check_dense(s.token2, "token2", s.token1.out, d);
  check_size(s.film_scale, "film_scale", d);
  check_size(s.film_shift, "film_shift", d);
  std::size_t widest = std::max(s.token1.out, 3 * d);
  for (std::size_t b = 0; b < s.blocks.size(); ++b) {
    const TokenBlock& blk = s.blocks[b];
    const std::string name = "blocks[" + std::to_string(b) + "]";
    check_size(blk.norm1.gain, name + ".norm1.gain", d);
    check_size(blk.norm1.bias, name + ".norm1.bias", d);
    check_size(blk.norm2.gain, name + ".norm2.gain", d);
    check_size(blk.norm2.bias, name + ".norm2.bias", d);
    check_dense(blk.qkv, name + ".qkv", d, 3 * d);
    check_dense(blk.attn_out, name + ".attn_out", d, d);
    check_dense(blk.ff1, name + ".ff1", d, 0);
    check_dense(blk.ff2, name + ".ff2", blk.ff1.out, d);
    widest = std::max(widest, blk.ff1.out);
  }
  if (s.query_base.empty() || s.query_base.size() % d) bad("query_base", "must hold num_queries x d_model values");
  num_queries_ = s.query_base.size() / d;
  proprio_dim_ = s.proprio_ix.size() + s.max_stages + 1;
  check_dense(s.proprio, "proprio", proprio_dim_, d);
  check_dense(s.cross_q, "cross_q", d, d);
  check_dense(s.cross_kv, "cross_kv", d, 2 * d);
  check_dense(s.cross_out, "cross_out", d, d);
  if (s.head.empty()) bad("head", "needs at least one layer");
  std::size_t in = s.lang.size() + proprio_dim_ + num_queries_ * d + num_queries_ * 6;
  std::size_t head_widest = in;
  for (std::size_t i = 0; i < s.head.size(); ++i) {
    check_dense(s.head[i], "head[" + std::to_string(i) + "]", in, 0);
    in = s.head[i].out;
    head_widest = std::max(head_widest, in);
  }
  const std::size_t rows = std::max(slots_, num_queries_);
  tokens_.resize(slots_ * d);
  token_in_buf_.resize(slots_ * token_in_);
  hidden_.resize(slots_ * widest);
  normed_.resize(slots_ * d);
  qkv_.resize(slots_ * 3 * d);
  attn_.resize(rows * d);
  scores_.resize(slots_);
  weights_.resize(num_queries_ * slots_);
  proprio_.resize(proprio_dim_);
  query_.resize(num_queries_ * d);
  q_.resize(num_queries_ * d);
  kv_.resize(slots_ * 2 * d);
  pooled_.resize(num_queries_ * d);
  x_.resize(head_widest);
  y_.resize(head_widest);
  live_.resize(slots_);
}

void ObjectTokenActor::attend(const float* q, std::size_t q_stride, std::size_t num_q, const float* k,
                              const float* v, std::size_t kv_stride, std::size_t num_kv, float* out,
                              float* mean_weights) const {
  const std::size_t d = spec_.d_model, heads = spec_.num_heads, hd = d / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (mean_weights) std::fill(mean_weights, mean_weights + num_q * num_kv, 0.0f);
  for (std::size_t r = 0; r < num_q; ++r) {
    for (std::size_t h = 0; h < heads; ++h) {
      const float* qh = q + r * q_stride + h * hd;
      float top = neg_inf;
      for (std::size_t s = 0; s < num_kv; ++s) {
        const float* kh = k + s * kv_stride + h * hd;
        float dot = 0.0f;
        for (std::size_t c = 0; c < hd; ++c) dot += qh[c] * kh[c];
        scores_[s] = dot * scale;
        top = std::max(top, scores_[s]);
      }
      float total = 0.0f;
      for (std::size_t s = 0; s < num_kv; ++s) total += (scores_[s] = std::exp(scores_[s] - top));
      float* o = out + r * d + h * hd;
      std::fill(o, o + hd, 0.0f);
      for (std::size_t s = 0; s < num_kv; ++s) {
        const float w = scores_[s] / total;
        const float* vh = v + s * kv_stride + h * hd;
        for (std::size_t c = 0; c < hd; ++c) o[c] += w * vh[c];
        if (mean_weights) mean_weights[r * num_kv + s] += w / static_cast<float>(heads);
      }
    }
  }
}

void ObjectTokenActor::forward(const float* obs, float* action) const {
  const ActorSpec& s = spec_;
  const std::size_t d = s.d_model;
  for (std::size_t i = 0; i < s.obs_dim; ++i) {
    if (!std::isfinite(obs[i])) {
      std::fill(action, action + action_dim(), std::numeric_limits<float>::quiet_NaN());
      return;
    }
  }
  // Object tokens of the present slots only (position, position relative to the end effector, colour, one-hot
  // shape, size): absent slots are masked out of every attention, so leaving them out gives the same result.
  float ee[3];
  for (int c = 0; c < 3; ++c) ee[c] = obs[s.ee_ix[c]];
  std::size_t n = 0;
  for (std::size_t k = 0; k < slots_; ++k) {
    if (!(obs[s.present_ix[k]] >= 0.5f)) continue;
    live_[n] = k;
    float* t = token_in_buf_.data() + n * token_in_;
    std::fill(t, t + token_in_, 0.0f);
    for (int c = 0; c < 3; ++c) {
      const float p = obs[s.pos_ix[3 * k + c]];
      t[c] = p;
      t[3 + c] = p - ee[c];
      t[6 + c] = obs[s.rgb_ix[3 * k + c]];
      t[9 + s.num_shapes + c] = obs[s.size_ix[3 * k + c]];
    }
    t[9 + rounded_id(obs[s.shape_ix[k]], static_cast<int>(s.num_shapes) - 1)] = 1.0f;
    ++n;
  }
  if (n == 0) {  // nothing to attend to: undefined, as in the network (the caller holds)
    std::fill(action, action + action_dim(), std::numeric_limits<float>::quiet_NaN());
    return;
  }
  dense(token_in_buf_.data(), n, s.token1, hidden_.data());
  gelu(hidden_.data(), n * s.token1.out);
  dense(hidden_.data(), n, s.token2, tokens_.data());
  for (std::size_t k = 0; k < n; ++k) {
    for (std::size_t i = 0; i < d; ++i) tokens_[k * d + i] = tokens_[k * d + i] * s.film_scale[i] + s.film_shift[i];
  }
  for (const TokenBlock& blk : s.blocks) {
    layer_norm(tokens_.data(), n, d, blk.norm1, normed_.data());
    dense(normed_.data(), n, blk.qkv, qkv_.data());
    attend(qkv_.data(), 3 * d, n, qkv_.data() + d, qkv_.data() + 2 * d, 3 * d, n, attn_.data(), nullptr);
    dense(attn_.data(), n, blk.attn_out, normed_.data());
    for (std::size_t i = 0; i < n * d; ++i) tokens_[i] += normed_[i];
    layer_norm(tokens_.data(), n, d, blk.norm2, normed_.data());
    dense(normed_.data(), n, blk.ff1, hidden_.data());
    for (std::size_t i = 0; i < n * blk.ff1.out; ++i) hidden_[i] = std::max(hidden_[i], 0.0f);
    dense(hidden_.data(), n, blk.ff2, normed_.data());
    for (std::size_t i = 0; i < n * d; ++i) tokens_[i] += normed_[i];
  }
  // Queries: learned base (with the instruction) plus the projected proprioception and one-hot stage.
  std::fill(proprio_.begin(), proprio_.end(), 0.0f);
  for (std::size_t i = 0; i < s.proprio_ix.size(); ++i) proprio_[i] = obs[s.proprio_ix[i]];
  proprio_[s.proprio_ix.size() + rounded_id(obs[s.stage_col], static_cast<int>(s.max_stages))] = 1.0f;
  dense(proprio_.data(), 1, s.proprio, q_.data());
  for (std::size_t r = 0; r < num_queries_; ++r) {
    for (std::size_t i = 0; i < d; ++i) query_[r * d + i] = s.query_base[r * d + i] + q_[i];
  }
  dense(query_.data(), num_queries_, s.cross_q, q_.data());
  dense(tokens_.data(), n, s.cross_kv, kv_.data());
  attend(q_.data(), d, num_queries_, kv_.data(), kv_.data() + d, 2 * d, n, attn_.data(), weights_.data());
  dense(attn_.data(), num_queries_, s.cross_out, pooled_.data());
  // Actor input: language, proprioception, pooled queries, attention-weighted relative and absolute positions.
  float* x = x_.data();
  x = std::copy(s.lang.begin(), s.lang.end(), x);
  x = std::copy(proprio_.begin(), proprio_.end(), x);
  x = std::copy(pooled_.begin(), pooled_.end(), x);
  for (std::size_t r = 0; r < num_queries_; ++r) {
    float rel[3] = {0.0f, 0.0f, 0.0f}, pos[3] = {0.0f, 0.0f, 0.0f};
    for (std::size_t j = 0; j < n; ++j) {
      const float w = weights_[r * n + j];
      const std::size_t k = live_[j];
      for (int c = 0; c < 3; ++c) {
        const float p = obs[s.pos_ix[3 * k + c]];
        rel[c] += w * (p - ee[c]);
        pos[c] += w * p;
      }
    }
    x = std::copy(rel, rel + 3, x);
    x = std::copy(pos, pos + 3, x);
  }
  float* in = x_.data();
  float* out = y_.data();
  for (std::size_t i = 0; i < s.head.size(); ++i) {
    dense(in, 1, s.head[i], out);
    if (i + 1 < s.head.size()) gelu(out, s.head[i].out);
    std::swap(in, out);
  }
  for (std::size_t j = 0; j < action_dim(); ++j) action[j] = std::tanh(in[j]);
}

}  // namespace coda_core
