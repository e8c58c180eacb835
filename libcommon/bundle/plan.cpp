// Plan parsing (YAML or JSON) into steps, dims and scratch declarations; the checks against the
// kernels and the binding to a task's shapes are in bind.cpp, the task's tensors in tensor_spec.cpp.
#include "libcommon/bundle/plan.hpp"

#include <algorithm>
#include <set>


#include "libcommon/byte_regex.hpp"
#include "libcommon/dtype.hpp"
#include "libcommon/yaml.hpp"

namespace ca::bundle {

const char* space_name(Space s) {
  switch (s) {
    case Space::input: return "inputs";
    case Space::output: return "outputs";
    case Space::param: return "params";
    default: return "scratch";
  }
}

// A buffer name: letters, digits, '_' and '.', and `{expression}` parts (no braces or brackets inside).
#define CA_BUFFER_NAME R"((?:[A-Za-z0-9_]|\{[^{}\[\]]*\})(?:[A-Za-z0-9_.]|\{[^{}\[\]]*\})*)"

std::optional<BufferRef> BufferRef::parse(const std::string& text) {
  // RE2 (linear, no recursion): the text is the policy's.
  static const re2::RE2 re(R"(\s*(inputs|outputs|params|scratch)\.()" CA_BUFFER_NAME R"()\s*)", ca::byte_regex_options());
  std::string space, key;
  if (!re2::RE2::FullMatch(text, re, &space, &key)) return std::nullopt;
  if (key.size() >= 6 && key.compare(key.size() - 6, 6, ".numel") == 0) return std::nullopt;
  BufferRef r;
  const std::string& s = space;
  r.space = s == "inputs" ? Space::input : s == "outputs" ? Space::output : s == "params" ? Space::param : Space::scratch;
  r.key = key;
  if (key.find('{') == std::string::npos) return r;
  if (r.space != Space::param)
    throw PlanError("'" + r.text() + "': only a params name may hold {expression} parts (inputs and outputs are numbered, "
                    "scratch is yours to name)");
  size_t at = 0;
  for (size_t open; (open = key.find('{', at)) != std::string::npos;) {
    const size_t close = key.find('}', open);
    r.literal.push_back(key.substr(at, open - at));
    try {
      r.parts.push_back(Expr::parse(key.substr(open + 1, close - open - 1)));
    } catch (const ExprError& e) {
      throw PlanError("'" + r.text() + "': " + e.what());
    }
    at = close + 1;
  }
  r.literal.push_back(key.substr(at));
  return r;
}

std::string Step::label() const {
  std::string what = kind == kLaunch ? "launch " + launch.kernel
                     : kind == kGemm ? "gemm " + gemm.out.text()
                                     : "conv " + conv.out.text();
  return section + " step " + (path.empty() ? std::to_string(index) : path) +
         (source_line > 0 ? " (line " + std::to_string(source_line) + ")" : "") + " '" + what + "'";
}

// ---- YAML / JSON ----

namespace {

// A plan is small: the reader's bounds (1 MiB of text, 100000 nodes, 64 levels) keep a hostile one
// from costing memory or time before it is refused as a plan_error, so the batch goes on.
const YamlLimits& plan_limits() {
  static const YamlLimits limits = [] {
    YamlLimits l;
    l.kind = "plan";
    return l;
  }();
  return limits;
}

// The line each step of a YAML plan starts on (yaml_lines' mirror), for its messages: 0 when the
// plan is a JSON object or the line is not known.
int line_at(const Json* lines, size_t i) {
  if (!lines || !lines->is_object()) return 0;
  const auto it = lines->find(std::to_string(i));
  if (it == lines->end() || !it->is_object() || !it->contains("@")) return 0;
  return (*it)["@"].get<int>();
}

const Json* child_lines(const Json* lines, size_t i, const char* key) {
  if (!lines || !lines->is_object()) return nullptr;
  const auto it = lines->find(std::to_string(i));
  if (it == lines->end() || !it->is_object() || !it->contains(key)) return nullptr;
  return &(*it)[key];
}

std::string line_text(int line) { return line > 0 ? " (line " + std::to_string(line) + ")" : ""; }

Json plan_json_from_text(const std::string& text) {
  try {
    return yaml_to_json(text, "plan", plan_limits());
  } catch (const YamlError& e) {
    throw PlanError(e.what());
  }
}

Json plan_json_from_record(const Json& plan) {
  try {
    return bounded_json(plan, "plan", plan_limits());
  } catch (const YamlError& e) {
    throw PlanError(e.what());
  }
}


std::string scalar_text(const Json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) {
    std::string s = v.dump();
    if (s.find_first_of(".eE") == std::string::npos) s += ".0";
    return s;
  }
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  throw PlanError(where + ": expected a number, a name or an expression, got " + v.dump());
}

Expr parse_expr(const Json& v, const std::string& where) {
  std::string text = scalar_text(v, where);
  try {
    return Expr::parse(text);
  } catch (const ExprError& e) {
    throw PlanError(where + ": " + e.what());
  }
}

// `scratch.h[t * H]`: a buffer and an element offset; nullopt when `text` is not of that form.
// (`inputs.0.shape[1]` is an expression, not a view.)
std::optional<std::pair<BufferRef, std::string>> parse_view_text(const std::string& text) {
  static const re2::RE2 re(R"(\s*((?:inputs|outputs|params|scratch)\.)" CA_BUFFER_NAME R"()\s*\[(.*)\]\s*)",
                           ca::byte_regex_options());
  std::string ref, offset;
  if (!re2::RE2::FullMatch(text, re, &ref, &offset)) return std::nullopt;
  if (ref.size() >= 6 && ref.compare(ref.size() - 6, 6, ".shape") == 0) return std::nullopt;
  auto r = BufferRef::parse(ref);
  if (!r) return std::nullopt;
  return std::make_pair(*r, offset);
}

// A buffer reference's own refusal (braces outside a params name) with the place it was written.
template <class F> auto placed(const std::string& where, F&& f) {
  try {
    return f();
  } catch (const PlanError& e) {
    throw PlanError(where + ": " + e.what(), e.kernel);
  }
}

BufferRef parse_buffer(const Json& v, const std::string& where, Expr* offset = nullptr) {
  std::string text = scalar_text(v, where);
  if (offset) {
    if (auto view = placed(where, [&] { return parse_view_text(text); })) {
      *offset = parse_expr(Json(view->second), where + " offset");
      return view->first;
    }
  }
  auto r = placed(where, [&] { return BufferRef::parse(text); });
  if (!r)
    throw PlanError(where + ": '" + text + "' is not a buffer (inputs.N, outputs.N, params.NAME, scratch.NAME" +
                    (offset ? ", or a view such as scratch.NAME[offset in elements])" : ")"));
  return *r;
}

// A flag (cooperative, trans_a, trans_b, transposed): true or false as YAML and JSON spell them.
// Anything else is refused: `trans_b: ture` or `cooperative: [1]` read as false would pass every
// check and compute something else.
bool truthy(const Json& v, const std::string& where) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) return v.get<int64_t>() == 1;
  if (v.is_string()) {
    static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "1"};
    static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "0"};
    const std::string s = v.get<std::string>();
    if (yes.count(s)) return true;
    if (no.count(s)) return false;
  }
  throw PlanError(where + ": expected true or false, got " + v.dump());
}

