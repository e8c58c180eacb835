// Checking a plan against its kernels' signatures (and the task's tensors when known), and binding
// it to the task's shapes: sizes, grids and packed scalars, ready for the executor.
#include "libcommon/bundle/bind.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <set>


#include "libcommon/bundle/layout.hpp"
#include "libcommon/byte_regex.hpp"
#include "libcommon/dtype.hpp"
#include "libcommon/errors.hpp"

namespace ca::bundle {

namespace {

// Resolves references during evaluation; with `typed_only` it answers types (1 or 1.0) without
// shapes, for the checks that run before the task's shapes are known.
struct Resolver {
  const Plan& plan;
  const IoSpec* io;
  const std::vector<ScratchDecl>* scratch = nullptr;
  std::map<std::string, Value> dims;
  bool typed_only = false;

  std::optional<Value> operator()(const std::string& ref) {
    if (auto it = dims.find(ref); it != dims.end()) return it->second;
    // RE2 (linear, no recursion); indices of at most 9 digits, so they convert without overflow.
    static const re2::RE2 shape_re(R"((inputs|outputs|params)\.([A-Za-z0-9_.]+?)\.(shape\[(-?\d{1,9})\]|numel|ndim))",
        ca::byte_regex_options());
    static const re2::RE2 init_re(R"(init\.(\d{1,9}))", ca::byte_regex_options());
    std::string space, key, what, index;
    if (re2::RE2::FullMatch(ref, shape_re, &space, &key, &what, &index)) {
      auto buf = BufferRef::parse(space + "." + key);
      if (!buf) return std::nullopt;
      const TensorSpec* t = io ? io->find(*buf) : nullptr;
      if (!t || !t->known) {
        if (typed_only && (!io || !io->shapes_known())) return Value::integer(7);
        return std::nullopt;
      }
      if (what == "numel") return Value::integer(t->numel());
      if (what == "ndim") return Value::integer(static_cast<int64_t>(t->shape.size()));
      int64_t i = std::stoll(index);
      int64_t nd = static_cast<int64_t>(t->shape.size());
      if (i < 0) i += nd;
      if (i < 0 || i >= nd)
        throw ExprError("'" + ref + "': " + buf->text() + " has " + std::to_string(nd) + " dimensions");
      return Value::integer(t->shape[i]);
    }
    if (re2::RE2::FullMatch(ref, init_re, &index)) {
      size_t i = std::stoul(index);
      if (io && i < io->init_values.size()) {
        const Json& v = io->init_values[i];
        if (v.is_number_integer()) return Value::integer(v.get<int64_t>());
        if (v.is_boolean()) return Value::integer(v.get<bool>() ? 1 : 0);
        if (v.is_number()) return Value::real(v.get<double>());
        throw ExprError("'" + ref + "' is " + v.dump() + ", not a scalar");
      }
      if (typed_only && (!io || io->init_values.empty())) return Value::integer(7);
      return std::nullopt;
    }
    return std::nullopt;
  }
};

ExprContext context_of(Resolver& r) {
  return ExprContext{[&r](const std::string& ref) { return r(ref); }};
}

std::string known_dims_text(const Plan& plan) {
  std::string s;
  for (auto& [n, e] : plan.dims) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

// Evaluates every dim in order, turning ExprErrors into PlanErrors that say which dim.
void eval_dims(const Plan& plan, Resolver& r) {
  for (auto& [name, e] : plan.dims) {
    try {
      r.dims[name] = e.eval(context_of(r));
    } catch (const ExprError& err) {
      std::string msg = err.what();
      if (msg.rfind("unbound name", 0) == 0)
        throw PlanError("plan: dims." + name + ": " + msg + " (dims so far: " + known_dims_text(plan) + ")");
      throw PlanError("plan: dims." + name + ": " + msg);
    }
  }
}

Value eval_in(const Expr& e, Resolver& r, const std::string& where, const Plan& plan, const std::string& kernel = "") {
  try {
    return e.eval(context_of(r));
  } catch (const ExprError& err) {
    std::string msg = err.what();
    if (msg.rfind("unbound name", 0) == 0)
      throw PlanError(where + ": " + msg + " (dims: " + known_dims_text(plan) + ")", kernel);
    throw PlanError(where + ": " + msg, kernel);
  }
}

std::string ordinal_arg(size_t i) { return "argument " + std::to_string(i + 1); }

int arch_number(const std::string& arch) {  // "sm_90" -> 90; 0 when not of that form
  try {
    return arch.rfind("sm_", 0) == 0 ? std::stoi(arch.substr(3)) : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

// Does the buffer exist (as far as we can tell)? Returns its dtype when known.
std::optional<std::string> buffer_dtype(const BufferRef& ref, const Plan& plan, const IoSpec* io, const std::string& where,
                                        const std::string& kernel) {
  if (ref.templated()) return std::nullopt;  // which param it names is known per iteration: the binder checks it
  if (ref.space == Space::scratch) {
    for (auto& s : plan.scratch)
      if (s.name == ref.key) return s.dtype;
    throw PlanError(where + ": scratch." + ref.key + " is not declared (declare it under scratch:)", kernel);
  }
  if (!io) return std::nullopt;
  const std::vector<TensorSpec>& list = ref.space == Space::input    ? io->inputs
                                        : ref.space == Space::output ? io->outputs
                                                                     : io->params;
  if (list.empty() && ref.space != Space::output) return std::nullopt;  // the task did not say
  if (list.empty()) return std::nullopt;
  const TensorSpec* t = io->find(ref);
  if (!t) {
    std::string names;
    for (size_t i = 0; i < list.size(); ++i)
      names += (names.empty() ? "" : ", ") + std::string(space_name(ref.space)) + "." +
               (ref.space == Space::param ? list[i].name : std::to_string(i));
    throw PlanError(where + ": " + ref.text() + " does not exist (the task has " + names + ")", kernel);
  }
  if (!t->dtype.empty()) return t->dtype;
  return std::nullopt;
}

bool dtype_fits(const ParamType& p, const std::string& dtype) {
  if (p.dtype.empty() || p.dtype == "?") return true;  // void* or an unknown struct: any buffer
  if (p.dtype == dtype) return true;
  // Same width, different signedness: let unsigned views of integer buffers through.
  auto strip = [](std::string s) { return s[0] == 'U' ? "I" + s.substr(1) : s; };
  return strip(p.dtype) == strip(dtype);
}

// One launch's sizes against the target's limits (LaunchLimits: the arch of a compile-only check,
// the device's on a GPU). A size not known yet (nullopt) is skipped; the threads per block are
// checked once every block size is known.
void check_sizes(const std::string& where, const std::string& kernel, const std::vector<std::optional<int64_t>>& grid,
                 const std::vector<std::optional<int64_t>>& block, std::optional<int64_t> shared, const LaunchLimits& lim) {
  int64_t threads = 1;
  bool all_known = true;
  for (size_t d = 0; d < block.size(); ++d) {
    if (!block[d]) {
      all_known = false;
      continue;
    }
    if (*block[d] < 1 || *block[d] > lim.block[d])
      throw PlanError(where + ": block[" + std::to_string(d) + "] = " + std::to_string(*block[d]) + " (" + lim.arch +
                          " allows 1 to " + std::to_string(lim.block[d]) + ")",
                      kernel);
    threads *= *block[d];
  }
  if (all_known && threads > lim.threads_per_block)
    throw PlanError(where + ": block has " + std::to_string(threads) + " threads (" + lim.arch + " allows at most " +
                        std::to_string(lim.threads_per_block) + " per block)",
                    kernel);
  for (size_t d = 0; d < grid.size(); ++d)
    if (grid[d] && (*grid[d] < 1 || *grid[d] > lim.grid[d]))
      throw PlanError(where + ": grid[" + std::to_string(d) + "] = " + std::to_string(*grid[d]) + " (" + lim.arch +
                          " allows 1 to " + std::to_string(lim.grid[d]) + ")",
                      kernel);
  if (shared && (*shared < 0 || *shared > lim.dynamic_shared))
    throw PlanError(where + ": shared = " + std::to_string(*shared) + " bytes (" + lim.arch + " allows at most " +
                        std::to_string(lim.dynamic_shared) + " bytes of dynamic shared memory per block)",
                    kernel);
}

// The sizes a plan spells as constants or from known dims are checked before any shape is known
// (compile-only); all of them again when the plan is bound to the task (bind_plan).
void check_launch_sizes(const Step& step, const Plan& plan, const IoSpec* io, const LaunchLimits& lim) {
  const LaunchStep& L = step.launch;
  Resolver exact{plan, io};
  try {
    eval_dims(plan, exact);
  } catch (const PlanError&) {
  }
  auto value = [&](const Expr& e) -> std::optional<int64_t> {
    try {
      Value v = e.eval(context_of(exact));
      return v.is_float ? std::optional<int64_t>() : v.i;
    } catch (const std::exception&) {
      return std::nullopt;  // depends on what is not known yet
    }
  };
  std::vector<std::optional<int64_t>> grid, block;
  for (const auto& e : L.grid) grid.push_back(value(e));
  for (const auto& e : L.block) block.push_back(value(e));
  check_sizes(step.label(), L.kernel, grid, block, value(L.shared), lim);
}

void check_launch(const Step& step, const Plan& plan, const Signatures& sigs, const IoSpec* io, Resolver& typed,
                  std::set<std::string>& written, const LaunchLimits& limits) {
  const LaunchStep& L = step.launch;
  std::string where = step.label();
  auto it = sigs.find(L.kernel);
  if (it == sigs.end()) throw PlanError(where + ": kernel '" + L.kernel + "' is not defined in the bundle's sources", L.kernel);
  const KernelSignature& sig = it->second;
  if (sig.params.size() != L.args.size())
    throw PlanError(where + ": " + std::to_string(L.args.size()) + " arguments given, kernel " + L.kernel + " takes " +
                        std::to_string(sig.params.size()) + (sig.from_mangled ? " (" + [&] {
                          std::string s;
                          for (auto& p : sig.params) s += (s.empty() ? "" : ", ") + p.text;
                          return s;
                        }() + ")" : ""),
                    L.kernel);
  for (auto* dims : {&L.grid, &L.block})
    for (auto& e : *dims) {
      Value v = eval_in(e, typed, where + (dims == &L.grid ? " grid" : " block"), plan, L.kernel);
      if (v.is_float) throw PlanError(where + ": grid and block sizes must be integers ('" + e.text() + "')", L.kernel);
    }
  if (eval_in(L.shared, typed, where + " shared", plan, L.kernel).is_float)
    throw PlanError(where + ": shared (dynamic shared memory bytes) must be an integer ('" + L.shared.text() + "')", L.kernel);
  for (auto& e : L.cluster)
    if (eval_in(e, typed, where + " cluster", plan, L.kernel).is_float)
      throw PlanError(where + ": cluster sizes must be integers ('" + e.text() + "')", L.kernel);
  if (!L.cluster.empty() && arch_number(limits.arch) < 90)
    throw PlanError(where + ": thread block clusters need sm_90 or newer (" + limits.arch + ")", L.kernel);
  if (!L.cluster.empty() && L.cooperative)
    throw PlanError(where + ": a launch is cooperative or has clusters, not both", L.kernel);
  check_launch_sizes(step, plan, io, limits);
  for (size_t i = 0; i < L.args.size(); ++i) {
    const Arg& a = L.args[i];
    const ParamType& p = sig.params[i];
    std::string at = where + ": " + ordinal_arg(i);
    if (a.buffer) {
      if (!a.offset.empty() && eval_in(a.offset, typed, at + " offset", plan, L.kernel).is_float)
        throw PlanError(at + ": the offset of " + a.buffer->text() + " ('" + a.offset.text() + "') is not an integer", L.kernel);
      if (step.section == "init" && (a.buffer->space == Space::input || a.buffer->space == Space::output))
        throw PlanError(at + " is " + a.buffer->text() + ": init steps read params and write scratch, never inputs or outputs",
                        L.kernel);
      auto dtype = buffer_dtype(*a.buffer, plan, io, at, L.kernel);
      if (sig.from_mangled && p.kind != ParamType::kPointer)
        throw PlanError(at + " is the buffer " + a.buffer->text() + ", kernel expects " + p.text, L.kernel);
      if (!sig.from_mangled && p.size_bytes != 8)
        throw PlanError(at + " is the buffer " + a.buffer->text() + ", kernel expects a " + p.text + " scalar", L.kernel);
      if (dtype && sig.from_mangled && !dtype_fits(p, *dtype))
        throw PlanError(at + " is " + a.buffer->text() + " (" + *dtype + "), kernel expects " + p.text, L.kernel);
      if (a.buffer->space == Space::output && (!sig.from_mangled || !p.is_const)) written.insert(a.buffer->text());
      if (a.buffer->space == Space::input && step.section == "forward" && sig.from_mangled && !p.is_const) {
        // Allowed (the input hash check catches actual writes), but noted for the policy.
      }
    } else {
      Value v = eval_in(a.expr, typed, at, plan, L.kernel);
      // init.N's type is its value's: unknown until the task's init inputs are (binding checks it).
      const bool type_unknown = (!io || io->init_values.empty()) && a.text.find("init.") != std::string::npos;
      if (sig.from_mangled && p.kind == ParamType::kPointer)
        throw PlanError(at + " is '" + a.text + "' (" + (v.is_float ? "a float" : "an int") + "), kernel expects " + p.text +
                            ": pass a buffer (inputs.N, outputs.N, params.NAME, scratch.NAME)",
                        L.kernel);
      if (p.kind == ParamType::kFloat && !v.is_float && !type_unknown)
        throw PlanError(at + " is int ('" + a.text + "'), kernel expects " + p.text + " (write a float, e.g. " +
                            std::to_string(v.i) + ".0)",
                        L.kernel);
      if (p.kind == ParamType::kInteger && v.is_float && !type_unknown)
        throw PlanError(at + " is float ('" + a.text + "'), kernel expects " + p.text, L.kernel);
      if (p.kind == ParamType::kOther && sig.from_mangled)
        throw PlanError(at + " is '" + a.text + "', kernel expects " + p.text + " (only int, float and pointer parameters can be bound)",
                        L.kernel);
    }
  }
}

void check_library_buffers(const Step& step, const std::vector<BufferRef>& reads, const BufferRef& out, const Plan& plan,
                           const IoSpec* io, std::set<std::string>& written) {
  std::string where = step.label();
  for (auto& r : reads) {
    if (step.section == "init" && (r.space == Space::input || r.space == Space::output))
      throw PlanError(where + ": reads " + r.text() + ": init steps read params and write scratch, never inputs or outputs");
    buffer_dtype(r, plan, io, where, "");
  }
  if (step.section == "init" && (out.space == Space::input || out.space == Space::output))
    throw PlanError(where + ": writes " + out.text() + ": init steps write scratch only");
  if (out.space == Space::input || out.space == Space::param)
    throw PlanError(where + ": writes " + out.text() + ": inputs and params are read-only");
  buffer_dtype(out, plan, io, where, "");
  if (out.space == Space::output) written.insert(out.text());
}

}  // namespace

void check_plan(const Plan& plan, const Signatures& sigs, const IoSpec* io, const LaunchLimits& limits) {
  Resolver typed{plan, io};
  typed.typed_only = true;
  eval_dims(plan, typed);
  for (auto& s : plan.scratch)
    for (auto& e : s.shape) {
      Value v = eval_in(e, typed, "scratch." + s.name + " shape", plan);
      if (v.is_float) throw PlanError("scratch." + s.name + ": shape '" + e.text() + "' is not an integer");
    }
  // Loop indices are integers in every expression of their steps; counts are integers.
  for (const auto& loop : plan.loops) {
    if (eval_in(loop.count, typed, loop.path + " repeat", plan).is_float)
      throw PlanError(loop.path + ": repeat count '" + loop.count.text() + "' is not an integer");
    typed.dims[loop.index] = Value::integer(1);
  }
  std::set<std::string> written;
  for (auto* section : {&plan.init, &plan.forward})
    for (auto& step : *section) {
      for (const Expr* e : {&step.gemm.a_offset, &step.gemm.b_offset, &step.gemm.out_offset, &step.gemm.bias_offset,
                            &step.conv.x_offset, &step.conv.w_offset, &step.conv.out_offset, &step.conv.bias_offset})
        if (step.kind != Step::kLaunch && !e->empty() && eval_in(*e, typed, step.label() + " offset", plan).is_float)
          throw PlanError(step.label() + ": offset '" + e->text() + "' is not an integer");
      for (auto& [k, e] : step.conv.shape)
        if (step.kind == Step::kConv && eval_in(e, typed, step.label() + " shape." + k, plan).is_float)
          throw PlanError(step.label() + ": shape." + k + " '" + e.text() + "' is not an integer");
      if (step.kind == Step::kLaunch) {
        check_launch(step, plan, sigs, io, typed, written, limits);
      } else if (step.kind == Step::kGemm) {
        std::vector<BufferRef> reads = {step.gemm.a, step.gemm.b};
        if (step.gemm.bias) reads.push_back(*step.gemm.bias);
        const std::pair<const char*, const Expr*> sizes[] = {
            {"m", &step.gemm.m}, {"n", &step.gemm.n}, {"k", &step.gemm.k}, {"batch", &step.gemm.batch}};
        for (const auto& [field, e] : sizes)
          if (!e->empty() && eval_in(*e, typed, step.label() + " " + field, plan).is_float)
            throw PlanError(step.label() + ": gemm " + field + " '" + e->text() + "' is not an integer");
        for (auto* e : {&step.gemm.alpha, &step.gemm.beta})
          if (!e->empty()) eval_in(*e, typed, step.label() + " " + (e == &step.gemm.alpha ? "alpha" : "beta"), plan);
        check_library_buffers(step, reads, step.gemm.out, plan, io, written);
      } else {
        std::vector<BufferRef> reads = {step.conv.x, step.conv.w};
        if (step.conv.bias) reads.push_back(*step.conv.bias);
        check_library_buffers(step, reads, step.conv.out, plan, io, written);
      }
    }
  // Every output must be written by a forward step (init writes were rejected above).
  int outputs = 0;
  if (io && !io->outputs.empty()) outputs = static_cast<int>(io->outputs.size());
  if (plan.outputs_declared) outputs = std::max(outputs, *plan.outputs_declared);
  if (outputs == 0) outputs = 1;
  for (int i = 0; i < outputs; ++i) {
    std::string ref = "outputs." + std::to_string(i);
    std::string named = io && i < static_cast<int>(io->outputs.size()) ? "outputs." + io->outputs[i].name : ref;
    if (!written.count(ref) && !written.count(named))
      throw PlanError("plan: " + ref + " is never written by a forward step (pass it to a kernel as a non-const pointer, or as a gemm/conv out)");
  }
}

namespace {
int64_t spatial_product(const int64_t* v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}
}  // namespace

int64_t BoundConv::x_elements() const { return n * c * spatial_product(in, spatial); }
int64_t BoundConv::w_elements() const { return (transposed ? c * (k / groups) : k * (c / groups)) * spatial_product(kernel, spatial); }
int64_t BoundConv::out_elements() const { return n * k * spatial_product(out_size, spatial); }

int BoundPlan::buffer_index(const std::string& ref) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].ref == ref) return static_cast<int>(i);
  return -1;
}

std::vector<int> BoundStep::buffers() const {
  std::vector<int> out;
  if (kind == Step::kLaunch) {
    for (const auto& a : launch.args)
      if (a.buffer >= 0) out.push_back(a.buffer);
  } else if (kind == Step::kGemm) {
    out = {gemm.a, gemm.b, gemm.out, gemm.bias};
  } else {
    out = {conv.x, conv.w, conv.out, conv.bias};
  }
  out.erase(std::remove(out.begin(), out.end(), -1), out.end());
  return out;
}

std::vector<std::string> BoundPlan::unread(Space space) const {
  std::vector<bool> named(buffers.size(), false);
  for (const auto* steps : {&init, &forward})
    for (const auto& s : *steps)
      for (int b : s.buffers()) named[size_t(b)] = true;
  std::vector<std::string> out;
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].space == space && !buffers[i].module_buffer && !named[i]) out.push_back(buffers[i].ref);
  return out;
}

