// Loading and checking the op catalog YAML (yaml-cpp).
#include "tools/ops-synth/catalog.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"

namespace ca::ops_synth {

namespace fs = std::filesystem;

std::string default_catalog_path() { return ca::data_dir() + "/ops/catalog.yaml"; }

Template Template::parse(const std::string& text) {
  Template t;
  t.source = text;
  std::string lit;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '{' && i + 1 < text.size() && text[i + 1] == '{') {
      lit += '{';
      ++i;
    } else if (c == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      lit += '}';
      ++i;
    } else if (c == '{') {
      auto close = text.find('}', i);
      if (close == std::string::npos) throw std::runtime_error("unclosed '{' in template '" + text + "'");
      std::string inner = text.substr(i + 1, close - i - 1);
      if (!lit.empty()) t.pieces.push_back({true, lit, "", ""});
      lit.clear();
      Piece p;
      p.literal = false;
      if (auto bar = inner.find('|'); bar != std::string::npos) {
        p.filter = inner.substr(bar + 1);
        inner = inner.substr(0, bar);
        if (p.filter != "bool") throw std::runtime_error("unknown filter '" + p.filter + "' in '" + text + "'");
      }
      if (auto colon = inner.find(':'); colon != std::string::npos) {
        p.param = inner.substr(colon + 1);
        inner = inner.substr(0, colon);
      }
      p.text = inner;
      t.pieces.push_back(std::move(p));
      i = close;
    } else {
      lit += c;
    }
  }
  if (!lit.empty()) t.pieces.push_back({true, lit, "", ""});
  return t;
}

namespace {

struct Ctx {
  std::string where;
  [[noreturn]] void fail(const std::string& why) const { throw ca::InputError(where + ": " + why); }
};

Expr parse_expr(const YAML::Node& node, const Ctx& ctx, const std::string& field) {
  try {
    return Expr::parse(node.as<std::string>());
  } catch (const std::exception& e) {
    ctx.fail(field + ": " + e.what());
  }
}

std::vector<Expr> parse_expr_list(const YAML::Node& node, const Ctx& ctx, const std::string& field) {
  std::vector<Expr> out;
  if (!node.IsSequence()) ctx.fail(field + ": expected a list");
  for (const auto& n : node) out.push_back(parse_expr(n, ctx, field));
  return out;
}

Template parse_template(const YAML::Node& node, const Ctx& ctx, const std::string& field) {
  try {
    return Template::parse(node.as<std::string>());
  } catch (const std::exception& e) {
    ctx.fail(field + ": " + e.what());
  }
}

bool is_int_scalar(const YAML::Node& n) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  if (s.empty()) return false;
  std::size_t i = (s[0] == '-') ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return n.Tag() != "!";  // a quoted scalar stays text
}

ArgSpec parse_arg(const std::string& name, const YAML::Node& node, const Ctx& ctx) {
  ArgSpec a;
  a.name = name;
  a.sym = intern_symbol(name);
  Ctx c{ctx.where + ": args." + name};
  if (node.IsSequence()) {
    a.kind = ArgSpec::kChoice;
    bool all_int = true;
    for (const auto& v : node) all_int = all_int && is_int_scalar(v);
    for (const auto& v : node) {
      if (all_int) a.int_choices.push_back(v.as<int64_t>());
      else a.text_choices.push_back(v.as<std::string>());
    }
    if (a.int_choices.empty() && a.text_choices.empty()) c.fail("empty choice list");
    return a;
  }
  if (is_int_scalar(node)) {
    a.kind = ArgSpec::kChoice;
    a.int_choices.push_back(node.as<int64_t>());
    return a;
  }
  if (!node.IsMap()) c.fail("expected a list of choices or a map (range, expr, size, divisor_of)");
  if (node["range"]) {
    a.kind = ArgSpec::kRange;
    auto r = node["range"];
    if (!r.IsSequence() || r.size() != 2) c.fail("range: expected [lo, hi]");
    a.lo = parse_expr(r[0], c, "range");
    a.hi = parse_expr(r[1], c, "range");
  } else if (node["expr"]) {
    a.kind = ArgSpec::kExpr;
    a.expr = parse_expr(node["expr"], c, "expr");
  } else if (node["size"]) {
    a.kind = ArgSpec::kSize;
    a.size_key = node["size"].as<std::string>();
  } else if (node["divisor_of"]) {
    a.kind = ArgSpec::kDivisorOf;
    a.expr = parse_expr(node["divisor_of"], c, "divisor_of");
    a.min = node["min"] ? parse_expr(node["min"], c, "min") : Expr::parse("1");
    a.max = node["max"] ? parse_expr(node["max"], c, "max") : Expr::parse("1000000000");
  } else {
    c.fail("expected one of range, expr, size, divisor_of");
  }
  return a;
}