// A whole number: `outputs: 2` (not "2 outputs", whose leading digits stod would take).
double number(const Json& v, const std::string& where) {
  if (v.is_number()) return v.get<double>();
  const std::string text = scalar_text(v, where);
  try {
    size_t used = 0;
    const double d = std::stod(text, &used);
    if (used == text.size()) return d;
  } catch (const std::exception&) {
  }
  throw PlanError(where + ": expected a number, got " + v.dump());
}

// One field under one spelling: `shared` and its old names `smem` and `shared_bytes`, or a gemm's
// `activation` and `epilogue`, given together would leave one of them silently unused.
void one_spelling(const Json& o, std::initializer_list<const char*> keys, const std::string& where) {
  const char* seen = nullptr;
  for (const char* k : keys)
    if (o.contains(k) && !o[k].is_null()) {
      if (seen) throw PlanError(where + ": '" + seen + "' and '" + k + "' are one field (give it once, as '" + *keys.begin() + "')");
      seen = k;
    }
}

std::vector<Expr> parse_dim3(const Json& v, const std::string& where) {
  std::vector<Expr> out;
  if (v.is_array()) {
    if (v.empty() || v.size() > 3) throw PlanError(where + ": needs 1 to 3 values");
    for (size_t i = 0; i < v.size(); ++i) out.push_back(parse_expr(v[i], where));
  } else {
    out.push_back(parse_expr(v, where));
  }
  return out;
}