int64_t BoundPlan::scratch_bytes() const {
  int64_t n = 0;
  for (auto& b : buffers)
    if (b.space == Space::scratch && __builtin_add_overflow(n, b.bytes, &n))
      throw PlanError("scratch: the buffers' sizes add up past 2^63 bytes");
  return n;
}

namespace {

// The dtypes the library steps hand to cuBLASLt and cuDNN (executor's data_type and dnn_type):
// any other would be described to the library as float.
void require_library_dtype(const std::string& label, const char* step, const std::string& dtype) {
  if (dtype != "F32" && dtype != "F16" && dtype != "BF16")
    throw PlanError(label + ": " + step + " supports F32, F16, BF16 buffers, not " + dtype);
}

// Bytes per element of a bound buffer's dtype (checked when the plan was parsed or the task read).
int64_t element_bytes(const std::string& dtype, const std::string& where) {
  const DtypeInfo* d = dtype_info(dtype);
  if (!d) throw PlanError(where + ": unknown dtype '" + dtype + "'");
  return static_cast<int64_t>(d->bytes);
}

// A scalar argument must be what its parameter can hold: 2^32 + 1 passed to an int would arrive as
// 1, 1e300 to a float as inf. Integers: the type's range (an unsigned one also takes a negative
// value of its signed twin, -1 as all ones, as C converts it); floats: finite in the type.
void scalar_fits(const Value& v, const ParamType& p, const std::string& where, const std::string& kernel) {
  if (p.kind == ParamType::kFloat) {
    const double d = v.as_double();
    if (p.size_bytes == 8 ? !std::isfinite(d) : !std::isfinite(static_cast<float>(d)))
      throw PlanError(where + " = " + v.text() + ": not a finite " + p.text, kernel);
    return;
  }
  if (p.kind != ParamType::kInteger || v.is_float || p.size_bytes <= 0 || p.size_bytes >= 8) return;
  const int bits = 8 * p.size_bytes;
  // An extern "C" kernel's PTX (.u32, .s32, .b32) does not always say the signedness: either range.
  const bool is_unsigned = p.dtype.empty() || p.dtype[0] == 'U';
  const int64_t lo = p.dtype == "BOOL" ? 0 : -(int64_t(1) << (bits - 1));
  const int64_t hi = p.dtype == "BOOL" ? 1 : is_unsigned ? (int64_t(1) << bits) - 1 : (int64_t(1) << (bits - 1)) - 1;
  if (v.i < lo || v.i > hi)
    throw PlanError(where + " = " + v.text() + ": does not fit the kernel's " + p.text + " (" + std::to_string(lo) + " to " +
                        std::to_string(hi) + ")",
                    kernel);
}

std::vector<uint8_t> pack_scalar(const Value& v, const ParamType& p) {
  std::vector<uint8_t> out(p.size_bytes > 0 ? p.size_bytes : 4);
  auto put = [&](auto x) { std::memcpy(out.data(), &x, sizeof x); };
  if (p.kind == ParamType::kFloat) {
    if (p.size_bytes == 8) put(v.as_double());
    else put(static_cast<float>(v.as_double()));
  } else {
    int64_t i = v.is_float ? static_cast<int64_t>(v.f) : v.i;
    switch (out.size()) {
      case 1: put(static_cast<int8_t>(i)); break;
      case 2: put(static_cast<int16_t>(i)); break;
      case 4: put(static_cast<int32_t>(i)); break;
      default: put(static_cast<int64_t>(i)); break;
    }
  }
  return out;
}

// A view outside its buffer: its iteration is added to the message where a repeat made it.
struct ViewError : PlanError {
  using PlanError::PlanError;
};

// bind_plan's state and steps: the resolved dims (the loop indices bound as it unrolls) and the
// buffers bound so far, with one method per kind of step.
class Binder {
 public:
  Binder(const Plan& plan, const Signatures& sigs, const IoSpec& io, const LaunchLimits& limits, BoundPlan& bp)
      : plan(plan), sigs(sigs), io(io), limits(limits), bp(bp), r{plan, &io} {}

