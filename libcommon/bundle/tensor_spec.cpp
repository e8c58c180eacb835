// The task's tensor specs: reading them from a task record, finding one by buffer reference, sizes.
#include "libcommon/bundle/tensor_spec.hpp"

#include <algorithm>
#include <cctype>

#include "libcommon/bundle/plan.hpp"
#include "libcommon/dtype.hpp"

namespace ca::bundle {

namespace {
// A size the shape cannot have: a plan's scratch shape comes from its expressions, and a product
// that wraps would allocate (and admit to memory) a buffer of another size than the plan declares.
PlanError too_large(const TensorSpec& t) {
  return PlanError((t.name.empty() ? std::string("tensor") : t.name) + ": shape too large (its size passes 2^63 bytes)");
}
}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape)
    if (__builtin_mul_overflow(n, d, &n)) throw too_large(*this);
  return n;
}

int64_t TensorSpec::bytes() const {
  const DtypeInfo* d = dtype_info(dtype);
  if (!d) throw PlanError((name.empty() ? std::string("tensor") : name) + ": unknown dtype '" + dtype + "'");
  int64_t b = 0;
  if (__builtin_mul_overflow(numel(), static_cast<int64_t>(d->bytes), &b)) throw too_large(*this);
  return b;
}

bool IoSpec::shapes_known() const {
  if (inputs.empty() && outputs.empty()) return false;
  for (auto* v : {&inputs, &outputs, &params})
    for (auto& t : *v)
      if (!t.known) return false;
  return true;
}

static TensorSpec tensor_spec(const Json& j, const std::string& fallback_name) {
  TensorSpec t;
  t.name = fallback_name;
  if (!j.is_object()) return t;
  if (j.contains("name") && j["name"].is_string()) t.name = j["name"];
  if (j.contains("dtype") && j["dtype"].is_string()) t.dtype = normalize_dtype(j["dtype"]);
  if (j.contains("shape") && j["shape"].is_array()) {
    for (auto& d : j["shape"])
      if (d.is_number_integer()) t.shape.push_back(d.get<int64_t>());
    t.known = !t.dtype.empty() && t.shape.size() == j["shape"].size();
  }
  t.module_buffer = j.contains("buffer") && j["buffer"].is_boolean() && j["buffer"].get<bool>();
  return t;
}

// `peak_bytes` of `j` when it is a byte count (a non-negative integer), else nothing.
static std::optional<ReferencePeak> peak_of(const Json& j, const char* from) {
  if (!j.contains("peak_bytes") || !j["peak_bytes"].is_number_integer() || j["peak_bytes"].get<int64_t>() < 0) return std::nullopt;
  return ReferencePeak{j["peak_bytes"].get<int64_t>(), from};
}

IoSpec IoSpec::from_json(const Json& task) {
  IoSpec io;
  auto list = [&](const char* key, std::vector<TensorSpec>& out) {
    if (!task.contains(key)) return;
    const Json& v = task[key];
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) out.push_back(tensor_spec(v[i], std::to_string(i)));
    } else if (v.is_object()) {
      for (auto& [k, x] : v.items()) out.push_back(tensor_spec(x, k));
    }
  };
  list("inputs", io.inputs);
  list("outputs", io.outputs);
  list("params", io.params);
  for (const char* key : {"init_inputs", "init_values"})
    if (task.contains(key) && task[key].is_array())
      for (auto& v : task[key]) io.init_values.push_back(v);
  if (task.contains("reference") && task["reference"].is_object())
    io.reference_peak = peak_of(task["reference"], "task_record");
  return io;
}

IoSpec IoSpec::from_load(const Json& answer) {
  IoSpec io = from_json(answer);
  io.reference_peak = peak_of(answer, "worker");
  return io;
}

const TensorSpec* IoSpec::find(const BufferRef& ref, int* index) const {
  const std::vector<TensorSpec>* list = ref.space == Space::input    ? &inputs
                                        : ref.space == Space::output ? &outputs
                                        : ref.space == Space::param  ? &params
                                                                     : nullptr;
  if (!list) return nullptr;
  bool numeric = !ref.key.empty() && std::all_of(ref.key.begin(), ref.key.end(), ::isdigit);
  for (size_t i = 0; i < list->size(); ++i) {
    if ((numeric && ref.space != Space::param && std::to_string(i) == ref.key) || (*list)[i].name == ref.key) {
      if (index) *index = static_cast<int>(i);
      return &(*list)[i];
    }
  }
  return nullptr;
}

Json IoSpec::to_json() const {
  auto list = [](const std::vector<TensorSpec>& v) {
    Json a = Json::array();
    for (auto& t : v) {
      a.push_back(Json{{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}});
      if (t.module_buffer) a.back()["buffer"] = true;
    }
    return a;
  };
  return Json{{"inputs", list(inputs)}, {"outputs", list(outputs)}, {"params", list(params)}, {"init_inputs", init_values}};
}

int64_t IoSpec::io_bytes() const {
  int64_t n = 0;
  for (auto* v : {&inputs, &outputs})
    for (auto& t : *v)
      if (t.known) n += t.bytes();
  return n;
}

}  // namespace ca::bundle