// A key that is not one of `known`: an error naming it and the nearest valid one (edit distance),
// so `activaton` is not silently ignored.
void refuse_unknown_keys(const Json& o, const std::vector<std::string>& known, const std::string& where) {
  if (!o.is_object()) return;
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  for (auto& [k, v] : o.items()) {
    if (std::find(known.begin(), known.end(), k) != known.end()) continue;
    std::string nearest;
    size_t best = SIZE_MAX;
    for (const auto& c : known)
      if (size_t d = distance(k, c); d < best) best = d, nearest = c;
    std::string all;
    for (const auto& c : known) all += (all.empty() ? "" : ", ") + c;
    throw PlanError(where + ": unknown key '" + k + "'" + (best <= 3 ? " (did you mean '" + nearest + "'?)" : "") + "; expected one of " + all);
  }
}

// A `launch` step's fields (siblings of the kernel's name).
LaunchStep parse_launch(const Json& s, std::string where) {
  LaunchStep L;
  L.kernel = scalar_text(s["launch"], where);
  where += " 'launch " + L.kernel + "'";
  if (!s.contains("grid")) throw PlanError(where + ": no grid", L.kernel);
  if (!s.contains("block")) throw PlanError(where + ": no block", L.kernel);
  L.grid = parse_dim3(s["grid"], where + " grid");
  L.block = parse_dim3(s["block"], where + " block");
  one_spelling(s, {"shared", "smem", "shared_bytes"}, where);
  for (const char* key : {"shared", "smem", "shared_bytes"})
    if (s.contains(key)) L.shared = parse_expr(s[key], where + " shared");
  if (L.shared.empty()) L.shared = Expr::constant(0);
  if (s.contains("args")) {
    if (!s["args"].is_array()) throw PlanError(where + ": args must be a list", L.kernel);
    int i = 0;
    for (auto& a : s["args"]) {
      ++i;
      Arg arg;
      arg.text = scalar_text(a, where + " argument " + std::to_string(i));
      arg.buffer = placed(where + " argument " + std::to_string(i), [&] { return BufferRef::parse(arg.text); });
      if (!arg.buffer) {
        if (auto view = placed(where + " argument " + std::to_string(i), [&] { return parse_view_text(arg.text); })) {
          arg.buffer = view->first;
          arg.offset = parse_expr(Json(view->second), where + " argument " + std::to_string(i) + " offset");
        }
      }
      if (!arg.buffer) arg.expr = parse_expr(a, where + " argument " + std::to_string(i));
      L.args.push_back(std::move(arg));
    }
  }
  if (s.contains("cooperative") && !s["cooperative"].is_null()) L.cooperative = truthy(s["cooperative"], where + " cooperative");
  if (s.contains("cluster") && !s["cluster"].is_null()) L.cluster = parse_dim3(s["cluster"], where + " cluster");
  return L;
}

// A field given and not null (gemm and conv fields may be written `bias: null`).
bool has(const Json& fields, const char* k) { return fields.contains(k) && !fields[k].is_null(); }