  // The task's inputs, outputs and params, then the plan's scratch buffers, sized.
  void add_buffers() {
  for (size_t i = 0; i < io.inputs.size(); ++i) add(Space::input, i, io.inputs[i], std::to_string(i));
  for (size_t i = 0; i < io.outputs.size(); ++i) add(Space::output, i, io.outputs[i], std::to_string(i));
  for (size_t i = 0; i < io.params.size(); ++i) add(Space::param, i, io.params[i], io.params[i].name);
  for (size_t i = 0; i < plan.scratch.size(); ++i) {
    const auto& s = plan.scratch[i];
    TensorSpec t;
    t.name = "scratch." + s.name;
    t.dtype = s.dtype;
    for (auto& e : s.shape) {
      Value v = eval_in(e, r, "scratch." + s.name + " shape", plan);
      if (v.i < 0) throw PlanError("scratch." + s.name + ": negative size " + v.text());
      t.shape.push_back(v.i);
    }
    add(Space::scratch, static_cast<int>(i), t, s.name);
  }
  }

  // Steps in order, each `repeat` block unrolled with its index bound (the loops nest; a step's
  // loops are listed outermost first).
  void unroll(const std::vector<Step>& steps, size_t lo, size_t hi, size_t depth, std::vector<BoundStep>& out,
              const std::string& at) {
    for (size_t i = lo; i < hi;) {
      if (steps[i].loops.size() <= depth) {
        BoundStep bs;
        try {
          bs = bind_leaf(steps[i]);
        } catch (const ViewError& e) {  // which iteration: a view that fits at t = 0 may not at t = 255
          if (at.empty()) throw;
          throw ViewError(std::string(e.what()) + " (at" + at + ")");
        }
        bs.label += at;
        out.push_back(std::move(bs));
        if (int64_t(out.size()) > kMaxBoundSteps)
          throw PlanError(steps[i].section + ": more than " + std::to_string(kMaxBoundSteps) +
                          " steps per call once the repeats are unrolled (the binder's own bound; the rules allow fewer: "
                          "max_forward_steps, max_init_steps)");
        ++i;
        continue;
      }
      const int id = steps[i].loops[depth];
      size_t j = i;
      while (j < hi && steps[j].loops.size() > depth && steps[j].loops[depth] == id) ++j;
      const Loop& loop = plan.loops[id];
      const int64_t count = eval_in(loop.count, r, loop.path + " repeat", plan).i;
      if (count < 0) throw PlanError(loop.path + ": repeat count " + std::to_string(count) + " is negative");
      if (count > kMaxBoundSteps)
        throw PlanError(loop.path + ": repeat count " + std::to_string(count) + " is more than " +
                        std::to_string(kMaxBoundSteps) + " steps per call (the binder's own bound; the rules allow fewer: "
                        "max_forward_steps, max_init_steps)");
      for (int64_t t = 0; t < count; ++t) {
        r.dims[loop.index] = Value::integer(t);
        unroll(steps, i, j, depth + 1, out, at + " [" + loop.index + "=" + std::to_string(t) + "]");
      }
      r.dims.erase(loop.index);
      i = j;
    }
  }

