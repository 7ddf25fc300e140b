// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "glue.hpp"

#include <algorithm>
#include <sstream>
#include <utility>

#include "coda_core/gae.hpp"

namespace coda_core {
namespace glue {

namespace {

using Shape = std::vector<py::ssize_t>;
using F32Cast = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I32Cast = py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>;

// The potential language's identifier rule (src/potential.cpp), for layout names checked before they reach it.
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_keyword(const std::string& s) { return s == "stage" || s == "and" || s == "or" || s == "not"; }

std::string shape_str(const py::ssize_t* dims, py::ssize_t ndim) {
  std::ostringstream os;
  os << "(";
  for (py::ssize_t i = 0; i < ndim; ++i) os << (i ? ", " : "") << dims[i];
  os << (ndim == 1 ? ",)" : ")");
  return os.str();
}

py::array to_array(py::handle obj, const std::string& name) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  py::array a = py::array::ensure(obj);
  if (!a) throw py::value_error(name + ": expected a numpy array, got " + std::string(py::str(py::type::handle_of(obj))));
  return a;
}

void check_shape(const py::array& a, const std::string& name, const Shape& shape) {
  bool ok = a.ndim() == static_cast<py::ssize_t>(shape.size());
  for (std::size_t i = 0; ok && i < shape.size(); ++i) ok = a.shape(static_cast<py::ssize_t>(i)) == shape[i];
  if (!ok) {
    throw py::value_error(name + ": expected shape " + shape_str(shape.data(), static_cast<py::ssize_t>(shape.size())) +
                          ", got " + shape_str(a.shape(), a.ndim()));
  }
}

// A C-contiguous float32 view of obj (no copy when it already is one). Integer, bool and other
// float dtypes are converted; anything else is a ValueError naming the argument. An empty
// shape vector means "any shape".
F32 as_f32(py::handle obj, const std::string& name, const Shape& shape) {
  // Note: never default-construct an array_t (that allocates an empty numpy array).
  if (F32::check_(obj)) {
    auto out = py::reinterpret_borrow<F32>(obj);
    if (!shape.empty()) check_shape(out, name, shape);
    return out;
  }
  py::array a = to_array(obj, name);
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b') {
    throw py::value_error(name + ": expected a float32 array, got dtype " + std::string(py::str(a.dtype())));
  }
  auto out = py::reinterpret_borrow<F32>(F32Cast::ensure(a));
  if (!shape.empty()) check_shape(out, name, shape);
  return out;
}

I32 as_i32(py::handle obj, const std::string& name, const Shape& shape) {
  if (I32::check_(obj)) {
    auto out = py::reinterpret_borrow<I32>(obj);
    check_shape(out, name, shape);
    return out;
  }
  py::array a = to_array(obj, name);
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    throw py::value_error(name + ": expected an int32 array, got dtype " + std::string(py::str(a.dtype())));
  }
  auto out = py::reinterpret_borrow<I32>(I32Cast::ensure(a));
  check_shape(out, name, shape);
  return out;
}

// Source text back to str: the bytes came from str.encode("utf-8", "surrogatepass").
py::str text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<py::ssize_t>(s.size()), "surrogatepass");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::ssize_t ss(std::size_t v) { return static_cast<py::ssize_t>(v); }

py::array view(py::object self, void* ptr, const Shape& shape, bool int32 = false) {
  py::dtype dt = int32 ? py::dtype::of<std::int32_t>() : py::dtype::of<float>();
  return py::array(dt, shape, ptr, self);
}

std::size_t positive(std::int64_t v, const char* name) {
  if (v < 1) throw py::value_error(std::string(name) + " must be >= 1, got " + std::to_string(v));
  return static_cast<std::size_t>(v);
}

void check_discount(double gamma, double gae_lambda) {
  if (!(gamma >= 0.0 && gamma <= 1.0)) throw py::value_error("gamma must be in [0, 1], got " + std::to_string(gamma));
  if (!(gae_lambda >= 0.0 && gae_lambda <= 1.0)) {
    throw py::value_error("gae_lambda must be in [0, 1], got " + std::to_string(gae_lambda));
  }
}

}  // namespace