OutRule parse_out(const YAML::Node& node, const Ctx& ctx) {
  OutRule o;
  Ctx c{ctx.where + ": out"};
  if (!node || (node.IsScalar() && node.Scalar() == "same")) return o;
  if (node.IsScalar() && node.Scalar() == "scalar") {
    o.kind = OutRule::kScalar;
    return o;
  }
  if (node.IsSequence()) {
    o.kind = OutRule::kList;
    o.dims = parse_expr_list(node, c, "out");
    return o;
  }
  if (!node.IsMap()) c.fail("expected same, scalar, a list, or a map");
  if (node["reduce"]) {
    o.kind = OutRule::kReduce;
    o.dim = parse_expr(node["reduce"], c, "reduce");
    if (node["keepdim"]) o.keepdim = parse_expr(node["keepdim"], c, "keepdim");
  } else if (node["swap"]) {
    o.kind = OutRule::kSwap;
    if (node["swap"].size() != 2) c.fail("swap: expected [a, b]");
    o.a = parse_expr(node["swap"][0], c, "swap");
    o.b = parse_expr(node["swap"][1], c, "swap");
  } else if (node["last"]) {
    o.kind = OutRule::kLast;
    o.last = parse_expr(node["last"], c, "last");
  } else if (node["channels"] || node["spatial"]) {
    o.kind = OutRule::kChannelsSpatial;
    if (node["channels"]) o.channels = parse_expr(node["channels"], c, "channels");
    if (node["spatial"]) o.spatial = parse_expr(node["spatial"], c, "spatial");
  } else {
    c.fail("unknown rule (reduce, swap, last, channels/spatial)");
  }
  return o;
}

std::string lower_attr(const std::string& name) {
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char ch = name[i];
    bool upper = std::isupper(static_cast<unsigned char>(ch));
    if (upper && i > 0 && !std::isupper(static_cast<unsigned char>(name[i - 1])) && name[i - 1] != '_') out += '_';
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  return out;
}

OpSpec parse_op(const YAML::Node& node, std::size_t index) {
  OpSpec op;
  Ctx ctx{"ops[" + std::to_string(index) + "]"};
  if (!node["name"]) ctx.fail("name missing");
  op.name = node["name"].as<std::string>();
  ctx.where = "op " + op.name;
  for (const char* f : {"family", "api", "forward", "flops", "bytes", "rank"})
    if (!node[f]) ctx.fail(std::string(f) + " missing");
  op.family = node["family"].as<std::string>();
  op.api = node["api"].as<std::string>();
  auto rank = node["rank"];
  if (rank.IsSequence())
    for (const auto& r : rank) op.ranks.push_back(r.as<int>());
  else
    op.ranks.push_back(rank.as<int>());
  if (node["requires"]) op.requires_ = parse_expr_list(node["requires"], ctx, "requires");
  if (node["args"]) {
    if (!node["args"].IsMap()) ctx.fail("args: expected a map");
    for (const auto& kv : node["args"]) op.args.push_back(parse_arg(kv.first.as<std::string>(), kv.second, ctx));
  }
  if (node["init"]) op.init = parse_template(node["init"], ctx, "init");
  op.forward = parse_template(node["forward"], ctx, "forward");
  op.out = parse_out(node["out"], ctx);
  if (node["out_dtype"]) op.out_dtype = node["out_dtype"].as<std::string>();
  op.terminal = node["terminal"] ? node["terminal"].as<bool>() : false;
  op.stochastic = node["stochastic"] ? node["stochastic"].as<bool>() : false;
  if (op.out.kind == OutRule::kScalar || op.out_dtype != "F32") op.terminal = true;
  op.flops = parse_expr(node["flops"], ctx, "flops");
  op.bytes = parse_expr(node["bytes"], ctx, "bytes");
  if (node["weight"]) op.weight = static_cast<uint32_t>(node["weight"].as<double>() * 10 + 0.5);
  if (node["inputs"]) {
    for (const auto& e : node["inputs"]) {
      ExtraInput x;
      x.name = e["name"].as<std::string>();
      auto shape = e["shape"];
      if (!shape || (shape.IsScalar() && shape.Scalar() == "same")) {
        x.same_shape = true;
      } else {
        x.same_shape = false;
        x.shape = parse_expr_list(shape, ctx, "inputs." + x.name + ".shape");
      }
      if (e["dtype"]) x.dtype = e["dtype"].as<std::string>();
      x.make = parse_template(e["make"] ? e["make"] : YAML::Node("torch.randn({shape})"), ctx, "inputs.make");
      if (e["dist"]) x.dist = e["dist"].as<std::string>();
      if (e["high"]) x.dist_high = parse_expr(e["high"], ctx, "inputs.high");
      op.extras.push_back(std::move(x));
    }
  }
  op.attr = lower_attr(op.name);
  // Every placeholder must name something the renderer knows.
  std::set<std::string> known = {"v", "x", "shape", "bshape", "last", "d0", "d1", "d2", "d3", "d4"};
  for (const auto& a : op.args) known.insert(a.name);
  for (const auto& e : op.extras) known.insert(e.name);
  std::vector<const Template*> templates = {&op.init, &op.forward};
  for (const auto& e : op.extras) templates.push_back(&e.make);
  for (const Template* t : templates)
    for (const auto& p : t->pieces)
      if (!p.literal && !known.count(p.text)) ctx.fail("template '" + t->source + "' uses unknown {" + p.text + "}");
  return op;
}