  const Plan& plan;
  const Signatures& sigs;
  const IoSpec& io;
  const LaunchLimits& limits;
  BoundPlan& bp;
  Resolver r;

 private:
  void add(Space space, int index, const TensorSpec& t, const std::string& key) {
    BoundBuffer b;
    b.space = space;
    b.index = index;
    b.ref = std::string(space_name(space)) + "." + key;
    b.dtype = t.dtype;
    b.shape = t.shape;
    b.bytes = t.bytes();
    b.module_buffer = space == Space::param && t.module_buffer;  // a module buffer is a param; an input is read
    bp.buffers.push_back(b);
  }

  // A params name with {expression} parts, named for this iteration: `params.layers.{i}.weight` at
  // i = 3 is params.layers.3.weight, which the task must have.
  BufferRef concrete(const BufferRef& ref, const std::string& where) {
    if (!ref.templated()) return ref;
    BufferRef c;
    c.space = ref.space;
    c.key = ref.literal[0];
    for (size_t i = 0; i < ref.parts.size(); ++i) {
      const Value v = eval_in(ref.parts[i], r, where + " " + ref.text(), plan);
      if (v.is_float || v.i < 0)
        throw PlanError(where + ": " + ref.text() + ": {" + ref.parts[i].text() + "} = " + v.text() + " is not a name part (an integer, 0 or more)");
      c.key += std::to_string(v.i) + ref.literal[i + 1];
    }
    if (!io.find(c)) {
      std::string near;
      for (const auto& t : io.params)
        if (t.name.compare(0, ref.literal[0].size(), ref.literal[0]) == 0) near += (near.empty() ? "" : ", ") + t.name;
      throw PlanError(where + ": " + ref.text() + " is " + c.text() + " here, which the task does not have" +
                      (near.empty() ? std::string() : " (it has " + (near.size() > 300 ? near.substr(0, 300) + "..." : near) + ")"));
    }
    return c;
  }

