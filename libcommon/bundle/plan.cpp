// Plan parsing (YAML or JSON), the static checks, and binding to a task's shapes.
#include "libcommon/bundle/plan.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>
#include <set>

namespace ca::bundle {

const char* space_name(Space s) {
  switch (s) {
    case Space::input: return "inputs";
    case Space::output: return "outputs";
    case Space::param: return "params";
    default: return "scratch";
  }
}

std::optional<BufferRef> BufferRef::parse(const std::string& text) {
  static const std::regex re(R"(^\s*(inputs|outputs|params|scratch)\.([A-Za-z0-9_][A-Za-z0-9_.]*)\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, re)) return std::nullopt;
  std::string key = m[2];
  if (key.size() >= 6 && key.compare(key.size() - 6, 6, ".numel") == 0) return std::nullopt;
  BufferRef r;
  std::string s = m[1];
  r.space = s == "inputs" ? Space::input : s == "outputs" ? Space::output : s == "params" ? Space::param : Space::scratch;
  r.key = key;
  return r;
}

std::string Step::label() const {
  std::string what = kind == kLaunch ? "launch " + launch.kernel
                     : kind == kGemm ? "gemm " + gemm.out.text()
                                     : "conv " + conv.out.text();
  return section + " step " + std::to_string(index) + " '" + what + "'";
}

// ---- YAML / JSON ----

// A plan is small: these bounds keep a hostile one (an alias bomb, a nesting bomb, megabytes of
// text) from costing memory or time before it is refused as a plan_error, so the batch goes on.
constexpr size_t kMaxPlanBytes = 1 << 20;   // text
constexpr int64_t kMaxPlanNodes = 100000;   // scalars, lists and maps, aliases counted at every use
constexpr int kMaxPlanDepth = 64;           // nesting of lists and maps

namespace {
struct NodeBudget {
  int64_t nodes = 0;
  void enter(int depth) {
    if (++nodes > kMaxPlanNodes)
      throw PlanError("plan: more than " + std::to_string(kMaxPlanNodes) +
                      " values (YAML aliases are counted at every use): refused (limit: plan nodes)");
    if (depth > kMaxPlanDepth)
      throw PlanError("plan: nested more than " + std::to_string(kMaxPlanDepth) + " levels deep: refused (limit: plan depth)");
  }
};

// The deepest nesting of flow brackets in the text, outside quotes: checked before YAML parses it
// (yaml-cpp's parser recurses per level).
int flow_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote) {
      if (c == '\\' && quote == '"') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      // A quote starts a scalar only at a value's start; inside a plain scalar it is a character.
      if (i == 0 || std::string(" \t\n[{,:-").find(text[i - 1]) != std::string::npos) quote = c;
    } else if (c == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1])))) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}
}  // namespace

static Json yaml_node_to_json(const YAML::Node& n, NodeBudget& budget, int depth) {
  budget.enter(depth);
  switch (n.Type()) {
    case YAML::NodeType::Null: return nullptr;
    case YAML::NodeType::Scalar: return n.Scalar();
    case YAML::NodeType::Sequence: {
      Json a = Json::array();
      for (const auto& x : n) a.push_back(yaml_node_to_json(x, budget, depth + 1));
      return a;
    }
    case YAML::NodeType::Map: {
      // JSON objects lose key order; dims keep theirs through the "__order" list below.
      Json o = Json::object();
      Json order = Json::array();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) throw PlanError("plan: a map key is not a plain name");
        std::string k = kv.first.as<std::string>();
        o[k] = yaml_node_to_json(kv.second, budget, depth + 1);
        order.push_back(k);
      }
      o["__order"] = order;
      return o;
    }
    default: return nullptr;
  }
}

namespace {

// YAML's flow collections ([a, b], {k: v}) split on every comma and treat '[' as a nested list, so
// `grid: [cdiv(N, 256)]` or `{N: inputs.0.shape[0]}` (DESIGN.md's own example) would be torn
// apart. Before YAML sees the text, every scalar inside a flow collection is quoted, with commas
// inside parentheses and index brackets (shape[0]) kept in the scalar.
class FlowQuoter {
 public:
  explicit FlowQuoter(const std::string& s) : s_(s) {}

