// Rendering a task record: the KernelBench-format Python (class Model, get_inputs, get_init_inputs)
// from a chain's op templates or a module's source, its inputs and outputs, and the record's fields.
#include <algorithm>
#include <cctype>

#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "tools/ops-synth/generate.hpp"
#include "tools/ops-synth/generate_detail.hpp"

namespace ca::ops_synth {

using detail::bind_args;
using detail::bind_shape;

namespace {

std::string shape_literal(const Shape& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  // Always a tuple: torch.randn and torch.randint both take one.
  return s.size() == 1 ? "(" + out + ",)" : "(" + out + ")";
}

ca::Json shape_json(const Shape& s) {
  ca::Json a = ca::Json::array();
  for (auto d : s) a.push_back(d);
  return a;
}

ca::Json distribution(const std::string& kind, int64_t high) {
  if (kind == "uniform") return ca::Json{{"kind", "uniform"}, {"low", 0.0}, {"high", 1.0}};
  if (kind == "randint") return ca::Json{{"kind", "randint"}, {"low", 0}, {"high", high}};
  if (kind == "sign") return ca::Json{{"kind", "derived"}, {"values", ca::Json::array({-1, 1})}};
  return ca::Json{{"kind", "normal"}, {"mean", 0.0}, {"std", 1.0}};
}

// Constructor parameters and module-level constants of one rendered Model.
struct Names {
  std::vector<std::pair<std::string, int64_t>> constants;
  std::vector<std::string> params;
  std::vector<int64_t> param_values;
  std::vector<std::string> used;  // attribute and input names

