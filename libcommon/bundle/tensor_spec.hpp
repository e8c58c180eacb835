// The task's tensors a plan is bound against (DESIGN.md §2): names, shapes and dtypes of the
// inputs, outputs and parameters, and the init values, from a task record or the worker's `load`.
//
//   IoSpec io = IoSpec::from_json(task);          // may be partial: a tensor without shape or dtype
//   if (io.shapes_known()) bytes = io.io_bytes();  // inputs + outputs
//   IoSpec judged = IoSpec::from_load(answer);     // the worker's word, its peak memory included
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::bundle {

struct BufferRef;  // plan.hpp

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors name ("" when the task did not give one the dtype table knows)
  std::vector<int64_t> shape;
  bool known = false;  // shape and dtype given
  // A params entry that is a module buffer (BatchNorm's running statistics, a registered mask), not
  // an nn.Parameter: "buffer": true in the worker's load answer and in task records.
  bool module_buffer = false;
  int64_t numel() const;
  int64_t bytes() const;  // PlanError when the dtype is unknown
};

// The reference's peak memory: the most tensor memory one forward of the task's reference held at
// once beyond its inputs and params (the worker's peak.py), which the scratch cap follows (rules.hpp),
// and who says so. Only the judge's own worker is "worker"; a record's claim stays "task_record".
struct ReferencePeak {
  int64_t bytes = 0;
  std::string from;  // "worker" (the worker's load answer, IoSpec::from_load) or "task_record"
};

// What the plan is bound against: the task's tensors (from the task record or the worker's `load`).
struct IoSpec {
  std::vector<TensorSpec> inputs, outputs, params;
  std::vector<Json> init_values;  // get_init_inputs(): scalars are usable as init.N
  std::optional<ReferencePeak> reference_peak;  // none: nothing measured it (the scratch cap's io floor)
  bool shapes_known() const;
  // Reads `inputs`/`outputs` ([{name?, shape, dtype}]), `params` (list or {name: {shape, dtype}}),
  // `init_inputs` from a task record or a worker reply; missing parts stay empty. The reference's
  // peak only as a task record states it (`reference.peak_bytes`: from "task_record").
  static IoSpec from_json(const Json& task);
  // The worker's `load` answer: the same specs, and its own measurement `peak_bytes` (from
  // "worker"), never a `reference` section it might carry: what a judge binds against.
  static IoSpec from_load(const Json& answer);
  const TensorSpec* find(const BufferRef& ref, int* index = nullptr) const;
  Json to_json() const;  // the form from_json reads
  int64_t io_bytes() const;  // inputs + outputs whose shape and dtype are known
};

}  // namespace ca::bundle