F32 to_f32(py::handle obj, const std::string& name, const std::vector<py::ssize_t>& shape) {
  return as_f32(obj, name, shape);
}

void translate_potential_error(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const PotentialError& e) {
    py::object cls = py::module_::import("coda_core_cpp.errors").attr("PotentialError");
    py::object inst = cls(e.message(), e.line(), e.column());
    PyErr_SetObject(cls.ptr(), inst.ptr());
  }
}

std::tuple<F32, F32> compute_gae(py::handle rewards, py::handle values, py::handle episode_starts,
                                 py::handle last_values, py::handle dones, double gamma, double gae_lambda) {
  check_discount(gamma, gae_lambda);
  F32 r = as_f32(rewards, "rewards", {});
  if (r.ndim() != 2) throw py::value_error("rewards: expected shape (T, n_envs), got " + shape_str(r.shape(), r.ndim()));
  const Shape tn = {r.shape(0), r.shape(1)};
  F32 v = as_f32(values, "values", tn);
  F32 es = as_f32(episode_starts, "episode_starts", tn);
  F32 lv = as_f32(last_values, "last_values", {tn[1]});
  F32 d = as_f32(dones, "dones", {tn[1]});
  F32 adv(tn), ret(tn);
  const float *pr = r.data(), *pv = v.data(), *pes = es.data(), *plv = lv.data(), *pd = d.data();
  float *pa = adv.mutable_data(), *pret = ret.mutable_data();
  {
    py::gil_scoped_release nogil;
    coda_core::compute_gae(pr, pv, pes, plv, pd, static_cast<std::size_t>(tn[0]), static_cast<std::size_t>(tn[1]),
                           gamma, gae_lambda, pa, pret);
  }
  return {adv, ret};
}

std::unique_ptr<RolloutBuffer> make_buffer(std::int64_t buffer_size, std::int64_t n_envs, std::int64_t obs_dim,
                                           std::int64_t action_dim) {
  return std::make_unique<RolloutBuffer>(positive(buffer_size, "buffer_size"), positive(n_envs, "n_envs"),
                                         positive(obs_dim, "obs_dim"), positive(action_dim, "action_dim"));
}

void buffer_add(RolloutBuffer& buf, py::handle obs, py::handle action, py::handle reward, py::handle episode_start,
                py::handle value, py::handle log_prob, py::handle stage) {
  const py::ssize_t e = ss(buf.n_envs());
  F32 o = as_f32(obs, "obs", {e, ss(buf.obs_dim())});
  F32 a = as_f32(action, "action", {e, ss(buf.action_dim())});
  F32 r = as_f32(reward, "reward", {e});
  F32 es = as_f32(episode_start, "episode_start", {e});
  F32 v = as_f32(value, "value", {e});
  F32 lp = as_f32(log_prob, "log_prob", {e});
  I32 st = as_i32(stage, "stage", {e});
  py::gil_scoped_release nogil;
  buf.add(o.data(), a.data(), r.data(), es.data(), v.data(), lp.data(), st.data());
}

void buffer_reset(RolloutBuffer& buf) {
  py::gil_scoped_release nogil;
  buf.reset();
}

void buffer_compute_gae(RolloutBuffer& buf, py::handle last_values, py::handle dones, double gamma, double gae_lambda) {
  check_discount(gamma, gae_lambda);
  const py::ssize_t e = ss(buf.n_envs());
  F32 lv = as_f32(last_values, "last_values", {e});
  F32 d = as_f32(dones, "dones", {e});
  py::gil_scoped_release nogil;
  buf.compute_returns_and_advantage(lv.data(), d.data(), gamma, gae_lambda);
}

