// The kernel bundle's plan (DESIGN.md §3): dims, scratch buffers, init and forward steps of kind
// launch / gemm / conv. Parsed from YAML text (libcommon/yaml.hpp) or the same as a JSON object
// here; checked against the kernels' signatures and, when the task's tensor specs are known
// (tensor_spec.hpp), bound to concrete sizes (bind.hpp).
//
//   Plan plan = Plan::parse(record["bundle"]["plan"]);         // PlanError on malformed plans
//   IoSpec io = IoSpec::from_json(task);                        // shapes/dtypes, may be partial
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
  std::string key;  // "0", "x", "weight" (params names may contain dots), as written
  // A params name may hold expressions in braces, so a repeat steps through numbered layers:
  // `params.layers.{i}.weight`, `params.features.{2 * i + 1}.bias`. `literal` is the text around
  // them (one more than `parts`); the binder evaluates them per iteration and names the param.
  std::vector<std::string> literal;
  std::vector<Expr> parts;
  bool templated() const { return !parts.empty(); }
  std::string text() const { return std::string(space_name(space)) + "." + key; }
  // "inputs.0" -> BufferRef; nullopt when `text` is not a buffer reference (an expression). Throws
  // PlanError for braces outside a params name or an expression in them that does not parse.
  static std::optional<BufferRef> parse(const std::string& text);
};

struct Arg {
  std::string text;
  std::optional<BufferRef> buffer;  // set: a buffer; else `expr`
  Expr expr;
  // A view: `scratch.h[t * H]` passes the buffer's address plus this many elements (empty: 0).
  // Bound-checked when the plan is bound; the guard zones still catch writes past the buffer.
  Expr offset;
};

// A buffer operand of a library step, maybe a view at an element offset (`scratch.x[n * C * H * W]`).
struct View {
  BufferRef ref;
  Expr offset;  // elements; empty: 0
  std::string text() const { return offset.empty() ? ref.text() : ref.text() + "[" + offset.text() + "]"; }
};

struct LaunchStep {
  std::string kernel;  // C++ name expression, template arguments allowed: "softmax<256>"
  std::vector<Expr> grid, block;
  Expr shared;  // dynamic shared memory bytes
  std::vector<Arg> args;
  // `cooperative: true`: a cooperative launch (cooperative_groups grid.sync() works), refused when
  // the grid cannot be co-resident on the device. `cluster: [x, y, z]`: thread block clusters set at
  // launch (sm_90+), each dimension dividing the grid's; up to 16 blocks (the non-portable sizes).
  bool cooperative = false;
  std::vector<Expr> cluster;
};

// out[M,N] = act(alpha * op(A) @ op(B) + beta * out + bias), row-major; op = transpose when trans_*.
// A is [M,K] ([K,M] with trans_a), B is [K,N] ([N,K] with trans_b, as nn.Linear's weight).
struct GemmStep {
  BufferRef a, b, out;
  std::optional<BufferRef> bias;     // length N, added per column
  Expr a_offset, b_offset, out_offset, bias_offset;  // views: element offsets (empty: 0)
  std::string activation = "none";   // none, relu, gelu
  bool trans_a = false, trans_b = false;
  Expr m, n, k, batch;               // empty: taken from the buffers' shapes
  // Strided views (elements): the row strides of a, b and out as stored (row-major; empty: dense,
  // the stored matrix's columns) and their batch strides (empty: dense, rows x row stride). A column
  // slice of a wider matrix is a view with its row stride; stride 0 repeats a or b over the batch.
  Expr lda, ldb, ldc, stride_a, stride_b, stride_c;
  Expr alpha, beta;                  // expressions (`1.0 / sqrt(D)`); empty: 1 and 0
  std::string compute = "fp32";      // fp32 or tf32 (fp16/bf16 buffers use their own)
};

