// The reference worker's requests, each spelled once (protocol: libcommon/python/cuda_agent_worker/
// PROTOCOL.md). The tools build them here and send them with WorkerClient::request; a field the
// worker reads is never written by hand in a tool.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::worker::request {

// The mode the task's reference runs in, from its record's `reference.mode`: "train" (KernelBench's,
// and the default for a record without the field: BatchNorm on batch statistics, dropout live) or
// "eval". FieldError naming `reference.mode` (or `reference`) for anything else.
std::string task_mode(const Json& task);
// A task record's `reference` section from the worker's load answer: the mode the reference ran in
// (the worker's word; `asked` when an older worker does not say), whether it is stochastic (the load
// ran it from two RNG states) and the evidence for that, whether it is insensitive (a constant answer
// would pass under the published bound) or ill_conditioned (its fp32 error against float64 is over
// the cap of every bound), each with its `<flag>_evidence`, and its peak memory (`peak_bytes`, the
// most one forward held beyond its inputs and params). Written by ops-synth import and filter.
Json reference_section(const Json& load_answer, const std::string& asked);
// `load`: the task's code, init_inputs, init seed (task_init_seed) and mode (task_mode). FieldError
// without a code, or with a mode that is not one.
Json load(const std::string& task_id, const Json& task);
// The name a task is loaded under in a worker, and the key of every cache of it (a lane's loaded
// tasks, kernel-prof's baselines in memory and in the store): `task_id` and a content id of what the
// worker runs (code, init seed, init inputs). Two tasks that share an id but differ in code are two
// tasks by construction: a reused or edited id never gets the other task's module, inputs or timings.
std::string task_key(const Json& task, const std::string& task_id);
// `unload`: drop a cached task.
Json unload(const std::string& task_id);
// `inputs`: a seeded input set, kept on the device under `keep` (answer: "tensors", as IPC handles).
// `variant` (shift_scale, outliers, seed_stream; "" or "plain" for none): the task's draw varied,
// floating tensors only, or a milder variant where the reference would stop being finite (answer:
// "variant": {"asked", "applied", "params", "tried"}).
Json inputs(const std::string& task_id, uint64_t seed, const std::string& keep, const std::string& variant = "");
// `calibrate`: the reference's error at a claimed precision against float64, per output (answer:
// "calibration", or "calibration_error"); k and floor are the bound's rule (compare.hpp's
// calibration_rule), so the answer's bound_rel_l2 is the one the judge applies.
struct Calibrate {
  std::string precision;  // fp32, tf32, fp16, bf16, int8, fp8
  double k = 8, floor = 5e-6, floor_min = 3e-6;
};
// `reference`: the task's forward on the kept inputs `inputs_key`, its output kept under `keep`;
// with `params_keep`, the Model's parameters are kept too (answer: "params").
Json reference(const std::string& task_id, const std::string& inputs_key, const std::string& keep,
               const std::optional<std::string>& params_keep = std::nullopt,
               const std::optional<Calibrate>& calibrate = std::nullopt);
// `release`: the kept tensors of these keys are freed; with `empty_cache`, torch's cached blocks go
// back to the driver too (for the tool's own allocations when the device is full).
Json release(const std::vector<std::string>& keys, bool empty_cache = false);
// `warm`: pay the profiler's (and with `compile`, torch.compile's) first-use costs now.
Json warm(bool compile);
// `similarity`: the code's AST similarity to every *.py under `dir`.
Json similarity(const std::string& code, const std::string& dir);

// `filters`: the task filters of ops-synth (runs, deterministic, eager time in range, compiles).
struct Filters {
  std::string task_id, code;
  double min_ms = 0, max_ms = 0;  // eager_time_range_ms
  bool check_compile = true;
  std::optional<Json> init_inputs;
  std::string mode = "train";  // task_mode of the record
  Json to_json() const;
};

// `time`: a baseline's timing (eager, compile, compile-max-autotune) over kept input sets.
struct Time {
  std::string task_id, mode, precision, metric;
  int64_t warmup = 0, min_runs = 0, max_runs = 0;
  double budget_s = 0, rel_ci = 0;
  int64_t input_sets = 1;  // seeded input sets, seed + k for set k
  int64_t flush_bytes = 0;  // L2 flush between calls
  uint64_t seed = 0;
  Json to_json() const;
};

}  // namespace ca::worker::request