  std::string run() {
    bool value_start = true;  // at the start of a line's content or after ": " / "- "
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == '#' && (i_ == 0 || std::isspace(static_cast<unsigned char>(s_[i_ - 1])))) {
        while (i_ < s_.size() && s_[i_] != '\n') out_ += s_[i_++];
        continue;
      }
      if (c == '"' || c == '\'') {
        copy_quoted();
        value_start = false;
        continue;
      }
      if (value_start && (c == '[' || c == '{')) {
        flow();
        value_start = false;
        continue;
      }
      out_ += c;
      ++i_;
      if (c == '\n') value_start = true;
      else if ((c == ':' || c == '-') && (i_ >= s_.size() || s_[i_] == ' ' || s_[i_] == '\n')) value_start = true;
      else if (!std::isspace(static_cast<unsigned char>(c))) value_start = false;
    }
    return out_;
  }

 private:
  void copy_quoted() {
    char q = s_[i_];
    out_ += s_[i_++];
    while (i_ < s_.size()) {
      char c = s_[i_];
      out_ += c;
      ++i_;
      if (q == '"' && c == '\\' && i_ < s_.size()) {
        out_ += s_[i_++];
        continue;
      }
      if (c == q) break;
    }
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) out_ += s_[i_++];
  }
  // One scalar inside a flow collection, up to ',' ']' '}' (or ": " in a map when `key`).
  void scalar(bool key) {
    std::string text;
    int paren = 0, index = 0;
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (paren == 0 && index == 0) {
        if (c == ',' || c == ']' || c == '}') break;
        if (key && c == ':' && (i_ + 1 >= s_.size() || std::isspace(static_cast<unsigned char>(s_[i_ + 1])))) break;
      }
      if (c == '(') ++paren;
      else if (c == ')') --paren;
      else if (c == '[') ++index;
      else if (c == ']') --index;
      text += c;
      ++i_;
    }
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    if (text == "null" || text == "~" || text.empty()) {
      out_ += text;
      return;
    }
    out_ += '"';
    for (char c : text) {
      if (c == '"' || c == '\\') out_ += '\\';
      out_ += c == '\n' ? ' ' : c;
    }
    out_ += '"';
  }
  void item(bool key) {
    skip_space();
    if (i_ >= s_.size()) return;
    char c = s_[i_];
    if (c == '[' || c == '{') flow();
    else if (c == '"' || c == '\'') copy_quoted();
    else scalar(key);
    skip_space();
  }
  void flow() {
    char open = s_[i_], close = open == '[' ? ']' : '}';
    out_ += s_[i_++];
    skip_space();
    if (i_ < s_.size() && s_[i_] == close) {
      out_ += s_[i_++];
      return;
    }
    while (i_ < s_.size()) {
      item(open == '{');
      if (open == '{' && i_ < s_.size() && s_[i_] == ':') {
        out_ += s_[i_++];
        item(false);
      }
      if (i_ >= s_.size()) return;  // unterminated: YAML will say so
      char c = s_[i_];
      out_ += c;
      ++i_;
      if (c == close) return;
      if (c != ',') return;  // malformed: let YAML report it
    }
  }

  const std::string& s_;
  size_t i_ = 0;
  std::string out_;
};

}  // namespace

// A JSON plan object in the same shape YAML gives: key order kept in "__order".
static Json ordered_to_json(const Record& r, NodeBudget& budget, int depth) {
  budget.enter(depth);
  if (r.is_object()) {
    Json o = Json::object(), order = Json::array();
    for (auto& [k, v] : r.items()) {
      o[k] = ordered_to_json(v, budget, depth + 1);
      order.push_back(k);
    }
    o["__order"] = order;
    return o;
  }
  if (r.is_array()) {
    Json a = Json::array();
    for (auto& v : r) a.push_back(ordered_to_json(v, budget, depth + 1));
    return a;
  }
  return Json::parse(r.dump());
}

Json yaml_to_json(const std::string& text) {
  if (text.size() > kMaxPlanBytes)
    throw PlanError("plan: " + std::to_string(text.size()) + " bytes of text, over the " + std::to_string(kMaxPlanBytes) +
                    " a plan may have (limit: plan size)");
  if (flow_depth(text) > kMaxPlanDepth)
    throw PlanError("plan: nested more than " + std::to_string(kMaxPlanDepth) + " levels deep: refused (limit: plan depth)");
  try {
    NodeBudget budget;
    return yaml_node_to_json(YAML::Load(FlowQuoter(text).run()), budget, 0);
  } catch (const YAML::Exception& e) {
    throw PlanError("plan: not valid YAML: " + std::string(e.what()));
  }
}