py::array buffer_observations(py::object self) {
  RolloutBuffer& b = self.cast<RolloutBuffer&>();
  return view(self, b.observations(), {ss(b.buffer_size()), ss(b.n_envs()), ss(b.obs_dim())});
}
py::array buffer_actions(py::object self) {
  RolloutBuffer& b = self.cast<RolloutBuffer&>();
  return view(self, b.actions(), {ss(b.buffer_size()), ss(b.n_envs()), ss(b.action_dim())});
}
#define CODA_STEP_VIEW(NAME, INT)                                                  \
  py::array buffer_##NAME(py::object self) {                                       \
    RolloutBuffer& b = self.cast<RolloutBuffer&>();                                \
    return view(self, b.NAME(), {ss(b.buffer_size()), ss(b.n_envs())}, INT);       \
  }
CODA_STEP_VIEW(rewards, false)
CODA_STEP_VIEW(episode_starts, false)
CODA_STEP_VIEW(values, false)
CODA_STEP_VIEW(log_probs, false)
CODA_STEP_VIEW(advantages, false)
CODA_STEP_VIEW(returns, false)
CODA_STEP_VIEW(stages, true)
#undef CODA_STEP_VIEW

std::size_t buffer_pos(const RolloutBuffer& buf) { return buf.pos(); }
bool buffer_full(const RolloutBuffer& buf) { return buf.full(); }
std::string buffer_repr(const RolloutBuffer& buf) {
  return "RolloutBuffer(buffer_size=" + std::to_string(buf.buffer_size()) + ", n_envs=" + std::to_string(buf.n_envs()) +
         ", obs_dim=" + std::to_string(buf.obs_dim()) + ", action_dim=" + std::to_string(buf.action_dim()) +
         ", pos=" + std::to_string(buf.pos()) + ")";
}

MinibatchIterator::MinibatchIterator(py::object owner, std::size_t batch_size, std::uint64_t seed)
    : owner_(std::move(owner)), buf_(&owner_.cast<RolloutBuffer&>()), batch_size_(batch_size) {
  const std::size_t n = buf_->pos() * buf_->n_envs();
  if (n == 0) throw py::value_error("minibatches: the buffer is empty; add steps first");
  py::gil_scoped_release nogil;
  order_ = seeded_permutation(n, seed);
}

std::size_t MinibatchIterator::num_batches() const { return (order_.size() + batch_size_ - 1) / batch_size_; }

Minibatch MinibatchIterator::next() {
  if (next_ >= order_.size()) throw py::stop_iteration();
  const std::size_t count = std::min(batch_size_, order_.size() - next_);
  const py::ssize_t c = ss(count);
  py::array_t<std::int64_t> idx({c});
  F32 obs({c, ss(buf_->obs_dim())}), act({c, ss(buf_->action_dim())}), val({c}), lp({c}), adv({c}), ret({c});
  I32 st({c});
  const std::int64_t* src = order_.data() + next_;
  std::int64_t* pidx = idx.mutable_data();
  float *po = obs.mutable_data(), *pa = act.mutable_data(), *pv = val.mutable_data(), *plp = lp.mutable_data(),
        *padv = adv.mutable_data(), *pret = ret.mutable_data();
  std::int32_t* pst = st.mutable_data();
  {
    py::gil_scoped_release nogil;
    std::copy(src, src + count, pidx);
    buf_->gather(src, count, po, pa, pv, plp, padv, pret, pst);
  }
  next_ += count;
  return Minibatch{idx, obs, act, val, lp, adv, ret, st};
}

MinibatchIterator buffer_minibatches(py::object self, std::int64_t batch_size, std::uint64_t seed) {
  return MinibatchIterator(self, positive(batch_size, "batch_size"), seed);
}
MinibatchIterator& iterator_self(MinibatchIterator& it) { return it; }
Minibatch iterator_next(MinibatchIterator& it) { return it.next(); }

std::unique_ptr<TransitionRing> make_ring(std::int64_t capacity, std::int64_t record_size) {
  return std::make_unique<TransitionRing>(positive(capacity, "capacity"), positive(record_size, "record_size"));
}