// A `gemm` step's fields (under the kind key or beside it).
GemmStep parse_gemm(const Json& fields, const std::string& where) {
  GemmStep G;
  for (const char* req : {"a", "b"})
    if (!has(fields, req)) throw PlanError(where + " 'gemm': needs '" + std::string(req) + "'");
  G.a = parse_buffer(fields["a"], where + " gemm a", &G.a_offset);
  G.b = parse_buffer(fields["b"], where + " gemm b", &G.b_offset);
  if (has(fields, "out")) G.out = parse_buffer(fields["out"], where + " gemm out", &G.out_offset);
  else throw PlanError(where + " 'gemm': needs 'out'");
  if (has(fields, "bias")) G.bias = parse_buffer(fields["bias"], where + " gemm bias", &G.bias_offset);
  one_spelling(fields, {"activation", "epilogue"}, where + " 'gemm'");
  for (const char* key : {"activation", "epilogue"})
    if (has(fields, key)) G.activation = scalar_text(fields[key], where);
  if (G.activation == "bias") G.activation = "none";
  if (G.activation != "none" && G.activation != "relu" && G.activation != "gelu")
    throw PlanError(where + " 'gemm': activation '" + G.activation + "' (none, relu, gelu)");
  if (has(fields, "trans_a")) G.trans_a = truthy(fields["trans_a"], where + " gemm trans_a");
  if (has(fields, "trans_b")) G.trans_b = truthy(fields["trans_b"], where + " gemm trans_b");
  if (has(fields, "m")) G.m = parse_expr(fields["m"], where + " gemm m");
  if (has(fields, "n")) G.n = parse_expr(fields["n"], where + " gemm n");
  if (has(fields, "k")) G.k = parse_expr(fields["k"], where + " gemm k");
  if (has(fields, "batch")) G.batch = parse_expr(fields["batch"], where + " gemm batch");
  const std::pair<const char*, Expr*> strided[] = {{"lda", &G.lda},           {"ldb", &G.ldb},           {"ldc", &G.ldc},
                                                   {"stride_a", &G.stride_a}, {"stride_b", &G.stride_b}, {"stride_c", &G.stride_c}};
  for (const auto& [key, dst] : strided)
    if (has(fields, key)) *dst = parse_expr(fields[key], where + " gemm " + key);
  // Expressions like every other field (`alpha: 1.0 / sqrt(D)`), evaluated when the plan is bound.
  if (has(fields, "alpha")) G.alpha = parse_expr(fields["alpha"], where + " gemm alpha");
  if (has(fields, "beta")) G.beta = parse_expr(fields["beta"], where + " gemm beta");
  if (has(fields, "compute")) G.compute = scalar_text(fields["compute"], where);
  if (G.compute != "fp32" && G.compute != "tf32")
    throw PlanError(where + " 'gemm': compute '" + G.compute + "' (fp32, tf32)");
  return G;
}

// A `conv` step's fields (under the kind key or beside it).
ConvStep parse_conv(const Json& fields, const std::string& where) {
  ConvStep C;
  for (const char* req : {"x", "w", "out"})
    if (!has(fields, req)) throw PlanError(where + " 'conv': needs '" + std::string(req) + "'");
  C.x = parse_buffer(fields["x"], where + " conv x", &C.x_offset);
  C.w = parse_buffer(fields["w"], where + " conv w", &C.w_offset);
  C.out = parse_buffer(fields["out"], where + " conv out", &C.out_offset);
  if (has(fields, "bias")) C.bias = parse_buffer(fields["bias"], where + " conv bias", &C.bias_offset);
  if (has(fields, "shape")) {
    const Json& sh = fields["shape"];
    static const std::vector<std::string> shape_keys = {"n", "c", "k", "d", "h", "w", "t", "r", "s"};
    if (!sh.is_object()) throw PlanError(where + " conv shape: expected a map of n, c, k, [d, h,] w, [t, r,] s");
    refuse_unknown_keys(sh, shape_keys, where + " conv shape");
    for (auto& [k, v] : sh.items()) C.shape[k] = parse_expr(v, where + " conv shape." + k);
  }
  // One value per spatial dimension (1 to 3, checked against the convolution's at bind), or one for all;
  // each an expression, its value checked at bind.
  auto per_dim = [&](const char* key, Expr* dst, int& given) {
    if (!has(fields, key)) return;
    const Json& v = fields[key];
    const std::string at = where + " conv " + key;
    if (v.is_array()) {
      if (v.empty() || v.size() > 3) throw PlanError(at + ": needs 1 to 3 values (one per spatial dimension)");
      given = int(v.size());
      for (size_t i = 0; i < v.size(); ++i) dst[i] = parse_expr(v[i], at);
    } else {
      dst[0] = dst[1] = dst[2] = parse_expr(v, at);
    }
  };
  per_dim("stride", C.stride, C.given[0]);
  per_dim("padding", C.padding, C.given[1]);
  per_dim("dilation", C.dilation, C.given[2]);
  per_dim("output_padding", C.output_padding, C.given[3]);
  if (has(fields, "groups")) C.groups = parse_expr(fields["groups"], where + " conv groups");
  if (has(fields, "transposed")) C.transposed = truthy(fields["transposed"], where + " conv transposed");
  for (const auto& [key, dst] : {std::pair{"x_strides", &C.x_strides}, std::pair{"out_strides", &C.out_strides}}) {
    if (!has(fields, key)) continue;
    const Json& v = fields[key];
    if (!v.is_array() || v.size() < 3 || v.size() > 5)
      throw PlanError(where + " conv " + key + ": expected a list of 3 to 5 strides in elements ([n, c, spatial...])");
    for (size_t i = 0; i < v.size(); ++i) dst->push_back(parse_expr(v[i], where + " conv " + key));
  }
  return C;
}