std::string normalize_dtype(const std::string& name) {
  std::string s = name;
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::map<std::string, std::string> m = {
      {"float32", "F32"}, {"f32", "F32"}, {"float", "F32"}, {"fp32", "F32"},
      {"float64", "F64"}, {"f64", "F64"}, {"double", "F64"}, {"fp64", "F64"},
      {"float16", "F16"}, {"f16", "F16"}, {"half", "F16"}, {"fp16", "F16"},
      {"bfloat16", "BF16"}, {"bf16", "BF16"},
      {"int64", "I64"}, {"i64", "I64"}, {"long", "I64"},
      {"int32", "I32"}, {"i32", "I32"}, {"int", "I32"},
      {"int16", "I16"}, {"i16", "I16"}, {"int8", "I8"}, {"i8", "I8"},
      {"uint8", "U8"}, {"u8", "U8"}, {"bool", "BOOL"},
      {"float8_e4m3fn", "F8_E4M3"}, {"f8_e4m3", "F8_E4M3"}, {"float8_e5m2", "F8_E5M2"}, {"f8_e5m2", "F8_E5M2"}};
  auto it = m.find(s);
  return it == m.end() ? "" : it->second;
}

namespace {

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

std::vector<std::string> keys_in_order(const Json& o) {
  std::vector<std::string> keys;
  if (o.contains("__order"))
    for (auto& k : o["__order"]) keys.push_back(k.get<std::string>());
  else
    for (auto& [k, v] : o.items()) keys.push_back(k);
  return keys;
}

BufferRef parse_buffer(const Json& v, const std::string& where) {
  std::string text = scalar_text(v, where);
  auto r = BufferRef::parse(text);
  if (!r) throw PlanError(where + ": '" + text + "' is not a buffer (inputs.N, outputs.N, params.NAME, scratch.NAME)");
  return *r;
}

bool truthy(const Json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    return s == "true" || s == "True" || s == "yes" || s == "1";
  }
  return false;
}

double number(const Json& v, const std::string& where) {
  if (v.is_number()) return v.get<double>();
  try {
    return std::stod(scalar_text(v, where));
  } catch (const std::exception&) {
    throw PlanError(where + ": expected a number, got " + v.dump());
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
    if (k == "__order" || std::find(known.begin(), known.end(), k) != known.end()) continue;
    std::string nearest;
    size_t best = SIZE_MAX;
    for (const auto& c : known)
      if (size_t d = distance(k, c); d < best) best = d, nearest = c;
    std::string all;
    for (const auto& c : known) all += (all.empty() ? "" : ", ") + c;
    throw PlanError(where + ": unknown key '" + k + "'" + (best <= 3 ? " (did you mean '" + nearest + "'?)" : "") + "; expected one of " + all);
  }
}