  // The bound buffer a reference names. The parse-time check (buffer_dtype) lets a reference into a list
  // the task left empty pass, as a task that carries only its code does; binding needs the buffer itself.
  int index_of(const BufferRef& templ, const std::string& where = "") {
    int idx = -1;
    const BufferRef ref = concrete(templ, where);
    if (ref.space != Space::scratch && !io.find(ref, &idx))
      throw PlanError(where + ": " + ref.text() + " does not exist (the task has no " + space_name(ref.space) + ")");
    const std::string name = ref.space == Space::scratch ? ref.text()
                             : std::string(space_name(ref.space)) + "." +
                                   (ref.space == Space::param ? io.params[idx].name : std::to_string(idx));
    const int b = bp.buffer_index(name);
    if (b < 0) throw InternalError("plan binding: no bound buffer for " + name + " (" + where + ")");
    return b;
  }

  // A view's offset in bytes, checked against its buffer: 0 <= offset, and `need` elements from it
  // (0: only the start) inside the buffer.
  int64_t view_offset(const Expr& offset, int buffer, int64_t need, const std::string& where) {
    const BoundBuffer& b = bp.buffers[buffer];
    const int64_t esz = element_bytes(b.dtype, where);
    int64_t off = offset.empty() ? 0 : eval_in(offset, r, where + " offset", plan).i;
    const int64_t numel = esz ? b.bytes / esz : 0;
    if (off < 0 || off > numel || need > numel - off)
      throw ViewError(where + ": the view " + b.ref + "[" + std::to_string(off) + "]" +
                      (need ? " of " + std::to_string(need) + " elements" : "") + " is outside " + b.ref + " (" +
                      std::to_string(numel) + " elements)");
    return off * esz;
  }

  static bool overlap(int b1, int64_t o1, int64_t n1, int b2, int64_t o2, int64_t n2) {
    return b1 == b2 && o1 < o2 + n2 && o2 < o1 + n1;
  }

  BoundStep bind_leaf(const Step& step) {
    BoundStep bs;
    bs.kind = step.kind;
    bs.label = step.label();
    if (step.kind == Step::kLaunch)
      bind_launch(step, bs);
    else if (step.kind == Step::kGemm)
      bind_gemm(step, bs);
    else
      bind_conv(step, bs);
    return bs;
  }

  void bind_launch(const Step& step, BoundStep& bs) {
    const LaunchStep& L = step.launch;
    const KernelSignature& sig = sigs.at(L.kernel);
    bs.launch.kernel = L.kernel;
    bs.launch.mangled = sig.mangled;
    std::vector<std::optional<int64_t>> grid, block;
    for (const auto& e : L.grid) grid.push_back(eval_in(e, r, bs.label + " grid", plan, L.kernel).i);
    for (const auto& e : L.block) block.push_back(eval_in(e, r, bs.label + " block", plan, L.kernel).i);
    int64_t sh = eval_in(L.shared, r, bs.label + " shared", plan, L.kernel).i;
    check_sizes(bs.label, L.kernel, grid, block, sh, limits);
    for (size_t d = 0; d < 3; ++d) {
      if (d < grid.size()) bs.launch.grid[d] = static_cast<unsigned>(*grid[d]);
      if (d < block.size()) bs.launch.block[d] = static_cast<unsigned>(*block[d]);
    }
    bs.launch.shared = static_cast<unsigned>(sh);
    for (size_t i = 0; i < L.args.size(); ++i) {
      BoundArg a;
      a.text = L.args[i].text;
      if (L.args[i].buffer) {
        a.buffer = index_of(*L.args[i].buffer, bs.label + ": " + ordinal_arg(i));
        if (L.args[i].buffer->templated() && sig.from_mangled && !dtype_fits(sig.params[i], bp.buffers[a.buffer].dtype))
          throw PlanError(bs.label + ": " + ordinal_arg(i) + " is " + bp.buffers[a.buffer].ref + " (" + bp.buffers[a.buffer].dtype +
                              "), kernel expects " + sig.params[i].text,
                          L.kernel);
        // A launch's view must start at an element of its buffer (its extent is the kernel's
        // business: the guard zones catch writes past the buffer).
        a.offset = view_offset(L.args[i].offset, a.buffer, L.args[i].offset.empty() ? 0 : 1, bs.label + ": " + ordinal_arg(i));
      } else {
        const Value v = eval_in(L.args[i].expr, r, bs.label, plan, L.kernel);
        scalar_fits(v, sig.params[i], bs.label + ": " + ordinal_arg(i) + " ('" + L.args[i].text + "')", L.kernel);
        a.scalar = pack_scalar(v, sig.params[i]);
      }
      bs.launch.args.push_back(std::move(a));
    }
    bs.launch.cooperative = L.cooperative;
    if (!L.cluster.empty()) {
      int64_t blocks = 1;
      for (size_t d = 0; d < 3; ++d) {
        int64_t c = d < L.cluster.size() ? eval_in(L.cluster[d], r, bs.label + " cluster", plan, L.kernel).i : 1;
        if (c < 1 || bs.launch.grid[d] % c != 0)
          throw PlanError(bs.label + ": cluster[" + std::to_string(d) + "] = " + std::to_string(c) +
                              " must be at least 1 and divide grid[" + std::to_string(d) + "] = " + std::to_string(bs.launch.grid[d]),
                          L.kernel);
        bs.launch.cluster[d] = static_cast<unsigned>(c);
        blocks *= c;
      }
      // 8 blocks are portable; Hopper allows 16 with the non-portable attribute, set at launch.
      if (blocks > 16)
        throw PlanError(bs.label + ": a cluster of " + std::to_string(blocks) + " blocks (at most 16 on " + limits.arch + ")",
                        L.kernel);
    }
  }