ModuleSpec parse_module(const YAML::Node& node, std::size_t index, const std::string& base) {
  ModuleSpec m;
  Ctx ctx{"modules[" + std::to_string(index) + "]"};
  for (const char* f : {"name", "file", "constants", "inputs", "outputs", "flops", "bytes"})
    if (!node[f]) ctx.fail(std::string(f) + " missing");
  m.name = node["name"].as<std::string>();
  ctx.where = "module " + m.name;
  m.api = node["api"] ? node["api"].as<std::string>() : "transformers." + m.name;
  m.file = node["file"].as<std::string>();
  m.source = ca::read_file((fs::path(base) / m.file).string());
  for (const auto& kv : node["constants"]) {
    ModuleConstant c;
    c.name = kv.first.as<std::string>();
    c.sym = intern_symbol(c.name);
    c.tiny = kv.second["tiny"].as<std::vector<int64_t>>();
    c.gpu = kv.second["gpu"].as<std::vector<int64_t>>();
    if (c.tiny.empty() || c.gpu.empty()) ctx.fail("constants." + c.name + ": empty list");
    // The file must carry the constant as a line "name = <int>" for the generator to replace.
    if (m.source.find("\n" + c.name + " = ") == std::string::npos) ctx.fail("file lacks a line '" + c.name + " = ...'");
    m.constants.push_back(std::move(c));
  }
  if (node["requires"]) m.requires_ = parse_expr_list(node["requires"], ctx, "requires");
  for (const char* which : {"inputs", "outputs"}) {
    for (const auto& t : node[which]) {
      ModuleSpec::Tensor tensor;
      tensor.name = t["name"] ? t["name"].as<std::string>() : "";
      tensor.shape = parse_expr_list(t["shape"], ctx, std::string(which) + ".shape");
      if (t["dtype"]) tensor.dtype = t["dtype"].as<std::string>();
      (std::string(which) == "inputs" ? m.inputs : m.outputs).push_back(std::move(tensor));
    }
  }
  if (node["init_inputs"]) m.init_inputs = node["init_inputs"].as<std::vector<std::string>>();
  m.flops = parse_expr(node["flops"], ctx, "flops");
  m.bytes = parse_expr(node["bytes"], ctx, "bytes");
  return m;
}

}  // namespace

Catalog Catalog::load(const std::string& path) {
  Catalog cat;
  cat.path = path;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ca::InputError(path + ": " + e.what());
  }
  try {
    cat.version = root["version"].as<int>();
    for (const auto& kv : root["sizes"]) {
      SizeProfile p;
      for (const auto& item : kv.second) {
        std::string key = item.first.as<std::string>();
        if (key == "max_numel") p.max_numel = item.second.as<int64_t>();
        else if (key == "max_flops") p.max_flops = item.second.as<int64_t>();
        else p.lists[key] = item.second.as<std::vector<int64_t>>();
      }
      cat.sizes[kv.first.as<std::string>()] = std::move(p);
    }
    for (const auto& kv : root["starts"]) {
      StartLayout s;
      s.names = kv.second["names"].as<std::vector<std::string>>();
      s.dims = kv.second["dims"].as<std::vector<std::string>>();
      cat.starts[kv.first.as<int>()] = std::move(s);
    }
    std::size_t i = 0;
    std::set<std::string> names;
    for (const auto& n : root["ops"]) {
      cat.ops.push_back(parse_op(n, i++));
      if (!names.insert(cat.ops.back().name).second)
        throw ca::InputError(path + ": op " + cat.ops.back().name + " defined twice");
    }
    std::string base = fs::path(path).parent_path().string();
    i = 0;
    for (const auto& n : root["modules"]) cat.modules.push_back(parse_module(n, i++, base));
  } catch (const ca::InputError& e) {
    throw ca::InputError(path + ": " + e.what());
  } catch (const YAML::Exception& e) {
    throw ca::InputError(path + ": " + e.what());
  }
  // Ranks without a start layout (rank 1 after a reduction) are fine inside a chain; an op needs
  // at least one rank a chain can start from.
  for (const auto& op : cat.ops) {
    bool startable = false;
    for (int r : op.ranks) startable = startable || cat.starts.count(r);
    if (!startable) throw ca::InputError(path + ": op " + op.name + ": no start layout for any of its ranks");
  }
  for (const auto& [name, prof] : cat.sizes)
    for (const auto& op : cat.ops)
      for (const auto& a : op.args)
        if (a.is_size() && !prof.lists.count(a.size_key))
          throw ca::InputError(path + ": op " + op.name + ": args." + a.name + ": size list '" + a.size_key +
                               "' missing from sizes." + name);
  return cat;
}

const OpSpec* Catalog::find_op(const std::string& name) const {
  for (const auto& op : ops)
    if (op.name == name) return &op;
  return nullptr;
}

std::vector<std::string> Catalog::families() const {
  std::vector<std::string> out;
  for (const auto& op : ops)
    if (std::find(out.begin(), out.end(), op.family) == out.end()) out.push_back(op.family);
  return out;
}

}  // namespace ca::ops_synth
