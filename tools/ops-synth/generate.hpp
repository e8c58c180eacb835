// Task synthesis: chains of 1-5 catalog ops with shape-compatible links (or one standalone module),
// sized for a CPU test or for a GPU eager time, rendered as KernelBench-format task records. The
// Generator is written in generate.cpp (the loop and dedup), mix.cpp, chains.cpp, modules.cpp,
// sizing.cpp and render.cpp.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "tools/ops-synth/catalog.hpp"

namespace ca::ops_synth {

// Peak numbers for the eager-time estimate (fp32 without TF32, as the correctness reference runs).
struct GpuProfile {
  std::string name;
  double fp32_flops;  // FLOP/s
  double bytes_per_s;
};
const GpuProfile* find_gpu_profile(const std::string& name);
std::string gpu_profile_names();

// Mix categories: 1..5 ops, then standalone modules. Weights per 10,000 (published Ops-6K).
inline constexpr int kCategories = 6;
using Mix = std::array<uint32_t, kCategories>;
inline constexpr Mix kPublishedMix = {340, 8377, 762, 280, 123, 118};
// "1=0.034,2=0.8377,...,module=0.0118" (missing categories get 0); throws ca::UsageError.
Mix parse_mix(const std::string& text);
std::string category_name(int category);  // "1".."5", "module"

struct GenOptions {
  uint64_t seed = 0;
  std::string sizes = "gpu";  // gpu | tiny
  std::string gpu_profile = "h200";
  Mix mix = kPublishedMix;
  double min_ms = 1, max_ms = 100;
  bool allow_stochastic = false;
  std::vector<std::string> only_ops;  // restrict chains to these op names (tests)
  int max_attempts = 400;
};

using Shape = std::vector<int64_t>;

// One sampled argument value.
struct ArgValue {
  bool is_int = true;
  int64_t i = 0;
  std::string text;
};

struct OpInstance {
  const OpSpec* spec = nullptr;
  std::vector<ArgValue> args;
};

// The result of running an op's shape rule on an input shape.
struct Applied {
  Shape in, out;
  std::vector<Shape> extras;
  int64_t flops = 0, bytes = 0;
};

class Generator {
 public:
  Generator(const Catalog& catalog, GenOptions options);
  // The task at `index`; call in increasing index order (near-duplicates are judged against every
  // earlier task). Returns the record; `emit` false only computes it for the dedup state.
  ca::Json task(int64_t index);
  int category_of(int64_t index) const;
  int64_t retries() const { return retries_; }
  int64_t duplicates() const { return duplicates_; }

  // Exposed for tests: apply an op with fixed args to a shape (false when it does not fit).
  bool apply(const OpInstance& op, const Shape& in, Applied& out) const;

  // How many distinct standalone-module tasks the catalog holds at these sizes (near-duplicates
  // counted once): the most the module category can give, whatever -n.
  int64_t module_capacity();

 private:
  struct Built;
  struct ModuleChoice {
    std::size_t module;
    std::vector<int64_t> consts;
    double target_ms;
    uint64_t signature;
  };
  bool evaluate_module(const ModuleSpec& m, const std::vector<int64_t>& consts, Built& out) const;
  bool size_module(Built& b, double target_ms) const;
  uint64_t module_signature(const Built& b) const;
  const std::vector<ModuleChoice>& module_space();
  bool build_module_unused(uint64_t seed, Built& b);
  bool build_chain(int k, uint64_t seed, Built& built);
  bool build_module(uint64_t seed, Built& built);
  bool sample_op(const OpSpec& spec, const Shape& in, bool last, class Rng& rng, OpInstance& inst, Applied& applied) const;
  bool propagate(const std::vector<OpInstance>& chain, const Shape& start, std::vector<Applied>& steps) const;
  bool fits(const std::vector<Applied>& steps, double& est_ms) const;
  double estimate_ms(int64_t flops, int64_t bytes, int n_ops) const;
  bool size_for_gpu(Built& built, class Rng& rng);
  ca::Json render_chain(const Built& built, int64_t index, int attempt) const;
  ca::Json render_module(const Built& built, int64_t index, int attempt) const;

  const Catalog& cat_;
  GenOptions opt_;
  const SizeProfile* profile_ = nullptr;
  const GpuProfile* gpu_ = nullptr;
  std::vector<std::vector<const OpSpec*>> by_rank_;  // usable ops per input rank
  std::unordered_set<uint64_t> signatures_;
  std::unordered_set<std::string> task_ids_;
  std::vector<ModuleChoice> module_space_;
  bool module_space_ready_ = false;
  uint64_t weyl_offset_ = 0;
  int64_t retries_ = 0, duplicates_ = 0;
};

}  // namespace ca::ops_synth