  void bind_gemm(const Step& step, BoundStep& bs) {
    const GemmStep& G = step.gemm;
    BoundGemm& g = bs.gemm;
    g.a = index_of(G.a, bs.label);
    g.b = index_of(G.b, bs.label);
    g.out = index_of(G.out, bs.label);
    if (G.bias) g.bias = index_of(*G.bias, bs.label);
    const auto &A = bp.buffers[g.a], &B = bp.buffers[g.b], &O = bp.buffers[g.out];
    if (A.dtype != B.dtype || A.dtype != O.dtype)
      throw PlanError(bs.label + ": a, b and out must have one dtype (" + A.dtype + ", " + B.dtype + ", " + O.dtype + ")");
    if (g.bias >= 0 && bp.buffers[g.bias].dtype != O.dtype)  // the library reads it as out's type
      throw PlanError(bs.label + ": bias must have out's dtype (bias " + bp.buffers[g.bias].dtype + ", out " + O.dtype + ")");
    const bool views = !G.a_offset.empty() || !G.b_offset.empty() || !G.out_offset.empty();
    if (views && (G.m.empty() || G.n.empty() || G.k.empty()))
      throw PlanError(bs.label + ": a gemm on views needs m, n and k (a view's shape is not its buffer's)");
    require_library_dtype(bs.label, "gemm", A.dtype);
    g.dtype = A.dtype;
    auto last2 = [](const BoundBuffer& b, int64_t& r0, int64_t& r1) {
      if (b.shape.size() < 2) { r0 = 1; r1 = b.shape.empty() ? 1 : b.shape[0]; return; }
      r0 = b.shape[b.shape.size() - 2];
      r1 = b.shape.back();
    };
    int64_t a0, a1, b0, b1;
    last2(A, a0, a1);
    last2(B, b0, b1);
    g.m = G.trans_a ? a1 : a0;
    g.k = G.trans_a ? a0 : a1;
    g.n = G.trans_b ? b0 : b1;
    int64_t kb = G.trans_b ? b1 : b0;
    if (!G.m.empty()) g.m = eval_in(G.m, r, bs.label + " m", plan).i;
    if (!G.n.empty()) g.n = eval_in(G.n, r, bs.label + " n", plan).i;
    if (!G.k.empty()) g.k = kb = eval_in(G.k, r, bs.label + " k", plan).i;
    g.batch = G.batch.empty() ? 1 : eval_in(G.batch, r, bs.label + " batch", plan).i;
    if (G.m.empty() && G.batch.empty() && A.shape.size() > 2) {  // [.., M, K] flattened rows
      int64_t rows = 1;
      for (size_t d = 0; d + 1 < A.shape.size(); ++d) rows *= A.shape[d];
      if (!G.trans_a) g.m = rows;
    }
    if (kb != g.k) throw PlanError(bs.label + ": inner sizes differ (a gives k=" + std::to_string(g.k) + ", b gives " + std::to_string(kb) + ")");
    const std::string dims = "m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                             " batch=" + std::to_string(g.batch);
    if (g.m < 1 || g.n < 1 || g.k < 1 || g.batch < 1)
      throw PlanError(bs.label + ": " + dims + ": every size must be at least 1");
    if (g.batch > INT32_MAX)  // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT is an int32_t
      throw PlanError(bs.label + ": batch = " + std::to_string(g.batch) + ": cuBLASLt's batch count is at most 2^31 - 1");
    gemm_views(G, bs, g, dims, views);
    g.trans_a = G.trans_a;
    g.trans_b = G.trans_b;
    g.activation = G.activation;
    g.compute = G.compute;
    g.alpha = scale_field(G.alpha, 1.0, bs.label + " alpha");
    g.beta = scale_field(G.beta, 0.0, bs.label + " beta");
  }

  // alpha or beta: empty gives `dflt`; else a finite number as the library takes it (a float).
  double scale_field(const Expr& e, double dflt, const std::string& where) {
    if (e.empty()) return dflt;
    const Value v = eval_in(e, r, where, plan);
    if (!std::isfinite(static_cast<float>(v.as_double())))
      throw PlanError(where + " = " + v.text() + " ('" + e.text() + "'): not a finite float");
    return v.as_double();
  }

  // A stride field's value: empty gives `dense`; else an integer at least `least` (elements).
  int64_t stride_field(const Expr& e, int64_t dense, int64_t least, const std::string& where) {
    if (e.empty()) return dense;
    const Value v = eval_in(e, r, where, plan);
    if (v.is_float || v.i < least || v.i > (int64_t(1) << 62))
      throw PlanError(where + " = " + v.text() + " ('" + e.text() + "'): must be an integer, at least " + std::to_string(least));
    return v.i;
  }

  // A view of `buffer` checked against it: from its offset, its span (the last element it reaches)
  // inside the buffer; an output's indices never share an element.
  StridedView checked_view(int buffer, int64_t offset_bytes, StridedView v, bool output, const std::string& where) {
    const BoundBuffer& b = bp.buffers[buffer];
    const int64_t esz = element_bytes(b.dtype, where);
    v.offset = esz ? offset_bytes / esz : 0;
    const auto span = v.span();
    const int64_t numel = esz ? b.bytes / esz : 0;
    if (!span || *span > numel - v.offset)
      throw ViewError(where + ": the view " + b.ref + v.text() + " reaches past " + b.ref + " (" + std::to_string(numel) +
                      " elements)");
    if (output && v.aliases())
      throw PlanError(where + ": the view " + b.ref + v.text() + " writes some elements twice (its strides overlap)");
    return v;
  }

  // Row and batch strides, spans within the buffers, and no overlap between out and a or b.
  void gemm_views(const GemmStep& G, const BoundStep& bs, BoundGemm& g, const std::string& dims, bool views) {
    // Row-major as stored: a is [m, k] ([k, m] with trans_a), b [k, n] ([n, k] with trans_b), out [m, n].
    const int64_t ra = G.trans_a ? g.k : g.m, ca = G.trans_a ? g.m : g.k;
    const int64_t rb = G.trans_b ? g.n : g.k, cb = G.trans_b ? g.k : g.n;
    const std::string at = bs.label + " gemm ";
    g.lda = stride_field(G.lda, ca, ca, at + "lda");
    g.ldb = stride_field(G.ldb, cb, cb, at + "ldb");
    g.ldc = stride_field(G.ldc, g.n, g.n, at + "ldc");
    // a and b may repeat over the batch (stride 0); out's matrices must not meet.
    auto dense = [](int64_t rows, int64_t ld) {  // saturates: a size past 2^62 fails the span check
      const __int128 p = __int128(rows) * ld;
      return p > (int64_t(1) << 62) ? int64_t(1) << 62 : int64_t(p);
    };
    g.stride_a = stride_field(G.stride_a, dense(ra, g.lda), 0, at + "stride_a");
    g.stride_b = stride_field(G.stride_b, dense(rb, g.ldb), 0, at + "stride_b");
    g.stride_c = stride_field(G.stride_c, dense(g.m, g.ldc), 0, at + "stride_c");
    auto view = [&](int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
      StridedView v;
      v.sizes = {g.batch, rows, cols};
      v.strides = {stride, ld, 1};
      return v;
    };
    const std::string fit = ": " + dims + " does not fit the buffers" + (views ? " (from the views' offsets)" : "");
    g.a_offset = view_offset(G.a_offset, g.a, 0, bs.label + " a");
    g.b_offset = view_offset(G.b_offset, g.b, 0, bs.label + " b");
    g.out_offset = view_offset(G.out_offset, g.out, 0, bs.label + " out");
    StridedView va, vb, vo;
    try {
      va = checked_view(g.a, g.a_offset, view(ra, ca, g.lda, g.stride_a), false, bs.label + " a");
      vb = checked_view(g.b, g.b_offset, view(rb, cb, g.ldb, g.stride_b), false, bs.label + " b");
      vo = checked_view(g.out, g.out_offset, view(g.m, g.n, g.ldc, g.stride_c), true, bs.label + " out");
    } catch (const ViewError& e) {
      throw ViewError(bs.label + fit + " (" + e.what() + ")");
    }
    if (g.bias >= 0) g.bias_offset = view_offset(G.bias_offset, g.bias, g.n, bs.label + " bias");
    // cuBLASLt reads a and b while it writes out: they may not overlap it.
    if ((g.out == g.a && may_overlap(vo, va)) || (g.out == g.b && may_overlap(vo, vb)))
      throw PlanError(bs.label + ": out overlaps a or b (" + bp.buffers[g.out].ref + "); cuBLASLt does not compute in place");
    bias_apart(g.bias, g.bias_offset, g.n, g.out, vo, bs);
  }