Step parse_step(const Json& s, const std::string& section, int index) {
  Step step;
  step.section = section;
  step.index = index;
  std::string where = section + " step " + std::to_string(index);
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
    for (auto& [k, v] : s.items())
      if (k != "__order") seen += (seen.empty() ? "" : ", ") + k;
    throw PlanError(where + ": unknown step kind (keys: " + seen + "); expected launch, gemm or conv");
  }
  // gemm/conv fields may be nested under the kind key or be siblings of it.
  Json fields = s;
  if (s[kind].is_object()) fields = s[kind];
  static const std::vector<std::string> launch_keys = {"launch", "grid", "block", "shared", "smem", "shared_bytes", "args"};
  static const std::vector<std::string> gemm_keys = {"a", "b", "out", "c", "bias", "activation", "epilogue", "trans_a", "trans_b",
                                                     "m", "n", "k", "batch", "alpha", "beta", "compute"};
  static const std::vector<std::string> conv_keys = {"x", "w", "out", "bias", "stride", "padding", "dilation", "groups"};
  const auto& field_keys = kind == "launch" ? launch_keys : kind == "gemm" ? gemm_keys : conv_keys;
  if (kind == "launch") {
    refuse_unknown_keys(s, launch_keys, where);
  } else {
    std::vector<std::string> with_kind = field_keys;
    with_kind.push_back(kind);
    refuse_unknown_keys(s, s[kind].is_object() ? std::vector<std::string>{kind} : with_kind, where + " '" + kind + "'");
    if (s[kind].is_object()) refuse_unknown_keys(fields, field_keys, where + " '" + kind + "'");
  }
  auto has = [&](const char* k) { return fields.contains(k) && !fields[k].is_null(); };
  if (kind == "launch") {
    step.kind = Step::kLaunch;
    auto& L = step.launch;
    L.kernel = scalar_text(s["launch"], where);
    where += " 'launch " + L.kernel + "'";
    if (!s.contains("grid")) throw PlanError(where + ": no grid", L.kernel);
    if (!s.contains("block")) throw PlanError(where + ": no block", L.kernel);
    L.grid = parse_dim3(s["grid"], where + " grid");
    L.block = parse_dim3(s["block"], where + " block");
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
        arg.buffer = BufferRef::parse(arg.text);
        if (!arg.buffer) arg.expr = parse_expr(a, where + " argument " + std::to_string(i));
        L.args.push_back(std::move(arg));
      }
    }
  } else if (kind == "gemm") {
    step.kind = Step::kGemm;
    auto& G = step.gemm;
    for (const char* req : {"a", "b"})
      if (!has(req)) throw PlanError(where + " 'gemm': needs '" + std::string(req) + "'");
    G.a = parse_buffer(fields["a"], where + " gemm a");
    G.b = parse_buffer(fields["b"], where + " gemm b");
    if (has("out")) G.out = parse_buffer(fields["out"], where + " gemm out");
    else if (has("c")) G.out = parse_buffer(fields["c"], where + " gemm c");
    else throw PlanError(where + " 'gemm': needs 'out'");
    if (has("bias")) G.bias = parse_buffer(fields["bias"], where + " gemm bias");
    for (const char* key : {"activation", "epilogue"})
      if (has(key)) G.activation = scalar_text(fields[key], where);
    if (G.activation == "bias") G.activation = "none";
    if (G.activation != "none" && G.activation != "relu" && G.activation != "gelu")
      throw PlanError(where + " 'gemm': activation '" + G.activation + "' (none, relu, gelu)");
    if (has("trans_a")) G.trans_a = truthy(fields["trans_a"]);
    if (has("trans_b")) G.trans_b = truthy(fields["trans_b"]);
    if (has("m")) G.m = parse_expr(fields["m"], where + " gemm m");
    if (has("n")) G.n = parse_expr(fields["n"], where + " gemm n");
    if (has("k")) G.k = parse_expr(fields["k"], where + " gemm k");
    if (has("batch")) G.batch = parse_expr(fields["batch"], where + " gemm batch");
    if (has("alpha")) G.alpha = number(fields["alpha"], where + " gemm alpha");
    if (has("beta")) G.beta = number(fields["beta"], where + " gemm beta");
    if (has("compute")) G.compute = scalar_text(fields["compute"], where);
    if (G.compute != "fp32" && G.compute != "tf32")
      throw PlanError(where + " 'gemm': compute '" + G.compute + "' (fp32, tf32)");
  } else {
    step.kind = Step::kConv;
    auto& C = step.conv;
    for (const char* req : {"x", "w", "out"})
      if (!has(req)) throw PlanError(where + " 'conv': needs '" + std::string(req) + "'");
    C.x = parse_buffer(fields["x"], where + " conv x");
    C.w = parse_buffer(fields["w"], where + " conv w");
    C.out = parse_buffer(fields["out"], where + " conv out");
    if (has("bias")) C.bias = parse_buffer(fields["bias"], where + " conv bias");
    auto pair = [&](const char* key, int64_t* dst) {
      if (!has(key)) return;
      const Json& v = fields[key];
      if (v.is_array()) {
        if (v.size() != 2) throw PlanError(where + " conv " + key + ": needs 2 values");
        dst[0] = static_cast<int64_t>(number(v[0], where));
        dst[1] = static_cast<int64_t>(number(v[1], where));
      } else {
        dst[0] = dst[1] = static_cast<int64_t>(number(v, where));
      }
    };
    pair("stride", C.stride);
    pair("padding", C.padding);
    pair("dilation", C.dilation);
    if (has("groups")) C.groups = static_cast<int64_t>(number(fields["groups"], where));
  }
  return step;
}

}  // namespace

static Plan plan_from_json(const Json& p);

Plan Plan::parse_text(const std::string& text) { return plan_from_json(yaml_to_json(text)); }

Plan Plan::parse(const Record& plan_in) {
  if (plan_in.is_string()) return plan_from_json(yaml_to_json(plan_in.get<std::string>()));
  NodeBudget budget;
  return plan_from_json(ordered_to_json(plan_in, budget, 0));
}