bool ring_push(TransitionRing& ring, py::handle record) {
  // Holds the GIL: the copy takes nanoseconds, and re-taking a released GIL is the only step
  // that could block the control loop.
  F32 r = as_f32(record, "record", {ss(ring.record_size())});
  return ring.push(r.data());
}

F32 ring_drain(TransitionRing& ring, std::int64_t max_records) {
  std::size_t want = ring.size();
  if (max_records >= 0) want = std::min(want, static_cast<std::size_t>(max_records));
  F32 out({ss(want), ss(ring.record_size())});
  float* p = out.mutable_data();
  std::size_t got = 0;
  {
    py::gil_scoped_release nogil;
    got = ring.pop(p, want);
  }
  if (got == want) return out;
  return py::reinterpret_borrow<F32>(F32Cast::ensure(out[py::slice(0, ss(got), 1)]));
}

std::unique_ptr<PotentialProgram> compile_program(py::handle source, py::handle layout) {
  if (!py::isinstance<py::str>(source)) {
    throw py::type_error("source: expected str, got " + std::string(py::str(py::type::handle_of(source))));
  }
  py::object encoded = py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(source.ptr(), "utf-8", "surrogatepass"));
  if (!encoded) throw py::error_already_set();
  std::string src = encoded.cast<std::string>();
  if (!PyMapping_Check(layout.ptr()) || py::isinstance<py::str>(layout)) {
    throw py::value_error("layout: expected a mapping name -> (offset, length), got " +
                          std::string(py::str(py::type::handle_of(layout))));
  }
  std::vector<LayoutEntry> entries;
  for (auto item : py::reinterpret_borrow<py::object>(layout).attr("items")()) {
    py::tuple kv = item.cast<py::tuple>();
    if (!py::isinstance<py::str>(kv[0])) throw py::value_error("layout: names must be str, got " + std::string(py::repr(kv[0])));
    // Names are shown as Python's repr: a name from elsewhere may hold quotes, NUL bytes or lone surrogates.
    const std::string shown = py::repr(kv[0]);
    py::handle val = kv[1];
    const std::string where = "layout[" + shown + "]";
    if (!PySequence_Check(val.ptr()) || py::isinstance<py::str>(val) || PySequence_Size(val.ptr()) != 2) {
      throw py::value_error(where + ": expected (offset, length), got " + std::string(py::repr(val)));
    }
    py::sequence seq = py::reinterpret_borrow<py::sequence>(val);
    py::int_ nums[2];
    for (int i = 0; i < 2; ++i) {
      py::object v = seq[static_cast<std::size_t>(i)];
      if (py::isinstance<py::bool_>(v) || !PyIndex_Check(v.ptr())) {
        throw py::value_error(where + ": expected integers (offset, length), got " + std::string(py::repr(val)));
      }
      nums[i] = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
      if (!nums[i]) throw py::error_already_set();
    }
    // The checks of PotentialProgram::compile, in its order, on the Python values: an integer beyond 64 bits is
    // out of range like any other, and the core only ever sees names it can print.
    const py::str name_obj = py::reinterpret_borrow<py::str>(kv[0]);
    const bool ascii = PyUnicode_IS_ASCII(name_obj.ptr());
    const std::string name = ascii ? name_obj.cast<std::string>() : std::string();
    const bool valid = ascii && !name.empty() && is_ident_start(name[0]) &&
                       std::all_of(name.begin(), name.end(), is_ident_char) && !is_keyword(name);
    if (!valid) throw py::value_error("layout: " + shown + " is not a valid name (letters, digits, '_'; not a keyword)");
    int overflow = 0;
    const long long length = PyLong_AsLongLongAndOverflow(nums[1].ptr(), &overflow);
    if (overflow || length < 1 || length > 3) {
      throw py::value_error(where + ": length must be 1, 2 or 3, got " + std::string(py::str(nums[1])));
    }
    const long long offset = PyLong_AsLongLongAndOverflow(nums[0].ptr(), &overflow);
    if (overflow || offset < 0 || offset > (1LL << 30)) {
      throw py::value_error(where + ": offset must be in [0, 2**30], got " + std::string(py::str(nums[0])));
    }
    entries.push_back(LayoutEntry{name, static_cast<std::int64_t>(offset), static_cast<std::int64_t>(length)});
  }
  py::gil_scoped_release nogil;
  return std::make_unique<PotentialProgram>(PotentialProgram::compile(src, entries));
}