  void bind_conv(const Step& step, BoundStep& bs) {
    const ConvStep& C = step.conv;
    BoundConv& c = bs.conv;
    c.x = index_of(C.x, bs.label);
    c.w = index_of(C.w, bs.label);
    c.out = index_of(C.out, bs.label);
    if (C.bias) c.bias = index_of(*C.bias, bs.label);
    const auto &X = bp.buffers[c.x], &W = bp.buffers[c.w], &O = bp.buffers[c.out];
    c.transposed = C.transposed;
    c.groups = conv_size(C.groups, bs, "groups");
    const char* kind = c.transposed ? "conv (transposed)" : "conv";
    const bool given = !C.shape.empty();
    if (!given && (!C.x_offset.empty() || !C.w_offset.empty() || !C.out_offset.empty()))
      throw PlanError(bs.label + ": a conv on views needs its shape: {n, c, k, ...} (a view's shape is not its buffer's)");
    if (given)
      conv_shape_given(C, bs, c);
    else
      conv_shape_from_buffers(bs, c, X, W, O, kind);
    conv_windows(C, bs, c);
    conv_extent(C, bs, c, X, W, O, given);
  }

  // A conv field's value (stride, padding, dilation, output_padding, groups): an integer, 0 to 2^31-1
  // (cuDNN's int); whether it fits the convolution is checked where it is used.
  int64_t conv_size(const Expr& e, const BoundStep& bs, const char* field) {
    const Value v = eval_in(e, r, bs.label + " conv " + field, plan);
    if (v.is_float || v.i < 0 || v.i > INT32_MAX)
      throw PlanError(bs.label + ": conv " + field + " = " + v.text() + " ('" + e.text() + "') is not a size (an integer, 0 to 2^31-1)");
    return v.i;
  }

  // The operands' shapes given (views into larger buffers).
  void conv_shape_given(const ConvStep& C, const BoundStep& bs, BoundConv& c) {
    auto has = [&](const char* key) { return C.shape.count(key) > 0; };
    // The most spatial dimensions any key names: a `t` or an `r` without its `d` or `h` is missing
    // that size, not ignored.
    c.spatial = has("d") || has("t") ? 3 : has("h") || has("r") ? 2 : 1;
    std::vector<const char*> need = {"n", "c", "k", "w", "s"};
    if (c.spatial >= 2) need.insert(need.end(), {"h", "r"});
    if (c.spatial == 3) need.insert(need.end(), {"d", "t"});
    for (const char* key : need)
      if (!has(key)) throw PlanError(bs.label + ": conv shape needs n, c, k, the sizes of x ([d, h,] w) and of the kernel ([t, r,] s): " +
                                     key + " is missing");
    auto get = [&](const char* key) {
      int64_t v = eval_in(C.shape.at(key), r, bs.label + " shape." + key, plan).i;
      if (v < 1 || v > INT32_MAX) throw PlanError(bs.label + ": conv shape." + key + " = " + std::to_string(v) + " (1 to 2^31-1, cuDNN's int)");
      return v;
    };
    c.n = get("n"); c.c = get("c"); c.k = get("k");
    const char* in_keys[3] = {"d", "h", "w"};
    const char* k_keys[3] = {"t", "r", "s"};
    for (int i = 0; i < c.spatial; ++i) {
      c.in[i] = get(in_keys[3 - c.spatial + i]);
      c.kernel[i] = get(k_keys[3 - c.spatial + i]);
    }
  }

  // From the buffers: x [N, C, spatial...], w [K, C/g, kernel...] ([C, K/g, kernel...] transposed).
  void conv_shape_from_buffers(const BoundStep& bs, BoundConv& c, const BoundBuffer& X, const BoundBuffer& W,
                               const BoundBuffer& O, const char* kind) {
    const size_t rank = X.shape.size();
    if (rank < 3 || rank > 5 || W.shape.size() != rank || O.shape.size() != rank)
      throw PlanError(bs.label + ": " + kind + " needs x, w and out of one rank, 3 to 5 (NCL, NCHW, NCDHW); x is " +
                      std::to_string(X.shape.size()) + "-d (" + X.ref + "), w " + std::to_string(W.shape.size()) + "-d (" + W.ref +
                      "), out " + std::to_string(O.shape.size()) + "-d (" + O.ref + "); views need a shape: {n, c, k, ...}");
    c.spatial = int(rank) - 2;
    c.n = X.shape[0];
    c.c = X.shape[1];
    if (c.transposed) {
      if (W.shape[0] != c.c)
        throw PlanError(bs.label + ": w's first dimension (" + std::to_string(W.shape[0]) + ") must be x's channels (" +
                        std::to_string(c.c) + "): a transposed conv's weight is [C_in, C_out / groups, ...]");
      c.k = W.shape[1] * c.groups;
    } else {
      c.k = W.shape[0];
      if (c.groups >= 1 && W.shape[1] * c.groups != c.c)
        throw PlanError(bs.label + ": w [" + std::to_string(W.shape[0]) + ", " + std::to_string(W.shape[1]) + ", ...] has " +
                        std::to_string(W.shape[1]) + " input channels per group; x has " + std::to_string(c.c) + " channels in " +
                        std::to_string(c.groups) + " groups (w's second dimension must be " +
                        std::to_string(c.groups ? c.c / c.groups : 0) + ")");
    }
    for (int i = 0; i < c.spatial; ++i) {
      c.in[i] = X.shape[2 + i];
      c.kernel[i] = W.shape[2 + i];
    }
  }

  // groups, then stride, padding, dilation, output_padding, and the output's spatial sizes.
  void conv_windows(const ConvStep& C, const BoundStep& bs, BoundConv& c) {
    if (c.groups < 1 || c.c % c.groups != 0 || c.k % c.groups != 0)
      throw PlanError(bs.label + ": groups = " + std::to_string(c.groups) + " must divide the input channels (" + std::to_string(c.c) +
                      ") and the output channels (" + std::to_string(c.k) + ")");
    // stride, padding, dilation, output_padding: one value for all, or one per spatial dimension.
    const char* names[4] = {"stride", "padding", "dilation", "output_padding"};
    const Expr* from[4] = {C.stride, C.padding, C.dilation, C.output_padding};
    int64_t* to[4] = {c.stride, c.padding, c.dilation, c.output_padding};
    for (int f = 0; f < 4; ++f) {
      if (C.given[f] && C.given[f] != c.spatial)
        throw PlanError(bs.label + ": " + names[f] + " has " + std::to_string(C.given[f]) + " values, the convolution " +
                        std::to_string(c.spatial) + " spatial dimensions");
      for (int i = 0; i < c.spatial; ++i) to[f][i] = conv_size(from[f][C.given[f] ? i : 0], bs, names[f]);
    }
    for (int i = 0; i < c.spatial; ++i) {
      if (c.stride[i] < 1 || c.dilation[i] < 1) throw PlanError(bs.label + ": stride and dilation must be at least 1");
      if (c.transposed) {
        // PyTorch allows output_padding below stride or dilation; cuDNN computes the transposed
        // convolution as the forward's backward-data, whose forward of out must give x's size: only
        // output_padding < stride does (a value between stride and dilation would fail at run time).
        if (c.output_padding[i] >= c.stride[i])
          throw PlanError(bs.label + ": output_padding must be smaller than stride (cuDNN's transposed convolution)");
        c.out_size[i] = (c.in[i] - 1) * c.stride[i] - 2 * c.padding[i] + c.dilation[i] * (c.kernel[i] - 1) + c.output_padding[i] + 1;
      } else {
        if (c.output_padding[i] != 0) throw PlanError(bs.label + ": output_padding is for transposed convolutions");
        c.out_size[i] = (c.in[i] + 2 * c.padding[i] - c.dilation[i] * (c.kernel[i] - 1) - 1) / c.stride[i] + 1;
      }
      if (c.out_size[i] < 1) throw PlanError(bs.label + ": the output would be empty (spatial dimension " + std::to_string(i) + ")");
    }
  }