// `path` is the step's place in its repeats ("3.2"), as its label names it once parsed, and `line`
// the plan line it starts on (0: unknown).
Step parse_step(const Json& s, const std::string& section, int index, const std::string& path, int line) {
  Step step;
  step.section = section;
  step.index = index;
  step.source_line = line;
  std::string where = section + " step " + path + line_text(line);
  if (!s.is_object()) throw PlanError(where + ": expected a map with launch, gemm or conv");
  static const std::set<std::string> kinds = {"launch", "gemm", "conv"};
  std::string kind;
  for (auto& [k, v] : s.items())
    if (kinds.count(k)) {
      if (!kind.empty()) throw PlanError(where + ": has both '" + kind + "' and '" + k + "'");
      kind = k;
    }
  if (kind.empty()) {
    std::string seen;
    for (auto& [k, v] : s.items()) seen += (seen.empty() ? "" : ", ") + k;
    throw PlanError(where + ": unknown step kind (keys: " + seen + "); expected launch, gemm or conv");
  }
  // gemm/conv fields may be nested under the kind key or be siblings of it.
  Json fields = s;
  if (s[kind].is_object()) fields = s[kind];
  static const std::vector<std::string> launch_keys = {"launch", "grid", "block", "shared", "smem", "shared_bytes", "args",
                                                       "cooperative", "cluster"};
  // No `c`: an undocumented alias that passed every check (gemm out is `out`).
  static const std::vector<std::string> gemm_keys = {"a", "b", "out", "bias", "activation", "epilogue", "trans_a", "trans_b",
                                                     "m", "n", "k", "batch", "alpha", "beta", "compute", "lda", "ldb", "ldc",
                                                     "stride_a", "stride_b", "stride_c"};
  static const std::vector<std::string> conv_keys = {"x", "w", "out", "bias", "stride", "padding", "dilation", "groups", "shape",
                                                     "transposed", "output_padding", "x_strides", "out_strides"};
  const auto& field_keys = kind == "launch" ? launch_keys : kind == "gemm" ? gemm_keys : conv_keys;
  if (kind == "launch") {
    refuse_unknown_keys(s, launch_keys, where);
  } else {
    std::vector<std::string> with_kind = field_keys;
    with_kind.push_back(kind);
    refuse_unknown_keys(s, s[kind].is_object() ? std::vector<std::string>{kind} : with_kind, where + " '" + kind + "'");
    if (s[kind].is_object()) refuse_unknown_keys(fields, field_keys, where + " '" + kind + "'");
  }
  if (kind == "launch") {
    step.kind = Step::kLaunch;
    step.launch = parse_launch(s, where);
  } else if (kind == "gemm") {
    step.kind = Step::kGemm;
    step.gemm = parse_gemm(fields, where);
  } else {
    step.kind = Step::kConv;
    step.conv = parse_conv(fields, where);
  }
  return step;
}