  const int64_t* constant(const std::string& n) const {
    for (const auto& [k, v] : constants)
      if (k == n) return &v;
    return nullptr;
  }
  std::string claim_param(const std::string& base, int64_t value) {
    for (int suffix = 1;; ++suffix) {
      std::string n = suffix == 1 ? base : base + "_" + std::to_string(suffix);
      auto it = std::find(params.begin(), params.end(), n);
      if (it != params.end()) {
        if (param_values[static_cast<std::size_t>(it - params.begin())] == value) return n;
        continue;
      }
      const int64_t* c = constant(n);
      if (c && *c != value) continue;
      if (!c && std::find(used.begin(), used.end(), n) != used.end()) continue;
      if (!c) constants.emplace_back(n, value);
      params.push_back(n);
      param_values.push_back(value);
      return n;
    }
  }
  std::string unique(const std::string& base) {
    for (int suffix = 1;; ++suffix) {
      std::string n = suffix == 1 ? base : base + "_" + std::to_string(suffix);
      if (std::find(used.begin(), used.end(), n) == used.end() && !constant(n) &&
          std::find(params.begin(), params.end(), n) == params.end()) {
        used.push_back(n);
        return n;
      }
    }
  }
};

struct RenderScope {
  const OpSpec* spec;
  const std::vector<ArgValue>* args;
  const Shape* in;
  const std::string* attr;
  const std::vector<std::string>* extra_names;
  const Shape* extra_shape;  // for make templates
};

std::string render(const Template& t, const RenderScope& sc, Names* names) {
  std::string out;
  for (const auto& p : t.pieces) {
    if (p.literal) {
      out += p.text;
      continue;
    }
    const std::string& v = p.text;
    bool have_int = false, is_dim = false;
    int64_t iv = 0;
    std::string text;
    if (v == "v") {
      out += *sc.attr;
      continue;
    }
    if (v == "x") {
      out += "x";
      continue;
    }
    if (v == "shape") {
      std::string lit = shape_literal(*sc.extra_shape);
      out += lit;
      continue;
    }
    if (v == "bshape") {
      out += std::to_string(sc.in->size() >= 2 ? (*sc.in)[1] : 1);
      for (std::size_t i = 2; i < sc.in->size(); ++i) out += ", 1";
      if (sc.in->size() <= 2) out += ",";
      continue;
    }
    if (v == "last") {
      have_int = is_dim = true;
      iv = sc.in->empty() ? 1 : sc.in->back();
    } else if (v.size() == 2 && v[0] == 'd' && std::isdigit(static_cast<unsigned char>(v[1]))) {
      std::size_t i = static_cast<std::size_t>(v[1] - '0');
      if (i >= sc.in->size()) throw ca::InternalError("template of " + sc.spec->name + " uses " + v + " on a rank-" +
                                                      std::to_string(sc.in->size()) + " input");
      have_int = is_dim = true;
      iv = (*sc.in)[i];
    } else {
      bool found = false;
      for (std::size_t i = 0; i < sc.spec->args.size(); ++i)
        if (sc.spec->args[i].name == v) {
          const ArgValue& a = (*sc.args)[i];
          have_int = a.is_int;
          iv = a.i;
          text = a.text;
          found = true;
        }
      for (std::size_t i = 0; !found && i < sc.spec->extras.size(); ++i)
        if (sc.spec->extras[i].name == v) {
          text = (*sc.extra_names)[i];
          found = true;
        }
      if (!found) throw ca::InternalError("template of " + sc.spec->name + " uses unknown '{" + v + "}'");
    }
    if (p.filter == "bool") {
      out += (have_int ? iv != 0 : text == "True") ? "True" : "False";
    } else if (have_int && names && (!p.param.empty() || !is_dim)) {
      out += names->claim_param(p.param.empty() ? v : p.param, iv);
    } else if (have_int) {
      out += std::to_string(iv);
    } else {
      out += text;
    }
  }
  return out;
}

const char* kHeader = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n";

// What a chain's ops give its Model, in chain order: attribute lines of __init__, lines of forward,
// the extra inputs (forward's parameters, get_inputs' code, the record's inputs), and the name.
struct ChainParts {
  std::string init_body, forward_body, extra_inputs_code;
  std::vector<std::string> forward_params = {"x"};
  ca::Json inputs = ca::Json::array();
  ca::Json ops = ca::Json::array();
  std::string task_name;
};

ChainParts chain_parts(const std::vector<OpInstance>& chain, const std::vector<Applied>& steps, const Shape& start,
                       Names& names) {
  ChainParts p;
  p.inputs.push_back(ca::Json{{"name", "x"}, {"shape", shape_json(start)}, {"dtype", "F32"},
                              {"distribution", distribution("normal", 0)}});
  for (std::size_t k = 0; k < chain.size(); ++k) {
    const OpInstance& inst = chain[k];
    const OpSpec& spec = *inst.spec;
    const Applied& st = steps[k];
    p.ops.push_back(spec.api);
    p.task_name += (k ? "_" : "") + spec.name;
    std::string attr = spec.init.pieces.empty() ? "" : names.unique(spec.attr);
    std::vector<std::string> extra_names;
    for (std::size_t e = 0; e < spec.extras.size(); ++e) {
      std::string n = names.unique(spec.extras[e].name);
      extra_names.push_back(n);
      p.forward_params.push_back(n);
    }
    RenderScope sc{&spec, &inst.args, &st.in, &attr, &extra_names, nullptr};
    if (!attr.empty()) p.init_body += "        self." + attr + " = " + render(spec.init, sc, &names) + "\n";
    p.forward_body += "        x = " + render(spec.forward, sc, nullptr) + "\n";
    for (std::size_t e = 0; e < spec.extras.size(); ++e) {
      const ExtraInput& x = spec.extras[e];
      RenderScope xs = sc;
      xs.extra_shape = &st.extras[e];
      p.extra_inputs_code += ", " + render(x.make, xs, nullptr);
      int64_t high = 0;
      if (!x.dist_high.empty()) {
        Env env;
        bind_shape(env, st.in);
        bind_args(env, spec, inst.args);
        int64_t h = 0;
        if (x.dist_high.try_eval(env, h)) high = h;
      }
      p.inputs.push_back(ca::Json{{"name", extra_names[e]}, {"shape", shape_json(st.extras[e])}, {"dtype", x.dtype},
                                  {"distribution", distribution(x.dist, high)}});
    }
  }
  return p;
}

// The chain's Python: class Model from the parts, the module-level constants, get_inputs and
// get_init_inputs.
std::string chain_code(const ChainParts& p, const Names& names, const StartLayout& layout, std::size_t start_rank,
                       std::size_t n_ops) {
  std::string code = kHeader;
  code += "class Model(nn.Module):\n";
  code += "    \"\"\"" + p.task_name + " (ops-synth, " + std::to_string(n_ops) + " op" +
          (n_ops > 1 ? "s" : "") + ")\"\"\"\n\n";
  code += "    def __init__(self";
  for (const auto& q : names.params) code += ", " + q;
  code += "):\n        super(Model, self).__init__()\n" + p.init_body + "\n";
  code += "    def forward(self";
  for (const auto& q : p.forward_params) code += ", " + q;
  code += "):\n" + p.forward_body + "        return x\n\n\n";
  for (const auto& [k, v] : names.constants) code += k + " = " + std::to_string(v) + "\n";
  code += "\n\ndef get_inputs():\n    return [torch.randn(";
  for (std::size_t i = 0; i < start_rank; ++i) code += (i ? ", " : "") + layout.names[i];
  code += ")" + p.extra_inputs_code + "]\n\n\ndef get_init_inputs():\n    return [";
  for (std::size_t i = 0; i < names.params.size(); ++i) code += (i ? ", " : "") + names.params[i];
  code += "]\n";
  return code;
}

// A task record's fields, in the order every task record has them; task_id hashes the code, the
// init inputs and the inputs.
ca::Json task_record(const std::string& name, ca::Json ops, const std::string& data_source, std::string code,
                     ca::Json inputs, ca::Json outputs, ca::Json init_inputs, uint64_t seed, ca::Json estimates,
                     ca::Json synth) {
  ca::Json key{{"code", code}, {"init_inputs", init_inputs}, {"inputs", inputs}};
  ca::Json rec;
  rec["schema"] = "cuda-agent/task/v1";
  rec["task_id"] = ca::task_id_for(key);
  rec["name"] = name;
  rec["ops"] = std::move(ops);
  rec["data_source"] = data_source;
  rec["code"] = std::move(code);
  // The generator's modules run as KernelBench runs its tasks (training mode); whether a reference is
  // stochastic is measured where the task first runs (ops-synth filter, the judge), never claimed here.
  rec["reference"] = ca::Json{{"mode", "train"}};
  rec["inputs"] = std::move(inputs);
  rec["outputs"] = std::move(outputs);
  rec["init_inputs"] = std::move(init_inputs);
  rec["seed"] = seed;
  rec["estimates"] = std::move(estimates);
  rec["synth"] = std::move(synth);
  return rec;
}

}  // namespace

ca::Json Generator::render_chain(const Built& b, int64_t index, int attempt) const {
  Names names;
  const StartLayout& layout = cat_.starts.at(static_cast<int>(b.start.size()));
  for (std::size_t i = 0; i < b.start.size(); ++i) names.constants.emplace_back(layout.names[i], b.start[i]);
  for (const char* reserved : {"x", "torch", "nn", "F", "Model", "self", "get_inputs", "get_init_inputs"})
    names.used.push_back(reserved);
  ChainParts parts = chain_parts(b.chain, b.steps, b.start, names);
  std::string code = chain_code(parts, names, layout, b.start.size(), b.chain.size());

  const Applied& last = b.steps.back();
  ca::Json outputs = ca::Json::array();
  outputs.push_back(ca::Json{{"name", "output"}, {"shape", shape_json(last.out)}, {"dtype", b.chain.back().spec->out_dtype}});
  ca::Json init_inputs = ca::Json::array();
  for (auto v : names.param_values) init_inputs.push_back(v);
  int64_t flops = 0, bytes = 0;
  for (const auto& s : b.steps) {
    flops += s.flops;
    bytes += s.bytes;
  }
  return task_record(parts.task_name, std::move(parts.ops), "torch#" + std::to_string(b.chain.size()), std::move(code),
                     std::move(parts.inputs), std::move(outputs), std::move(init_inputs), opt_.seed,
                     ca::Json{{"flops", flops}, {"bytes", bytes}, {"eager_ms", b.est_ms}, {"gpu_profile", gpu_->name}},
                     ca::Json{{"index", index}, {"attempt", attempt}, {"category", category_name(b.category)},
                              {"sizes", opt_.sizes}, {"catalog_version", cat_.version}});
}

ca::Json Generator::render_module(const Built& b, int64_t index, int attempt) const {
  const ModuleSpec& m = *b.module;
  std::string code = m.source;
  for (std::size_t i = 0; i < m.constants.size(); ++i) {
    std::string key = "\n" + m.constants[i].name + " = ";
    auto pos = code.find(key);
    auto end = code.find('\n', pos + key.size());
    code.replace(pos + key.size(), end - pos - key.size(), std::to_string(b.consts[i]));
  }
  auto value_of = [&](const std::string& name) -> int64_t {
    for (std::size_t i = 0; i < m.constants.size(); ++i)
      if (m.constants[i].name == name) return b.consts[i];
    throw ca::InternalError("module " + m.name + ": init input '" + name + "' is not a constant");
  };
  ca::Json inputs = ca::Json::array(), outputs = ca::Json::array(), init_inputs = ca::Json::array();
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    inputs.push_back(ca::Json{{"name", m.inputs[i].name}, {"shape", shape_json(b.module_in[i])},
                                {"dtype", m.inputs[i].dtype}, {"distribution", distribution("normal", 0)}});
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    outputs.push_back(ca::Json{{"name", m.outputs[i].name.empty() ? "output" : m.outputs[i].name},
                                 {"shape", shape_json(b.module_out[i])}, {"dtype", m.outputs[i].dtype}});
  for (const auto& n : m.init_inputs) init_inputs.push_back(value_of(n));
  return task_record(m.name, ca::Json::array({m.api}), "transformers#1", std::move(code), std::move(inputs),
                     std::move(outputs), std::move(init_inputs), opt_.seed,
                     ca::Json{{"flops", b.flops}, {"bytes", b.bytes}, {"eager_ms", b.est_ms}, {"gpu_profile", gpu_->name}},
                     ca::Json{{"index", index}, {"attempt", attempt}, {"category", "module"}, {"sizes", opt_.sizes},
                              {"catalog_version", cat_.version}});
}

}  // namespace ca::ops_synth
