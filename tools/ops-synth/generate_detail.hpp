// What the generator's files share (generate.cpp, mix.cpp, sizing.cpp, chains.cpp, modules.cpp,
// render.cpp): a task being built, the shape bindings of an op's environment, the dedup hash, and the
// eager-time targets. Internal to ops-synth.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tools/ops-synth/generate.hpp"

namespace ca::ops_synth {

struct Generator::Built {
  int category = 0;
  Shape start;
  std::vector<OpInstance> chain;
  std::vector<Applied> steps;
  const ModuleSpec* module = nullptr;
  std::vector<int64_t> consts;  // module constants, in the spec's order
  std::vector<Shape> module_in, module_out;
  int64_t flops = 0, bytes = 0;
  double est_ms = 0;
};

namespace detail {

// The number of elements of a shape (1 for a scalar).
int64_t numel_of(const Shape& s);
// Binds d0..d4, r, numel, last and spatial of an input shape in an op's environment.
void bind_shape(Env& env, const Shape& in);
// Binds an op's integer arguments in its environment.
void bind_args(Env& env, const OpSpec& spec, const std::vector<ArgValue>& args);
// FNV-1a of a near-duplicate signature.
uint64_t fnv1a(const std::string& s);
// floor(log2(v)) (0 for v <= 1): sizes within a factor of two share a bucket.
int log2_bucket(int64_t v);

// Eager-time targets (ms) drawn per task; the batch is scaled toward one of them.
inline const std::vector<double> kTargetsMs = {2, 3, 4, 6, 8, 12, 16, 24, 32, 48};
// Past this batch a task is more data than work; it is redrawn instead.
inline constexpr int64_t kMaxBatch = 65536;

}  // namespace detail
}  // namespace ca::ops_synth