constexpr int kMaxLoopDepth = 8;

bool is_identifier(const std::string& name) {
  static const re2::RE2 ident(R"([A-Za-z_][A-Za-z0-9_]*)", ca::byte_regex_options());
  return re2::RE2::FullMatch(name, ident);
}

bool reserved_name(const std::string& name) {
  return name == "inputs" || name == "outputs" || name == "params" || name == "scratch" || name == "init" || name == "cdiv" ||
         name == "min" || name == "max" || name == "sqrt" || name == "pick";
}

// A section's steps, `repeat` blocks flattened into their steps (each marked with its loops).
void parse_steps(const Json& list, const std::string& section, const std::string& prefix, std::vector<int>& open, Plan& plan,
                 std::vector<Step>& out, const Json* lines) {
  int i = 0;
  for (auto& item : list) {
    ++i;
    const std::string path = prefix + std::to_string(i);
    const int line = line_at(lines, size_t(i - 1));
    const std::string where = section + " step " + path + line_text(line);
    if (item.is_object() && item.contains("repeat")) {
      refuse_unknown_keys(item, {"repeat", "index", "steps"}, where + " 'repeat'");
      if (int(open.size()) >= kMaxLoopDepth)
        throw PlanError(where + ": repeat nested more than " + std::to_string(kMaxLoopDepth) + " deep");
      Loop loop;
      loop.count = parse_expr(item["repeat"], where + " repeat");
      loop.index = item.contains("index") ? scalar_text(item["index"], where + " index") : "i";
      loop.path = where;
      loop.parent = open.empty() ? -1 : open.back();
      if (!is_identifier(loop.index) || reserved_name(loop.index))
        throw PlanError(where + ": repeat index '" + loop.index + "' is not a free identifier");
      for (auto& [name, e] : plan.dims)
        if (name == loop.index) throw PlanError(where + ": repeat index '" + loop.index + "' is also a dim");
      for (int l : open)
        if (plan.loops[l].index == loop.index)
          throw PlanError(where + ": repeat index '" + loop.index + "' is already the index of " + plan.loops[l].path);
      if (!item.contains("steps") || !item["steps"].is_array() || item["steps"].empty())
        throw PlanError(where + ": repeat needs a non-empty list under steps:");
      plan.loops.push_back(std::move(loop));
      open.push_back(int(plan.loops.size()) - 1);
      parse_steps(item["steps"], section, path + ".", open, plan, out, child_lines(lines, size_t(i - 1), "steps"));
      open.pop_back();
      continue;
    }
    Step step = parse_step(item, section, i, path, line);
    step.loops = open;
    if (!prefix.empty()) step.path = path;
    out.push_back(std::move(step));
  }
}

}  // namespace

static Plan plan_from_json(const Json& p, const Json& lines = nullptr);

// YAML text: its steps' lines go into their labels ("forward step 3.1 (line 12) 'launch cell'").
Plan Plan::parse_text(const std::string& text) {
  const Json p = plan_json_from_text(text);
  return plan_from_json(p, yaml_lines(text, plan_limits()));
}

Plan Plan::parse(const Json& plan_in) {
  if (plan_in.is_string()) return parse_text(plan_in.get<std::string>());
  return plan_from_json(plan_json_from_record(plan_in));
}