// out = conv(x, w) (+ bias) with 1, 2 or 3 spatial dimensions (NCL, NCHW, NCDHW), cuDNN
// cross-correlation like torch.nn.Conv1d/2d/3d; `transposed: true` is ConvTranspose1d/2d/3d (w is
// [C_in, C_out / groups, ...] as PyTorch keeps it; cuDNN's backward-data convolution).
struct ConvStep {
  BufferRef x, w, out;
  std::optional<BufferRef> bias;
  Expr x_offset, w_offset, out_offset, bias_offset;  // views: element offsets (empty: 0)
  // With views, the operands' shapes are given, not read from the buffers: n, c (x's channels), k
  // (out's channels), the spatial sizes of x (d, h, w) and of the kernel (t, r, s), as many as the
  // convolution has (w alone for 1-d; h, w for 2-d; d, h, w for 3-d). Empty: from the buffers.
  std::map<std::string, Expr> shape;
  // Strided views: x's and out's strides in elements, one per dimension [n, c, spatial...] (empty:
  // packed), so a conv reads or writes a channel slice of a concatenation for the whole batch.
  std::vector<Expr> x_strides, out_strides;
  // Per spatial dimension (outermost first); one value given applies to all. Expressions like every
  // other size (dims, init values, a repeat's index), evaluated and checked when the plan is bound.
  Expr stride[3] = {Expr::constant(1), Expr::constant(1), Expr::constant(1)};
  Expr padding[3] = {Expr::constant(0), Expr::constant(0), Expr::constant(0)};
  Expr dilation[3] = {Expr::constant(1), Expr::constant(1), Expr::constant(1)};
  Expr output_padding[3] = {Expr::constant(0), Expr::constant(0), Expr::constant(0)};
  int given[4] = {0, 0, 0, 0};  // how many values stride, padding, dilation, output_padding listed (0: one for all)
  Expr groups = Expr::constant(1);
  bool transposed = false;
};

struct Step {
  enum Kind { kLaunch, kGemm, kConv } kind = kLaunch;
  std::string section;  // "init" or "forward"
  int index = 0;        // 1-based within its section
  LaunchStep launch;
  GemmStep gemm;
  ConvStep conv;
  int source_line = 0;  // line of the step in the YAML text, when known
  // The `repeat` blocks the step sits in, outermost first (ids into Plan::loops), and its place in
  // them ("3.2.1": forward step 3, its step 2, that one's step 1). A plan's step lists hold every
  // step that runs, loops or not, so whatever looks at the steps (the rules, the precision) sees
  // each of them; the binder unrolls the loops.
  std::vector<int> loops;
  std::string path;
  std::string kind_name() const { return kind == kLaunch ? "launch" : kind == kGemm ? "gemm" : "conv"; }
  // "forward step 2 'launch softmax_rows'"
  std::string label() const;
};

struct ScratchDecl {
  std::string name;
  std::string dtype;  // safetensors name (F32, ...)
  std::vector<Expr> shape;
};

// `repeat: N` with `index: t` (default i) and `steps: [...]`: its steps run N times (N an
// expression of the dims and enclosing indices), with the index bound to 0..N-1 in every expression
// of its steps, offsets included. Loops nest; the whole forward is still one CUDA graph.
struct Loop {
  Expr count;
  std::string index;
  std::string path;   // "forward step 3"
  int parent = -1;    // the enclosing loop, or -1
};

struct Plan {
  std::vector<std::pair<std::string, Expr>> dims;  // in order; later dims may use earlier ones
  std::vector<Loop> loops;
  std::vector<ScratchDecl> scratch;
  std::vector<Step> init, forward;
  std::optional<int> outputs_declared;  // `outputs: 2` or a list of outputs.N

  // A YAML string or a JSON object (the record's bundle.plan). Throws PlanError.
  static Plan parse(const Json& plan);
  static Plan parse_text(const std::string& yaml_or_json);
  // Every kernel name expression the steps launch, in first-use order.
  std::vector<std::string> kernel_names() const;
};

}  // namespace ca::bundle

// The task's tensors and the checks and binding, for the users that include plan.hpp alone.
#include "libcommon/bundle/tensor_spec.hpp"
#include "libcommon/bundle/bind.hpp"