static Plan plan_from_json(const Json& p) {
  if (!p.is_object()) throw PlanError("plan: expected a map with forward (and dims, scratch, init)");
  refuse_unknown_keys(p, {"dims", "scratch", "buffers", "init", "forward", "outputs"}, "plan");

  Plan plan;
  if (p.contains("dims") && !p["dims"].is_null()) {
    const Json& d = p["dims"];
    if (d.is_object()) {
      for (auto& k : keys_in_order(d)) plan.dims.emplace_back(k, parse_expr(d[k], "dims." + k));
    } else if (d.is_array()) {
      for (auto& item : d)
        for (auto& k : keys_in_order(item)) plan.dims.emplace_back(k, parse_expr(item[k], "dims." + k));
    } else {
      throw PlanError("plan: dims must be a map of NAME: expression");
    }
    static const std::regex ident(R"(^[A-Za-z_][A-Za-z0-9_]*$)");
    for (auto& [name, e] : plan.dims) {
      if (!std::regex_match(name, ident)) throw PlanError("plan: dim name '" + name + "' is not an identifier");
      if (name == "inputs" || name == "outputs" || name == "params" || name == "scratch" || name == "init" ||
          name == "cdiv" || name == "min" || name == "max")
        throw PlanError("plan: dim name '" + name + "' is reserved");
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
    if (s.dtype.empty()) throw PlanError(where + ": unknown dtype '" + dt + "'");
    s.shape = parse_dim3(decl["shape"].is_array() && decl["shape"].size() > 3 ? Json::array() : decl["shape"], where);
    if (decl["shape"].is_array() && decl["shape"].size() > 3) {
      s.shape.clear();
      for (auto& e : decl["shape"]) s.shape.push_back(parse_expr(e, where + " shape"));
    }
    plan.scratch.push_back(std::move(s));
  };
  if (p.contains("scratch") && p["scratch"].is_object())
    for (auto& k : keys_in_order(p["scratch"])) add_scratch(k, p["scratch"][k]);
  if (p.contains("buffers") && p["buffers"].is_object())
    for (auto& k : keys_in_order(p["buffers"])) {
      auto ref = BufferRef::parse(k);
      if (!ref || ref->space != Space::scratch)
        throw PlanError("plan: buffers." + k + ": only scratch.NAME buffers are declared (inputs, outputs and params come from the task)");
      add_scratch(ref->key, p["buffers"][k]);
    }
  if (p.contains("outputs") && !p["outputs"].is_null()) {
    const Json& o = p["outputs"];
    if (o.is_array()) plan.outputs_declared = static_cast<int>(o.size());
    else plan.outputs_declared = static_cast<int>(number(o, "plan outputs"));
  }
  for (const char* section : {"init", "forward"}) {
    if (!p.contains(section) || p[section].is_null()) continue;
    if (!p[section].is_array()) throw PlanError(std::string("plan: ") + section + " must be a list of steps");
    auto& steps = std::string(section) == "init" ? plan.init : plan.forward;
    int i = 0;
    for (auto& s : p[section]) steps.push_back(parse_step(s, section, ++i));
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

// ---- IoSpec ----

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t TensorSpec::bytes() const {
  static const std::map<std::string, int> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                   {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
                                                   {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"U32", 4}, {"U16", 2}, {"U64", 8}};
  auto it = sizes.find(dtype);
  return numel() * (it == sizes.end() ? 4 : it->second);
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
  return t;
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
    for (auto& t : v) a.push_back(Json{{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}});
    return a;
  };
  return Json{{"inputs", list(inputs)}, {"outputs", list(outputs)}, {"params", list(params)}, {"init_inputs", init_values}};
}

int64_t IoSpec::io_bytes() const {
  int64_t n = 0;
  for (auto* v : {&inputs, &outputs})
    for (auto& t : *v) n += t.bytes();
  return n;
}

// ---- checks and binding ----

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
    static const std::regex shape_re(R"(^(inputs|outputs|params)\.([A-Za-z0-9_.]+?)\.(shape\[(-?\d+)\]|numel|ndim)$)");
    static const std::regex init_re(R"(^init\.(\d+)$)");
    std::smatch m;
    if (std::regex_match(ref, m, shape_re)) {
      auto buf = BufferRef::parse(std::string(m[1]) + "." + std::string(m[2]));
      if (!buf) return std::nullopt;
      const TensorSpec* t = io ? io->find(*buf) : nullptr;
      if (!t || !t->known) {
        if (typed_only && (!io || !io->shapes_known())) return Value::integer(7);
        return std::nullopt;
      }
      std::string what = m[3];
      if (what == "numel") return Value::integer(t->numel());
      if (what == "ndim") return Value::integer(static_cast<int64_t>(t->shape.size()));
      int64_t i = std::stoll(m[4]);
      int64_t nd = static_cast<int64_t>(t->shape.size());
      if (i < 0) i += nd;
      if (i < 0 || i >= nd)
        throw ExprError("'" + ref + "': " + buf->text() + " has " + std::to_string(nd) + " dimensions");
      return Value::integer(t->shape[i]);
    }
    if (std::regex_match(ref, m, init_re)) {
      size_t i = std::stoul(m[1]);
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

// Does the buffer exist (as far as we can tell)? Returns its dtype when known.
std::optional<std::string> buffer_dtype(const BufferRef& ref, const Plan& plan, const IoSpec* io, const std::string& where,
                                        const std::string& kernel) {
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

// The device's launch limits (every arch from sm_70 on): block dims 1024 x 1024 x 64 and 1024 threads
// in all, grid dims 2^31-1 x 65535 x 65535, dynamic shared memory up to 227 KiB (sm_90's opt-in).
constexpr int64_t kMaxBlock[3] = {1024, 1024, 64}, kMaxGrid[3] = {2147483647LL, 65535, 65535};
constexpr int64_t kMaxThreadsPerBlock = 1024, kMaxDynamicShared = 232448;

// The sizes a plan spells as constants or from known dims are checked before any shape is known
// (compile-only); the rest when the plan is bound to the task.
void check_launch_sizes(const Step& step, const Plan& plan, const IoSpec* io) {
  const LaunchStep& L = step.launch;
  const std::string where = step.label();
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
  int64_t threads = 1;
  bool all_known = true;
  for (size_t d = 0; d < L.block.size(); ++d) {
    auto b = value(L.block[d]);
    if (!b) {
      all_known = false;
      continue;
    }
    if (*b < 1 || *b > kMaxBlock[d])
      throw PlanError(where + ": block[" + std::to_string(d) + "] = " + std::to_string(*b) + " (the device allows 1 to " +
                          std::to_string(kMaxBlock[d]) + ")",
                      L.kernel);
    threads *= *b;
  }
  if (all_known && threads > kMaxThreadsPerBlock)
    throw PlanError(where + ": block has " + std::to_string(threads) + " threads (the device allows at most " +
                        std::to_string(kMaxThreadsPerBlock) + " per block)",
                    L.kernel);
  for (size_t d = 0; d < L.grid.size(); ++d)
    if (auto g = value(L.grid[d]); g && (*g < 1 || *g > kMaxGrid[d]))
      throw PlanError(where + ": grid[" + std::to_string(d) + "] = " + std::to_string(*g) + " (the device allows 1 to " +
                          std::to_string(kMaxGrid[d]) + ")",
                      L.kernel);
  if (auto sh = value(L.shared); sh && (*sh < 0 || *sh > kMaxDynamicShared))
    throw PlanError(where + ": shared = " + std::to_string(*sh) + " bytes (the device allows at most " +
                        std::to_string(kMaxDynamicShared) + " bytes of dynamic shared memory per block)",
                    L.kernel);
}

void check_launch(const Step& step, const Plan& plan, const Signatures& sigs, const IoSpec* io, Resolver& typed,
                  std::set<std::string>& written) {
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
  eval_in(L.shared, typed, where + " shared", plan, L.kernel);
  check_launch_sizes(step, plan, io);
  for (size_t i = 0; i < L.args.size(); ++i) {
    const Arg& a = L.args[i];
    const ParamType& p = sig.params[i];
    std::string at = where + ": " + ordinal_arg(i);
    if (a.buffer) {
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
        throw PlanError(at + " is '" + a.text + "' (a " + (v.is_float ? "float" : "int") + "), kernel expects " + p.text +
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

void check_plan(const Plan& plan, const Signatures& sigs, const IoSpec* io) {
  Resolver typed{plan, io};
  typed.typed_only = true;
  eval_dims(plan, typed);
  for (auto& s : plan.scratch)
    for (auto& e : s.shape) {
      Value v = eval_in(e, typed, "scratch." + s.name + " shape", plan);
      if (v.is_float) throw PlanError("scratch." + s.name + ": shape '" + e.text() + "' is not an integer");
    }
  std::set<std::string> written;
  for (auto* section : {&plan.init, &plan.forward})
    for (auto& step : *section) {
      if (step.kind == Step::kLaunch) {
        check_launch(step, plan, sigs, io, typed, written);
      } else if (step.kind == Step::kGemm) {
        std::vector<BufferRef> reads = {step.gemm.a, step.gemm.b};
        if (step.gemm.bias) reads.push_back(*step.gemm.bias);
        for (auto* e : {&step.gemm.m, &step.gemm.n, &step.gemm.k, &step.gemm.batch})
          if (!e->empty()) eval_in(*e, typed, step.label(), plan);
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

int BoundPlan::buffer_index(const std::string& ref) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].ref == ref) return static_cast<int>(i);
  return -1;
}

int64_t BoundPlan::scratch_bytes() const {
  int64_t n = 0;
  for (auto& b : buffers)
    if (b.space == Space::scratch) n += b.bytes;
  return n;
}

namespace {

int64_t dtype_bytes(const std::string& dtype) {
  TensorSpec t;
  t.dtype = dtype;
  return t.bytes();
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

}  // namespace

BoundPlan bind_plan(const Plan& plan, const Signatures& sigs, const IoSpec& io) {
  check_plan(plan, sigs, &io);
  if (!io.shapes_known()) throw PlanError("plan: the task's tensor shapes are unknown, cannot bind");
  BoundPlan bp;
  Resolver r{plan, &io};
  eval_dims(plan, r);
  for (auto& [name, v] : r.dims) bp.dims[name] = v.is_float ? static_cast<int64_t>(v.f) : v.i;
  auto add = [&](Space space, int index, const TensorSpec& t, const std::string& key) {
    BoundBuffer b;
    b.space = space;
    b.index = index;
    b.ref = std::string(space_name(space)) + "." + key;
    b.dtype = t.dtype;
    b.shape = t.shape;
    b.bytes = t.bytes();
    bp.buffers.push_back(b);
  };
  for (size_t i = 0; i < io.inputs.size(); ++i) add(Space::input, i, io.inputs[i], std::to_string(i));
  for (size_t i = 0; i < io.outputs.size(); ++i) add(Space::output, i, io.outputs[i], std::to_string(i));
  for (size_t i = 0; i < io.params.size(); ++i) add(Space::param, i, io.params[i], io.params[i].name);
  for (size_t i = 0; i < plan.scratch.size(); ++i) {
    const auto& s = plan.scratch[i];
    TensorSpec t;
    t.dtype = s.dtype;
    for (auto& e : s.shape) {
      Value v = eval_in(e, r, "scratch." + s.name + " shape", plan);
      if (v.i < 0) throw PlanError("scratch." + s.name + ": negative size " + v.text());
      t.shape.push_back(v.i);
    }
    add(Space::scratch, static_cast<int>(i), t, s.name);
  }
  auto index_of = [&](const BufferRef& ref) {
    int idx = -1;
    if (ref.space == Space::scratch) return bp.buffer_index(ref.text());
    io.find(ref, &idx);
    std::string key = ref.space == Space::param ? io.params[idx].name : std::to_string(idx);
    return bp.buffer_index(std::string(space_name(ref.space)) + "." + key);
  };
  for (auto* section : {&plan.init, &plan.forward}) {
    auto& out = section == &plan.init ? bp.init : bp.forward;
    for (auto& step : *section) {
      BoundStep bs;
      bs.kind = step.kind;
      bs.label = step.label();
      if (step.kind == Step::kLaunch) {
        const LaunchStep& L = step.launch;
        const KernelSignature& sig = sigs.at(L.kernel);
        bs.launch.kernel = L.kernel;
        bs.launch.mangled = sig.mangled;
        for (int d = 0; d < 3; ++d) {
          if (d < static_cast<int>(L.grid.size())) {
            int64_t g = eval_in(L.grid[d], r, bs.label + " grid", plan, L.kernel).i;
            if (g < 1 || g > kMaxGrid[d])
              throw PlanError(bs.label + ": grid[" + std::to_string(d) + "] = " + std::to_string(g) + " is out of range", L.kernel);
            bs.launch.grid[d] = static_cast<unsigned>(g);
          }
          if (d < static_cast<int>(L.block.size())) {
            int64_t b = eval_in(L.block[d], r, bs.label + " block", plan, L.kernel).i;
            if (b < 1 || b > kMaxBlock[d])
              throw PlanError(bs.label + ": block[" + std::to_string(d) + "] = " + std::to_string(b) + " is out of range", L.kernel);
            bs.launch.block[d] = static_cast<unsigned>(b);
          }
        }
        if (int64_t t = int64_t(bs.launch.block[0]) * bs.launch.block[1] * bs.launch.block[2]; t > kMaxThreadsPerBlock)
          throw PlanError(bs.label + ": block has " + std::to_string(t) + " threads (at most 1024)", L.kernel);
        int64_t sh = eval_in(L.shared, r, bs.label + " shared", plan, L.kernel).i;
        if (sh < 0 || sh > kMaxDynamicShared) throw PlanError(bs.label + ": shared = " + std::to_string(sh) + " bytes is out of range", L.kernel);
        bs.launch.shared = static_cast<unsigned>(sh);
        for (size_t i = 0; i < L.args.size(); ++i) {
          BoundArg a;
          a.text = L.args[i].text;
          if (L.args[i].buffer) a.buffer = index_of(*L.args[i].buffer);
          else a.scalar = pack_scalar(eval_in(L.args[i].expr, r, bs.label, plan, L.kernel), sig.params[i]);
          bs.launch.args.push_back(std::move(a));
        }
      } else if (step.kind == Step::kGemm) {
        const GemmStep& G = step.gemm;
        BoundGemm& g = bs.gemm;
        g.a = index_of(G.a);
        g.b = index_of(G.b);
        g.out = index_of(G.out);
        if (G.bias) g.bias = index_of(*G.bias);
        const auto &A = bp.buffers[g.a], &B = bp.buffers[g.b], &O = bp.buffers[g.out];
        if (A.dtype != B.dtype || A.dtype != O.dtype)
          throw PlanError(bs.label + ": a, b and out must have one dtype (" + A.dtype + ", " + B.dtype + ", " + O.dtype + ")");
        if (A.dtype != "F32" && A.dtype != "F16" && A.dtype != "BF16")
          throw PlanError(bs.label + ": gemm supports F32, F16, BF16 buffers, not " + A.dtype);
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
        int64_t esz = dtype_bytes(g.dtype);
        if (g.batch * g.m * g.k * esz > A.bytes || g.batch * g.k * g.n * esz > B.bytes ||
            g.batch * g.m * g.n * esz > O.bytes)
          throw PlanError(bs.label + ": m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                          " batch=" + std::to_string(g.batch) + " does not fit the buffers");
        if (g.bias >= 0 && bp.buffers[g.bias].bytes < g.n * dtype_bytes(bp.buffers[g.bias].dtype))
          throw PlanError(bs.label + ": bias has fewer than n=" + std::to_string(g.n) + " elements");
        g.trans_a = G.trans_a;
        g.trans_b = G.trans_b;
        g.activation = G.activation;
        g.compute = G.compute;
        g.alpha = G.alpha;
        g.beta = G.beta;
      } else {
        const ConvStep& C = step.conv;
        BoundConv& c = bs.conv;
        c.x = index_of(C.x);
        c.w = index_of(C.w);
        c.out = index_of(C.out);
        if (C.bias) c.bias = index_of(*C.bias);
        const auto &X = bp.buffers[c.x], &W = bp.buffers[c.w], &O = bp.buffers[c.out];
        if (X.shape.size() != 4 || W.shape.size() != 4 || O.shape.size() != 4)
          throw PlanError(bs.label + ": conv needs 4-d NCHW x, KCRS w and NKPQ out");
        c.n = X.shape[0]; c.c = X.shape[1]; c.h = X.shape[2]; c.wd = X.shape[3];
        c.k = W.shape[0]; c.r = W.shape[2]; c.s = W.shape[3];
        std::copy(C.stride, C.stride + 2, c.stride);
        std::copy(C.padding, C.padding + 2, c.padding);
        std::copy(C.dilation, C.dilation + 2, c.dilation);
        c.groups = C.groups;
        c.p = (c.h + 2 * c.padding[0] - c.dilation[0] * (c.r - 1) - 1) / c.stride[0] + 1;
        c.q = (c.wd + 2 * c.padding[1] - c.dilation[1] * (c.s - 1) - 1) / c.stride[1] + 1;
        if (W.shape[1] * c.groups != c.c) throw PlanError(bs.label + ": w has " + std::to_string(W.shape[1]) + " input channels per group, x has " + std::to_string(c.c));
        if (O.shape != std::vector<int64_t>{c.n, c.k, c.p, c.q})
          throw PlanError(bs.label + ": out must be [" + std::to_string(c.n) + ", " + std::to_string(c.k) + ", " +
                          std::to_string(c.p) + ", " + std::to_string(c.q) + "]");
        if (X.dtype != W.dtype || X.dtype != O.dtype) throw PlanError(bs.label + ": x, w and out must have one dtype");
        c.dtype = X.dtype;
      }
      out.push_back(std::move(bs));
    }
  }
  return bp;
}

}  // namespace ca::bundle
