// The one YAML reader: bounded YAML -> JSON, JSON objects into the same shape, YAML's scalar rules.
#include "libcommon/yaml.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>

namespace ca {

namespace {

struct NodeBudget {
  const std::string& label;
  const YamlLimits& limits;
  int64_t nodes = 0;
  void enter(int depth) {
    if (++nodes > limits.max_nodes) {
      std::string detail = "more than " + std::to_string(limits.max_nodes) +
                           " values (YAML aliases are counted at every use): refused (limit: " + limits.kind + " nodes)";
      throw YamlError(label + ": " + detail, detail);
    }
    if (depth > limits.max_depth) throw_depth();
  }
  [[noreturn]] void throw_depth() const {
    std::string detail = "nested more than " + std::to_string(limits.max_depth) + " levels deep: refused (limit: " + limits.kind + " depth)";
    throw YamlError(label + ": " + detail, detail);
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

Json yaml_node_to_json(const YAML::Node& n, NodeBudget& budget, int depth) {
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
      Json o = Json::object();  // ordered: the file's key order is the object's
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) throw YamlError(budget.label + ": a map key is not a plain name", "a map key is not a plain name");
        // A key given twice would keep one value silently (a plan's second `grid:` or dim): refused.
        const std::string key = kv.first.as<std::string>();
        if (o.contains(key)) {
          const std::string detail = "key '" + key + "' appears twice in one map (line " + std::to_string(kv.first.Mark().line + 1) + ")";
          throw YamlError(budget.label + ": " + detail, detail);
        }
        o[key] = yaml_node_to_json(kv.second, budget, depth + 1);
      }
      return o;
    }
    default: return nullptr;
  }
}

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
    // The whitespace after the scalar stays after the closing quote: an unterminated collection's
    // error then names the line it names in the text as written.
    std::string trailing;
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
      trailing.insert(trailing.begin(), text.back());
      text.pop_back();
    }
    if (text == "null" || text == "~" || text.empty()) {
      out_ += text + trailing;
      return;
    }
    out_ += '"';
    for (char c : text) {
      if (c == '"' || c == '\\') out_ += '\\';
      out_ += c == '\n' ? ' ' : c;
    }
    out_ += '"';
    out_ += trailing;
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

// Walks a JSON value under the node and depth bounds yaml_to_json applies; throws at the first excess.
void check_bounds(const Json& v, NodeBudget& budget, int depth) {
  budget.enter(depth);
  if (v.is_object())
    for (auto& [k, x] : v.items()) check_bounds(x, budget, depth + 1);
  else if (v.is_array())
    for (auto& x : v) check_bounds(x, budget, depth + 1);
}

[[noreturn]] void bad_conversion() { throw YamlError("bad conversion", "bad conversion"); }

// One scalar as yaml-cpp sees it, so the conversions are yaml-cpp's own.
YAML::Node scalar_node(const Json& v) {
  if (v.is_string()) return YAML::Node(v.get<std::string>());
  if (v.is_number() || v.is_boolean()) return YAML::Node(v.dump());
  bad_conversion();
}

template <class T> T convert(const Json& v) {
  T out{};
  if (!YAML::convert<T>::decode(scalar_node(v), out)) bad_conversion();
  return out;
}

}  // namespace

Json yaml_to_json(const std::string& text, const std::string& label, const YamlLimits& limits) {
  if (text.size() > limits.max_bytes) {
    std::string detail = std::to_string(text.size()) + " bytes of text, over the " + std::to_string(limits.max_bytes) + " a " +
                         limits.kind + " may have (limit: " + limits.kind + " size)";
    throw YamlError(label + ": " + detail, detail);
  }
  NodeBudget budget{label, limits};
  if (flow_depth(text) > limits.max_depth) budget.throw_depth();
  try {
    return yaml_node_to_json(YAML::Load(FlowQuoter(text).run()), budget, 0);
  } catch (const YAML::Exception& e) {
    throw YamlError(label + ": not valid YAML: " + e.what(), e.what(), true);
  }
}

namespace {
Json line_mirror(const YAML::Node& n) {
  Json o = Json::object();
  o["@"] = n.Mark().line + 1;
  if (n.IsMap())
    for (const auto& kv : n)
      if (kv.first.IsScalar()) o[kv.first.Scalar()] = line_mirror(kv.second);
  if (n.IsSequence()) {
    size_t i = 0;
    for (const auto& x : n) o[std::to_string(i++)] = line_mirror(x);
  }
  return o;
}
}  // namespace

Json yaml_lines(const std::string& text, const YamlLimits& limits) {
  try {
    yaml_to_json(text, "yaml", limits);  // its bounds first (size, values, depth): what it refuses is not walked
    return line_mirror(YAML::Load(FlowQuoter(text).run()));
  } catch (const std::exception&) {
    return nullptr;
  }
}

const Json& bounded_json(const Json& v, const std::string& label, const YamlLimits& limits) {
  NodeBudget budget{label, limits};
  check_bounds(v, budget, 0);
  return v;
}

std::vector<std::string> yaml_keys(const Json& o) {
  std::vector<std::string> keys;
  if (o.is_object())
    for (auto& [k, v] : o.items()) keys.push_back(k);
  return keys;
}

std::string yaml_string(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_string()) return v.get<std::string>();
  return convert<std::string>(v);
}
double yaml_double(const Json& v) { return convert<double>(v); }
int64_t yaml_int64(const Json& v) { return convert<int64_t>(v); }
int yaml_int(const Json& v) { return convert<int>(v); }
bool yaml_bool(const Json& v) { return convert<bool>(v); }

std::vector<std::string> yaml_strings(const Json& v) {
  if (!v.is_array()) bad_conversion();
  std::vector<std::string> out;
  for (auto& x : v) {
    if (x.is_object() || x.is_array()) bad_conversion();
    out.push_back(yaml_string(x));
  }
  return out;
}

std::vector<int64_t> yaml_int64s(const Json& v) {
  if (!v.is_array()) bad_conversion();
  std::vector<int64_t> out;
  for (auto& x : v) out.push_back(yaml_int64(x));
  return out;
}

std::string yaml_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "~";
  if (v.is_array()) {
    std::string s = "[";
    for (auto& x : v) s += (s.size() > 1 ? ", " : "") + yaml_text(x);
    return s + "]";
  }
  if (v.is_object()) {
    std::string s = "{";
    for (auto& k : yaml_keys(v)) s += (s.size() > 1 ? ", " : "") + k + ": " + yaml_text(v[k]);
    return s + "}";
  }
  return v.dump();
}

}  // namespace ca