static Plan plan_from_json(const Json& p, const Json& lines) {
  if (!p.is_object()) throw PlanError("plan: expected a map with forward (and dims, scratch, init)");
  refuse_unknown_keys(p, {"dims", "scratch", "buffers", "init", "forward", "outputs"}, "plan");

  Plan plan;
  if (p.contains("dims") && !p["dims"].is_null()) {
    const Json& d = p["dims"];
    if (d.is_object()) {
      for (auto& k : yaml_keys(d)) plan.dims.emplace_back(k, parse_expr(d[k], "dims." + k));
    } else if (d.is_array()) {
      for (auto& item : d)
        for (auto& k : yaml_keys(item)) plan.dims.emplace_back(k, parse_expr(item[k], "dims." + k));
    } else {
      throw PlanError("plan: dims must be a map of NAME: expression");
    }
    for (auto& [name, e] : plan.dims) {
      if (!is_identifier(name)) throw PlanError("plan: dim name '" + name + "' is not an identifier");
      if (reserved_name(name)) throw PlanError("plan: dim name '" + name + "' is reserved");
    }
  }
  auto add_scratch = [&](const std::string& name, const Json& decl) {
    std::string where = "scratch." + name;
    refuse_unknown_keys(decl, {"dtype", "shape"}, where);
    if (!decl.is_object() || !decl.contains("shape")) throw PlanError(where + ": needs dtype and shape");
    ScratchDecl s;
    s.name = name;
    std::string dt = decl.contains("dtype") ? scalar_text(decl["dtype"], where) : "float32";
    s.dtype = normalize_dtype(dt);
    if (s.dtype.empty()) {
      std::string known;
      for (const auto& n : dtype_names()) known += (known.empty() ? "" : ", ") + n;
      throw PlanError(where + ": unknown dtype '" + dt + "' (float32, float16, bfloat16, int32, int64, ... or their safetensors "
                      "names: " + known + ")");
    }
    // Any rank up to 8 (a 5-d activation of a 3-d conv, say); a single value is a 1-d shape.
    const Json& shape = decl["shape"];
    if (shape.is_array()) {
      if (shape.empty() || shape.size() > 8)
        throw PlanError(where + ": shape has " + std::to_string(shape.size()) + " dimensions (1 to 8)");
      for (auto& e : shape) s.shape.push_back(parse_expr(e, where + " shape"));
    } else {
      s.shape.push_back(parse_expr(shape, where + " shape"));
    }
    plan.scratch.push_back(std::move(s));
  };
  // A list (`- name: {...}`) would declare nothing: refused, not ignored.
  for (const char* key : {"scratch", "buffers"})
    if (p.contains(key) && !p[key].is_null() && !p[key].is_object())
      throw PlanError(std::string("plan: ") + key + " must be a map of NAME: {dtype, shape} (got " +
                      (p[key].is_array() ? "a list" : "a " + std::string(p[key].type_name())) + ")");
  if (p.contains("scratch") && p["scratch"].is_object())
    for (auto& k : yaml_keys(p["scratch"])) add_scratch(k, p["scratch"][k]);
  if (p.contains("buffers") && p["buffers"].is_object())
    for (auto& k : yaml_keys(p["buffers"])) {
      auto ref = BufferRef::parse(k);
      if (!ref || ref->space != Space::scratch)
        throw PlanError("plan: buffers." + k + ": only scratch.NAME buffers are declared (inputs, outputs and params come from the task)");
      add_scratch(ref->key, p["buffers"][k]);
    }
  if (p.contains("outputs") && !p["outputs"].is_null()) {
    const Json& o = p["outputs"];
    if (o.is_array()) plan.outputs_declared = static_cast<int>(o.size());
    else {
      const double n = number(o, "plan outputs");
      if (!(n >= 0 && n <= (1 << 20)) || n != static_cast<double>(static_cast<int>(n)))
        throw PlanError("plan outputs: " + o.dump() + " is not a count of outputs (a whole number, 0 or more)");
      plan.outputs_declared = static_cast<int>(n);
    }
  }
  for (const char* section : {"init", "forward"}) {
    if (!p.contains(section) || p[section].is_null()) continue;
    if (!p[section].is_array()) throw PlanError(std::string("plan: ") + section + " must be a list of steps");
    auto& steps = std::string(section) == "init" ? plan.init : plan.forward;
    std::vector<int> open;
    parse_steps(p[section], section, "", open, plan, steps, lines.is_object() && lines.contains(section) ? &lines[section] : nullptr);
  }
  if (plan.forward.empty()) throw PlanError("plan: no forward steps");
  return plan;
}

std::vector<std::string> Plan::kernel_names() const {
  std::vector<std::string> names;
  for (auto* section : {&init, &forward})
    for (auto& s : *section)
      if (s.kind == Step::kLaunch && std::find(names.begin(), names.end(), s.launch.kernel) == names.end())
        names.push_back(s.launch.kernel);
  return names;
}

}  // namespace ca::bundle