  // out's shape, the views' extents in checked arithmetic, dtypes, and no overlap.
  void conv_extent(const ConvStep& C, const BoundStep& bs, BoundConv& c, const BoundBuffer& X, const BoundBuffer& W,
                   const BoundBuffer& O, bool given) {
    std::vector<int64_t> want_out = {c.n, c.k};
    for (int i = 0; i < c.spatial; ++i) want_out.push_back(c.out_size[i]);
    auto shape_text = [](const std::vector<int64_t>& v) {
      std::string t = "[";
      for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + std::to_string(v[i]);
      return t + "]";
    };
    if (!given && O.shape != want_out)
      throw PlanError(bs.label + ": out (" + O.ref + " " + shape_text(O.shape) + ") must be " + shape_text(want_out));
    // Element counts in checked arithmetic: given shapes are the policy's numbers.
    auto count = [&](std::initializer_list<int64_t> f, const int64_t* sp, const char* what) {
      int64_t n = 1;
      for (int64_t v : f)
        if (__builtin_mul_overflow(n, v, &n) || n > (int64_t(1) << 60)) n = -1;
      for (int i = 0; i < c.spatial && n >= 0; ++i)
        if (__builtin_mul_overflow(n, sp[i], &n) || n > (int64_t(1) << 60)) n = -1;
      if (n < 0) throw PlanError(bs.label + ": " + what + " has more elements than any buffer");
      return n;
    };
    const int64_t w_elems = count({c.transposed ? c.c : c.k, (c.transposed ? c.k : c.c) / c.groups}, c.kernel, "w");
    count({c.n, c.c}, c.in, "x");
    count({c.n, c.k}, c.out_size, "out");
    c.x_offset = view_offset(C.x_offset, c.x, 0, bs.label + " x");
    c.w_offset = view_offset(C.w_offset, c.w, w_elems, bs.label + " w");
    c.out_offset = view_offset(C.out_offset, c.out, 0, bs.label + " out");
    if (c.bias >= 0) c.bias_offset = view_offset(C.bias_offset, c.bias, c.k, bs.label + " bias");
    if (X.dtype != W.dtype || X.dtype != O.dtype) throw PlanError(bs.label + ": x, w and out must have one dtype");
    if (c.bias >= 0 && bp.buffers[c.bias].dtype != O.dtype)  // the library reads it as out's type
      throw PlanError(bs.label + ": bias must have out's dtype (bias " + bp.buffers[c.bias].dtype + ", out " + O.dtype + ")");
    require_library_dtype(bs.label, "conv", X.dtype);
    c.dtype = X.dtype;
    std::vector<int64_t> x_sizes = {c.n, c.c}, out_sizes = {c.n, c.k};
    for (int i = 0; i < c.spatial; ++i) x_sizes.push_back(c.in[i]), out_sizes.push_back(c.out_size[i]);
    const StridedView vx = checked_view(c.x, c.x_offset, conv_view(C.x_strides, x_sizes, c.x_strides, bs, "x_strides"), false,
                                        bs.label + " x");
    const StridedView vo = checked_view(c.out, c.out_offset, conv_view(C.out_strides, out_sizes, c.out_strides, bs, "out_strides"),
                                        true, bs.label + " out");
    // cuDNN reads x and w while it writes out: no overlap (in-place is refused).
    const int64_t esz = element_bytes(X.dtype, bs.label);
    const StridedView vw = StridedView::packed(esz ? c.w_offset / esz : 0, {w_elems});
    if ((c.out == c.x && may_overlap(vo, vx)) || (c.out == c.w && may_overlap(vo, vw)))
      throw PlanError(bs.label + ": out overlaps x or w (" + O.ref + "); cuDNN does not convolve in place");
    // cudnnSetTensorNdDescriptor answers a bare NOT_SUPPORTED past "2 Giga-elements" (cuDNN API
    // reference), counted as the span, as PyTorch's 32-bit index check does; PyTorch splits such a
    // batch itself, a plan must. (The executor's int descriptors rely on it.)
    for (const auto& [view, what] : {std::pair{&vx, "x"}, {&vo, "out"}})
      if (*view->span() > INT32_MAX)
        throw PlanError(bs.label + ": conv " + what + " spans " + std::to_string(*view->span()) +
                        " elements; cuDNN's tensors hold at most 2^31 - 1 (split the batch over several conv steps)");
    bias_apart(c.bias, c.bias_offset, c.k, c.out, vo, bs);
  }

  // A library step's bias (n or k elements from its offset) is read while out is written: apart.
  void bias_apart(int bias, int64_t bias_offset, int64_t count, int out, const StridedView& vo, const BoundStep& bs) {
    if (bias < 0 || bias != out) return;
    const int64_t esz = element_bytes(bp.buffers[bias].dtype, bs.label);
    if (may_overlap(vo, StridedView::packed(esz ? bias_offset / esz : 0, {count})))
      throw PlanError(bs.label + ": bias overlaps out (" + bp.buffers[out].ref + "); the library reads it while out is written");
  }

  // x's or out's layout: packed, or the plan's strides (one per dimension, each at least 1), kept in
  // `bound` for the executor's descriptors.
  StridedView conv_view(const std::vector<Expr>& given, const std::vector<int64_t>& sizes, std::vector<int64_t>& bound,
                        const BoundStep& bs, const char* field) {
    StridedView v = StridedView::packed(0, sizes);
    if (given.empty()) return v;
    if (given.size() != sizes.size())
      throw PlanError(bs.label + ": conv " + field + " has " + std::to_string(given.size()) + " values, the tensor " +
                      std::to_string(sizes.size()) + " dimensions ([n, c, spatial...])");
    for (size_t i = 0; i < given.size(); ++i) {
      v.strides[i] = stride_field(given[i], 1, 1, bs.label + " conv " + field);
      // cuDNN's descriptors hold ints (a 1-d conv's inserted height takes the width's stride times the width).
      const __int128 widest = i + 1 == given.size() && given.size() == 3 ? __int128(v.strides[i]) * sizes[i] : v.strides[i];
      if (widest > INT32_MAX)
        throw PlanError(bs.label + ": conv " + field + " = " + std::to_string(v.strides[i]) + ": past cuDNN's int (2^31-1)");
    }
    bound = v.strides;
    return v;
  }
};

}  // namespace

BoundPlan bind_plan(const Plan& plan, const Signatures& sigs, const IoSpec& io, const LaunchLimits& limits) {
  check_plan(plan, sigs, &io, limits);
  if (!io.shapes_known()) throw PlanError("plan: the task's tensor shapes are unknown, cannot bind");
  BoundPlan bp;
  Binder binder(plan, sigs, io, limits, bp);
  Resolver& r = binder.r;
  eval_dims(plan, r);
  for (auto& [name, v] : r.dims)
    if (!v.is_float) bp.dims[name] = v.i;  // a float dim (a scale, say) is not a size; 1e300 has no int64
  binder.add_buffers();
  for (auto* section : {&plan.init, &plan.forward}) {
    auto& out = section == &plan.init ? bp.init : bp.forward;
    binder.unroll(*section, 0, section->size(), 0, out, "");
  }
  return bp;
}

}  // namespace ca::bundle