py::tuple program_evaluate(const PotentialProgram& prog, py::handle state, std::int64_t stage) {
  F32 s = as_f32(state, "state", {});
  if (s.ndim() != 1) throw py::value_error("state: expected a 1-D array, got shape " + shape_str(s.shape(), s.ndim()));
  if (stage < 0 || stage > prog.num_stages()) {
    throw py::value_error("stage must be in [0, " + std::to_string(prog.num_stages()) + "], got " +
                          std::to_string(stage));
  }
  // A single state is a few hundred nanoseconds of work at most: cheaper than a GIL round trip.
  const auto result = prog.evaluate(s.data(), static_cast<std::size_t>(s.shape(0)), static_cast<std::int32_t>(stage));
  return py::make_tuple(result.first, result.second);
}

std::tuple<F32, I32> program_evaluate_batch(const PotentialProgram& prog, py::handle states, py::handle stages) {
  F32 s = as_f32(states, "states", {});
  if (s.ndim() != 2) throw py::value_error("states: expected shape (N, D), got " + shape_str(s.shape(), s.ndim()));
  const py::ssize_t n = s.shape(0);
  I32 st = as_i32(stages, "stages", {n});
  F32 phi({n});
  I32 out({n});
  const float* ps = s.data();
  const std::int32_t* pst = st.data();
  float* pphi = phi.mutable_data();
  std::int32_t* pout = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    prog.evaluate_batch(ps, static_cast<std::size_t>(n), static_cast<std::size_t>(s.shape(1)), pst, pphi, pout);
  }
  return {phi, out};
}

std::vector<std::string> program_stage_names(const PotentialProgram& prog) {
  std::vector<std::string> names;
  for (const auto& s : prog.stages()) names.push_back(s.name);
  return names;
}

py::list program_stages(const PotentialProgram& prog) {
  py::list out;
  for (const auto& s : prog.stages()) out.append(py::make_tuple(s.name, text(s.progress_source), text(s.done_source)));
  return out;
}

py::str program_source(const PotentialProgram& prog) { return text(prog.source()); }

py::dict program_layout(const PotentialProgram& prog) {
  py::dict d;
  for (const auto& e : prog.layout()) d[py::str(e.name)] = py::make_tuple(e.offset, e.length);
  return d;
}

std::string program_repr(const PotentialProgram& prog) {
  std::string s = "PotentialProgram(stages=[";
  for (std::size_t i = 0; i < prog.stages().size(); ++i) s += (i ? ", '" : "'") + prog.stages()[i].name + "'";
  return s + "])";
}

F32 shape_rewards(py::handle rewards, py::handle phi, py::handle next_phi, py::handle dones, double gamma) {
  if (!(gamma >= 0.0 && gamma <= 1.0)) throw py::value_error("gamma must be in [0, 1], got " + std::to_string(gamma));
  F32 r = as_f32(rewards, "rewards", {});
  const Shape shape(r.shape(), r.shape() + r.ndim());
  if (shape.empty()) throw py::value_error("rewards: expected an array with at least one dimension, got a scalar");
  F32 p = as_f32(phi, "phi", shape);
  F32 np_ = as_f32(next_phi, "next_phi", shape);
  F32 d = as_f32(dones, "dones", shape);
  F32 out(shape);
  const float *pr = r.data(), *pp = p.data(), *pn = np_.data(), *pd = d.data();
  float* po = out.mutable_data();
  const std::size_t n = static_cast<std::size_t>(r.size());
  {
    py::gil_scoped_release nogil;
    coda_core::shape_rewards(pr, pp, pn, pd, n, gamma, po);
  }
  return out;
}

}  // namespace glue
}  // namespace coda_core
