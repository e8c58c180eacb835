// The kernel bundle's plan (DESIGN.md §3): dims, scratch buffers, init and forward steps of kind
// launch / gemm / conv. Parsed from YAML text or the same as a JSON object; checked against the
// kernels' signatures and, when the task's tensor specs are known, bound to concrete sizes.
//
//   Plan plan = Plan::parse(record["bundle"]["plan"]);         // PlanError on malformed plans
//   IoSpec io = IoSpec::from_task(task);                        // shapes/dtypes, may be partial
//   check_plan(plan, signatures, &io);                          // PlanError naming step and argument
//   BoundPlan bound = bind_plan(plan, signatures, io);          // sizes, grids, packed scalars
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "libcommon/bundle/expr.hpp"
#include "libcommon/bundle/signature.hpp"
#include "libcommon/jsonl.hpp"

namespace ca::bundle {

// A plan that is malformed or does not fit its kernels or task: the verdict plan_error.
struct PlanError : std::runtime_error {
  PlanError(const std::string& what, std::string kernel_ = "")
      : std::runtime_error(what), kernel(std::move(kernel_)) {}
  std::string kernel;  // the kernel named by the failing step, when there is one
};

enum class Space { input, output, param, scratch };
const char* space_name(Space s);  // "inputs", "outputs", "params", "scratch"

struct BufferRef {
  Space space = Space::input;
  std::string key;  // "0", "x", "weight" (params names may contain dots)
  std::string text() const { return std::string(space_name(space)) + "." + key; }
  // "inputs.0" -> BufferRef; nullopt when `text` is not a buffer reference (an expression).
  static std::optional<BufferRef> parse(const std::string& text);
};

struct Arg {
  std::string text;
  std::optional<BufferRef> buffer;  // set: a buffer; else `expr`
  Expr expr;
};

struct LaunchStep {
  std::string kernel;  // C++ name expression, template arguments allowed: "softmax<256>"
  std::vector<Expr> grid, block;
  Expr shared;  // dynamic shared memory bytes
  std::vector<Arg> args;
};

// out[M,N] = act(alpha * op(A) @ op(B) + beta * out + bias), row-major; op = transpose when trans_*.
// A is [M,K] ([K,M] with trans_a), B is [K,N] ([N,K] with trans_b, as nn.Linear's weight).
struct GemmStep {
  BufferRef a, b, out;
  std::optional<BufferRef> bias;     // length N, added per column
  std::string activation = "none";   // none, relu, gelu
  bool trans_a = false, trans_b = false;
  Expr m, n, k, batch;               // empty: taken from the buffers' shapes
  double alpha = 1.0, beta = 0.0;
  std::string compute = "fp32";      // fp32 or tf32 (fp16/bf16 buffers use their own)
};

// out = conv2d(x, w) (+ bias), NCHW, cuDNN cross-correlation like torch.nn.Conv2d.
struct ConvStep {
  BufferRef x, w, out;
  std::optional<BufferRef> bias;
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  int64_t groups = 1;
};

struct Step {
  enum Kind { kLaunch, kGemm, kConv } kind = kLaunch;
  std::string section;  // "init" or "forward"
  int index = 0;        // 1-based within its section
  LaunchStep launch;
  GemmStep gemm;
  ConvStep conv;
  int source_line = 0;  // line of the step in the YAML text, when known
  std::string kind_name() const { return kind == kLaunch ? "launch" : kind == kGemm ? "gemm" : "conv"; }
  // "forward step 2 'launch softmax_rows'"
  std::string label() const;
};

struct ScratchDecl {
  std::string name;
  std::string dtype;  // safetensors name (F32, ...)
  std::vector<Expr> shape;
};

struct Plan {
  std::vector<std::pair<std::string, Expr>> dims;  // in order; later dims may use earlier ones
  std::vector<ScratchDecl> scratch;
  std::vector<Step> init, forward;
  std::optional<int> outputs_declared;  // `outputs: 2` or a list of outputs.N

  // A YAML string or a JSON object (the record's bundle.plan). Throws PlanError.
  static Plan parse(const Record& plan);
  static Plan parse_text(const std::string& yaml_or_json);
  // Every kernel name expression the steps launch, in first-use order.
  std::vector<std::string> kernel_names() const;
};

// YAML text to JSON (scalars stay strings, so "2.0" keeps its spelling for the type check).
Json yaml_to_json(const std::string& text);
// "float32", "torch.float32", "f32", "F32" -> "F32"; "" when unknown.
std::string normalize_dtype(const std::string& name);

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors name
  std::vector<int64_t> shape;
  bool known = false;  // shape and dtype given
  int64_t numel() const;
  int64_t bytes() const;
};

// What the plan is bound against: the task's tensors (from the task record or the worker's `load`).
struct IoSpec {
  std::vector<TensorSpec> inputs, outputs, params;
  std::vector<Json> init_values;  // get_init_inputs(): scalars are usable as init.N
  bool shapes_known() const;
  // Reads `inputs`/`outputs` ([{name?, shape, dtype}]), `params` (list or {name: {shape, dtype}}),
  // `init_inputs` from a task record or a worker reply; missing parts stay empty.
  static IoSpec from_json(const Json& task);
  const TensorSpec* find(const BufferRef& ref, int* index = nullptr) const;
  Json to_json() const;  // the form from_json reads
  int64_t io_bytes() const;  // inputs + outputs
};

using Signatures = std::map<std::string, KernelSignature>;  // by kernel name expression

// The checks that need no GPU: kernels known, arity, argument types, dims bound, init touching
// inputs/outputs, every declared output written by forward. With `io` shapes, also sizes and dtypes.
void check_plan(const Plan& plan, const Signatures& sigs, const IoSpec* io);

struct BoundBuffer {
  std::string ref;  // "inputs.0", "scratch.tmp"
  Space space;
  int index = 0;    // within its space (inputs/outputs by position, params by spec order)
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
};

struct BoundArg {
  int buffer = -1;              // index into BoundPlan::buffers, or -1 for a scalar
  std::vector<uint8_t> scalar;  // packed as the kernel's parameter type
  std::string text;
};

struct BoundLaunch {
  std::string kernel, mangled;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned shared = 0;
  std::vector<BoundArg> args;
};

struct BoundGemm {
  int a = -1, b = -1, out = -1, bias = -1;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_a = false, trans_b = false;
  std::string activation, compute, dtype;
  double alpha = 1, beta = 0;
};

struct BoundConv {
  int x = -1, w = -1, out = -1, bias = -1;
  int64_t n = 0, c = 0, h = 0, wd = 0, k = 0, r = 0, s = 0, p = 0, q = 0;
  int64_t stride[2], padding[2], dilation[2], groups = 1;
  std::string dtype;
};

struct BoundStep {
  Step::Kind kind;
  std::string label;
  BoundLaunch launch;
  BoundGemm gemm;
  BoundConv conv;
};

struct BoundPlan {
  std::vector<BoundBuffer> buffers;
  std::vector<BoundStep> init, forward;
  std::map<std::string, int64_t> dims;
  int buffer_index(const std::string& ref) const;  // -1 when absent
  int64_t scratch_bytes() const;
};

// Evaluates dims, scratch sizes, grids and scalars for the task's shapes. Throws PlanError.
BoundPlan bind_plan(const Plan& plan, const Signatures& sigs, const IoSpec& io);

}  // namespace ca::bundle
