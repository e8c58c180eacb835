// The one YAML reader: YAML text to JSON under size, node and depth bounds, so a hostile file (an
// alias bomb, a nesting bomb, megabytes of text) is refused before it costs memory or time. Every
// tool reads YAML through it (plans, policies, reward and training configs).
//
//   Json j = ca::yaml_to_json(text, "--config x.yaml");   // YamlError: "--config x.yaml: not valid YAML: ..."
//   for (auto& k : ca::yaml_keys(j)) ... j[k] ...          // a map's keys in file order
//   double lr = ca::yaml_double(j["lr"]);                  // YAML's own scalar rules; YamlError "bad conversion"
//
// Scalars stay strings ("2.0" keeps its spelling), nulls are null, lists are arrays, and maps are
// objects in the file's key order (Json is ordered). Flow collections ([a, b], {k: v}) have
// their scalars quoted first, with commas inside parentheses and index brackets kept in the scalar,
// so `grid: [cdiv(N, 256)]` is one value.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca {

struct YamlLimits {
  size_t max_bytes = 1 << 20;  // text
  int64_t max_nodes = 100000;  // scalars, lists and maps, aliases counted at every use
  int max_depth = 64;          // nesting of lists and maps
  std::string kind = "yaml";   // what the text is, in limit messages: "(limit: plan depth)"
};

struct YamlError : std::runtime_error {
  YamlError(const std::string& what, std::string detail_, bool syntax_ = false)
      : std::runtime_error(what), detail(std::move(detail_)), syntax(syntax_) {}
  std::string detail;  // what() without the label: "bad conversion", yaml-cpp's message, a limit
  bool syntax;         // the text is not YAML (detail is yaml-cpp's message, with line and column)
};

// `label` starts every message: "<label>: not valid YAML: ...", "<label>: nested more than 64
// levels deep: refused (limit: <kind> depth)".
Json yaml_to_json(const std::string& text, const std::string& label = "yaml", const YamlLimits& limits = {});
// A JSON value given where YAML could be (a plan inline in a record), under the same node and depth
// bounds as yaml_to_json: returns `v`, or throws YamlError at the first excess.
const Json& bounded_json(const Json& v, const std::string& label = "json", const YamlLimits& limits = {});
// Where each node of `text` starts (lines from 1), mirroring yaml_to_json's value: every node is an
// object whose "@" is its line, with a map's children under their keys and a list's under "0", "1",
// ... For messages (a plan error's step line); null for a text yaml_to_json refuses under `limits`.
Json yaml_lines(const std::string& text, const YamlLimits& limits = {});
// A map's keys in order; none for a value that is not a map.
std::vector<std::string> yaml_keys(const Json& map);

// Scalars by YAML's own rules (yaml-cpp's conversions: "yes"/"on"/"true" are true, ".inf" a double).
// A value that does not convert throws YamlError with detail "bad conversion".
std::string yaml_string(const Json& v);  // null reads "null", as yaml-cpp reads it
double yaml_double(const Json& v);
int64_t yaml_int64(const Json& v);
int yaml_int(const Json& v);
bool yaml_bool(const Json& v);
std::vector<std::string> yaml_strings(const Json& v);   // a list of scalars
std::vector<int64_t> yaml_int64s(const Json& v);
// The value as YAML text, for messages: a scalar as written, a list or map in flow style.
std::string yaml_text(const Json& v);

}  // namespace ca
