// The bundle rules: loading and checks.
#include "libcommon/bundle/rules.hpp"

#include <algorithm>
#include <cstdint>
#include <cctype>
#include <cstdlib>
#include <cxxabi.h>
#include <memory>
#include <set>
#include <map>
#include <sstream>


#include "libcommon/byte_regex.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/yaml.hpp"

namespace ca::bundle {

extern const char* const kDefaultRulesYaml;  // generated from datasets/skill/rules.yaml (default_rules.cpp.in)


ca::Json Violation::to_json() const {
  ca::Json j{{"rule", rule}, {"reason", reason}};
  if (!file.empty()) j["file"] = file;
  if (line > 0) j["line"] = line;
  return j;
}

const std::string& Rules::default_text() {
  static const std::string text = kDefaultRulesYaml;
  return text;
}

namespace {

// One setting's value by YAML's rules; a bad one names the rules file, the key and the value.
template <class F> auto setting(const std::string& name, const std::string& key, const ca::Json& v, F convert) {
  try {
    return convert(v);
  } catch (const ca::YamlError& e) {
    throw ca::UsageError("rules " + name + ": " + key + ": bad value '" + ca::yaml_text(v) + "' (" + e.detail + ")");
  }
}

void apply(Rules& p, const ca::Json& n, const std::string& name) {
  if (!n.is_object()) throw ca::UsageError("rules " + name + ": expected a map");
  static const std::vector<std::string> known = {"allowed_steps", "allowed_headers", "forbidden", "max_module_global_bytes", "max_stack_bytes",
                                                 "scratch_cap", "scratch_peak_factor", "max_scratch_ratio", "max_scratch_slack_bytes",
                                                 "max_forward_steps", "max_init_steps"};
  for (const auto& k : ca::yaml_keys(n))
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw ca::UsageError("rules " + name + ": unknown key '" + k + "'");
  if (n.contains("allowed_steps")) {
    p.allowed_steps = setting(name, "allowed_steps", n["allowed_steps"], ca::yaml_strings);
    // A kind the plan language lacks (a typo, `gem`, or `pool`) would allow nothing and say nothing.
    for (const auto& k : p.allowed_steps)
      if (k != "launch" && k != "gemm" && k != "conv")
        throw ca::UsageError("rules " + name + ": allowed_steps: '" + k + "' is not a step kind (launch, gemm, conv)");
  }
  if (n.contains("allowed_headers")) p.allowed_headers = setting(name, "allowed_headers", n["allowed_headers"], ca::yaml_strings);
  if (n.contains("forbidden")) {
    const ca::Json& list = n["forbidden"];
    if (!list.is_array()) throw ca::UsageError("rules " + name + ": forbidden: expected a list of rules");
    p.forbidden.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      const ca::Json& f = list[i];
      const std::string at = "forbidden[" + std::to_string(i) + "]";
      if (!f.is_object() || !f.contains("rule")) throw ca::UsageError("rules " + name + ": " + at + ": expected a map with rule");
      ForbiddenRule r;
      r.rule = setting(name, at + ".rule", f["rule"], ca::yaml_string);
      r.why = f.contains("why") ? setting(name, at + ".why", f["why"], ca::yaml_string) : r.rule;
      auto compile = [&](const std::string& text) {
        auto re = std::make_shared<const re2::RE2>(text, ca::byte_regex_options());
        if (!re->ok()) throw ca::UsageError("rules " + name + ": rule " + r.rule + ": bad regular expression (RE2 syntax): " + re->error());
        return re;
      };
      if (f.contains("source")) {
        r.source_text = setting(name, at + ".source", f["source"], ca::yaml_string);
        r.source = compile(r.source_text);
      }
      if (f.contains("ptx")) {
        r.ptx_text = setting(name, at + ".ptx", f["ptx"], ca::yaml_string);
        r.ptx = compile(r.ptx_text);
      }
      p.forbidden.push_back(std::move(r));
    }
  }
  if (n.contains("max_module_global_bytes"))
    p.max_module_global_bytes = setting(name, "max_module_global_bytes", n["max_module_global_bytes"], ca::yaml_int64);
  if (n.contains("max_stack_bytes")) p.max_stack_bytes = setting(name, "max_stack_bytes", n["max_stack_bytes"], ca::yaml_int64);
  if (n.contains("scratch_cap")) {
    p.scratch_cap = setting(name, "scratch_cap", n["scratch_cap"], ca::yaml_string);
    if (p.scratch_cap != "reference_peak" && p.scratch_cap != "io_ratio")
      throw ca::UsageError("rules " + name + ": scratch_cap: '" + p.scratch_cap + "' is not a cap (reference_peak or io_ratio)");
  }
  auto non_negative = [&](const char* key, auto v) {
    if (!(v >= 0)) throw ca::UsageError("rules " + name + ": " + key + ": must be a number >= 0");
    return v;
  };
  if (n.contains("scratch_peak_factor"))
    p.scratch_peak_factor = non_negative("scratch_peak_factor", setting(name, "scratch_peak_factor", n["scratch_peak_factor"], ca::yaml_double));
  if (n.contains("max_scratch_ratio"))
    p.max_scratch_ratio = non_negative("max_scratch_ratio", setting(name, "max_scratch_ratio", n["max_scratch_ratio"], ca::yaml_double));
  if (n.contains("max_scratch_slack_bytes"))
    p.max_scratch_slack_bytes =
        non_negative("max_scratch_slack_bytes", setting(name, "max_scratch_slack_bytes", n["max_scratch_slack_bytes"], ca::yaml_int64));
  if (n.contains("max_forward_steps")) p.max_forward_steps = setting(name, "max_forward_steps", n["max_forward_steps"], ca::yaml_int);
  if (n.contains("max_init_steps")) p.max_init_steps = setting(name, "max_init_steps", n["max_init_steps"], ca::yaml_int);
}

ca::Json load_rules_yaml(const std::string& text, const std::string& name) {
  ca::YamlLimits limits;
  limits.kind = "rules";
  try {
    return ca::yaml_to_json(text, "rules " + name, limits);
  } catch (const ca::YamlError& e) {
    throw ca::UsageError(e.syntax ? "rules " + name + ": " + e.detail : std::string(e.what()));
  }
}

}  // namespace

Rules Rules::parse(const std::string& yaml, const std::string& name) {
  Rules p;
  apply(p, load_rules_yaml(default_text(), name), "default");
  if (name != "default") apply(p, load_rules_yaml(yaml, name), name);
  p.source = name;
  if (name != "default") p.file_text = yaml;
  return p;
}

Json Rules::identity() const { return Json{{"default", default_text()}, {"file", file_text}}; }

Rules Rules::load(const std::string& path) {
  if (path.empty()) return parse(default_text(), "default");
  if (!ca::file_exists(path)) throw ca::UsageError("--rules: no such file " + path);
  return parse(ca::read_file(path), path);
}

std::string strip_comments(const std::string& s) {
  std::string out = s;
  enum { code, line_comment, block_comment, string_lit, char_lit } st = code;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i], n = i + 1 < s.size() ? s[i + 1] : '\0';
    switch (st) {
      case code:
        if (c == '/' && n == '/') { st = line_comment; out[i] = ' '; }
        else if (c == '/' && n == '*') { st = block_comment; out[i] = out[i + 1] = ' '; ++i; }
        else if (c == '"') st = string_lit;
        else if (c == '\'') st = char_lit;
        break;
      case line_comment:
        if (c == '\n') st = code;
        else out[i] = ' ';
        break;
      case block_comment:
        if (c == '*' && n == '/') { out[i] = out[i + 1] = ' '; ++i; st = code; }
        else if (c != '\n') out[i] = ' ';
        break;
      case string_lit:
        if (c == '\\') ++i;
        else if (c == '"' || c == '\n') st = code;
        break;
      case char_lit:
        if (c == '\\') ++i;
        else if (c == '\'' || c == '\n') st = code;
        break;
    }
  }
  return out;
}

static int line_of(const std::string& text, size_t pos) {
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
}

static std::string line_text(const std::string& text, size_t pos) {
  size_t b = text.rfind('\n', pos);
  b = b == std::string::npos ? 0 : b + 1;
  size_t e = text.find('\n', pos);
  std::string l = text.substr(b, e == std::string::npos ? std::string::npos : e - b);
  l.erase(0, l.find_first_not_of(" \t"));
  return l.size() > 80 ? l.substr(0, 80) + "..." : l;
}

// The source as the compiler's first phases read it: a backslash-newline joins two lines (the
// newlines it removed follow the joined line, so later lines keep their numbers).
static std::string splice_lines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t pending = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '\n' || (s[i + 1] == '\r' && i + 2 < s.size() && s[i + 2] == '\n'))) {
      i += s[i + 1] == '\r' ? 2 : 1;
      ++pending;
      continue;
    }
    out += s[i];
    if (s[i] == '\n') {
      out.append(pending, '\n');
      pending = 0;
    }
  }
  out.append(pending, '\n');
  return out;
}

std::optional<Violation> Rules::check_sources(const std::map<std::string, std::string>& kernels) const {
  // An include directive however it is spelled (# or the %: digraph, spaces), and what it names: a
  // header the rules read only when named literally; one named through a macro is refused.
  static const re2::RE2 directive_re(R"(^[ \t]*(?:#|%:)[ \t]*(?:include_next|include|import)\b(.*))", ca::byte_regex_options());
  static const re2::RE2 literal_re(R"(^[ \t]*[<"]([^>"]+)[>"])", ca::byte_regex_options());
  for (const auto& [file, src] : kernels) {
    std::string code = strip_comments(splice_lines(src));
    std::istringstream lines(code);
    std::string text;
    int line = 0;
    while (std::getline(lines, text)) {
      ++line;
      std::string rest, h;
      if (!re2::RE2::PartialMatch(text, directive_re, &rest)) continue;
      if (!re2::RE2::PartialMatch(rest, literal_re, &h))
        return Violation{"allowed_headers", file + ":" + std::to_string(line) + ": " + line_text(text, 0) +
                                                ": an #include must name its header literally (<name> or \"name\"); one "
                                                "named through a macro is not one the rules can read", file, line};
      if (kernels.count(h)) continue;
      if (std::find(allowed_headers.begin(), allowed_headers.end(), h) != allowed_headers.end()) continue;
      return Violation{"allowed_headers", file + ":" + std::to_string(line) + ": #include <" + h + "> is not an allowed header", file, line};
    }
    for (const auto& r : forbidden) {
      if (!r.source) continue;
      re2::StringPiece m;
      if (r.source->Match(code, 0, code.size(), re2::RE2::UNANCHORED, &m, 1)) {
        size_t pos = static_cast<size_t>(m.data() - code.data());
        int line = line_of(code, pos);
        return Violation{r.rule, file + ":" + std::to_string(line) + ": " + r.why + ": " + line_text(code, pos), file, line};
      }
    }
  }
  return std::nullopt;
}

std::optional<Violation> Rules::check_plan(const Plan& plan) const {
  for (auto* section : {&plan.init, &plan.forward})
    for (const auto& s : *section)
      if (std::find(allowed_steps.begin(), allowed_steps.end(), s.kind_name()) == allowed_steps.end())
        return Violation{"allowed_steps", s.label() + ": step kind '" + s.kind_name() + "' is not allowed by the rules"};
  // Counted again once bound (check_bound), where repeats are unrolled: what a call launches.
  if (static_cast<int64_t>(plan.forward.size()) > max_forward_steps)
    return Violation{"max_forward_steps", "forward has " + std::to_string(plan.forward.size()) + " steps, the rules allow " +
                                              std::to_string(max_forward_steps)};
  if (static_cast<int64_t>(plan.init.size()) > max_init_steps)
    return Violation{"max_init_steps", "init has " + std::to_string(plan.init.size()) + " steps, the rules allow " +
                                           std::to_string(max_init_steps)};
  return std::nullopt;
}

namespace {

// The first place in the PTX (a bundle file and line, from -lineinfo's .loc) where `symbol` is named
// as a word inside code, or "PTX".
std::pair<std::string, int> where_named(const std::string& ptx, const std::string& symbol) {
  static const re2::RE2 file_re(R"re(^\s*\.file\s+(\d{1,9})\s+"([^"]+)")re", ca::byte_regex_options());
  static const re2::RE2 loc_re(R"(^\s*\.loc\s+(\d{1,9})\s+(\d{1,9}))", ca::byte_regex_options());
  std::map<int, std::string> files;
  // .file lines come last in NVRTC's PTX: read them first.
  {
    std::istringstream in(ptx);
    std::string line, path;
    int num = 0;
    while (std::getline(in, line))
      if (re2::RE2::PartialMatch(line, file_re, &num, &path)) files[num] = path.substr(path.find_last_of('/') + 1);
  }
  std::istringstream in(ptx);
  std::string line, cur_file;
  int cur_line = 0;
  while (std::getline(in, line)) {
    int num = 0, at = 0;
    if (re2::RE2::PartialMatch(line, loc_re, &num, &at)) {
      cur_file = files[num];
      cur_line = at;
      continue;
    }
    if (cur_line == 0) continue;
    for (size_t p = line.find(symbol); p != std::string::npos; p = line.find(symbol, p + 1)) {
      auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; };
      if ((p == 0 || !word(line[p - 1])) && (p + symbol.size() >= line.size() || !word(line[p + symbol.size()])))
        return {cur_file, cur_line};
    }
  }
  return {"", 0};
}

// A function symbol of the cubin as C++ reads it: "$kernel$callee" is the callee's copy for that
// kernel.
std::string function_text(const std::string& symbol) {
  auto readable = [](const std::string& mangled) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
    return status == 0 && d ? std::string(d.get()) : mangled;
  };
  if (symbol.size() > 1 && symbol[0] == '$') {
    const size_t second = symbol.find('$', 1);
    if (second != std::string::npos)
      return "function " + readable(symbol.substr(second + 1)) + " (as kernel " + readable(symbol.substr(1, second - 1)) +
             " calls it)";
  }
  return "function " + readable(symbol);
}

// Local memory per thread, read from the cubin (what the driver sizes a launch's by).
std::optional<Violation> check_local_memory(const CompileResult& r, int64_t max_stack_bytes) {
  if (!r.local_bytes)
    return Violation{"max_stack_bytes", "the cubin's per-function local memory (.nv.info) could not be read, so its stack "
                                        "sizes are unknown"};
  // (ptxas's frames as its log gives them count too: a recursive callee's frame is in the log only.)
  std::map<std::string, int64_t> frames = *r.local_bytes;
  for (const auto& [fn, k] : r.resources) frames[fn] = std::max(frames[fn], k.stack_bytes);
  for (const auto& [fn, bytes] : frames)
    if (bytes > max_stack_bytes)
      return Violation{"max_stack_bytes",
                       function_text(fn) + " needs " + std::to_string(bytes) +
                           " bytes of local memory per thread (its stack frame; a kernel's with its callees'), the rules "
                           "allow " + std::to_string(max_stack_bytes) +
                           ": the driver holds a launch's local memory for every thread the GPU can run at once (2048 per "
                           "SM: " + std::to_string(bytes) + " x 270336 bytes on a 132-SM H100), beside the scratch cap, for "
                           "the rest of the process (keep per-thread arrays small; use shared memory or a scratch buffer)"};
  return std::nullopt;
}

Violation at_symbol(const std::string& rule, const std::string& ptx, const std::string& symbol, const std::string& what) {
  auto [file, line] = where_named(ptx, symbol);
  std::string where = file.empty() ? "PTX" : file + ":" + std::to_string(line);
  return Violation{rule, where + ": " + what + " (found in the compiled code)", file, line};
}

}  // namespace

std::optional<Violation> Rules::check_compiled(const CompileResult& r) const {
  // What the compiled code is, whatever the source spelled: its kernels, the functions it calls.
  const PtxModule m = scan_ptx(r.ptx);
  for (const auto& e : m.entries())
    if (reserved_kernel_name(e))
      return Violation{"reserved_name", "kernel " + e + ": names beginning with " + kReservedKernelPrefix +
                                            " belong to the checker's own kernels (rename the kernel)"};
  // The device heap (malloc, free, operator new/delete, ...): what the PTX declares and calls and
  // what the cubin leaves for the driver to resolve.
  std::set<std::string> called = m.externs;
  for (const auto& t : m.call_targets)  // (an .alias of a function of the module is the module's)
    if (auto f = m.functions.find(t); (f == m.functions.end() || !f->second.defined) && !m.variables.count(t)) called.insert(t);
  for (const auto& u : cubin_undefined_functions(r.cubin)) called.insert(u);
  for (const auto& c : called)
    if (is_heap_symbol(c))
      return at_symbol("device_malloc", r.ptx, c,
                       "calls " + c + ", the device heap (state that outlives a call must be a declared scratch buffer)");
  for (const auto& c : called)
    if (!is_allowed_extern(c))
      return at_symbol("extern_function", r.ptx, c, "calls " + c + ", a function outside the bundle the rules do not allow");

  // PTX backstop: constructs hidden behind macros or templates. -lineinfo gives .loc lines.
  std::map<int, std::string> files;
  // File and line numbers of at most 9 digits, so they convert without overflow (inline asm can
  // write such lines too).
  static const re2::RE2 file_re(R"re(^\s*\.file\s+(\d{1,9})\s+"([^"]+)")re", ca::byte_regex_options());
  static const re2::RE2 loc_re(R"(^\s*\.loc\s+(\d{1,9})\s+(\d{1,9}))", ca::byte_regex_options());
  std::istringstream in(r.ptx);
  std::string line;
  std::string cur_file;
  int cur_line = 0;
  while (std::getline(in, line)) {
    int num = 0, at_line = 0;
    std::string path;
    if (re2::RE2::PartialMatch(line, file_re, &num, &path)) {
      files[num] = path.substr(path.find_last_of('/') + 1);
      continue;
    }
    if (re2::RE2::PartialMatch(line, loc_re, &num, &at_line)) {
      cur_file = files[num];
      cur_line = at_line;
      continue;
    }
    for (const auto& rule : forbidden) {
      if (!rule.ptx || !re2::RE2::PartialMatch(line, *rule.ptx)) continue;
      std::string where = cur_file.empty() ? "PTX" : cur_file + ":" + std::to_string(cur_line);
      return Violation{rule.rule, where + ": " + rule.why + " (found in the PTX)", cur_file, cur_line};
    }
  }
  // The same patterns over the instructions as ptxas reads them (comments gone, an instruction's
  // lines joined, whitespace one space, none around a dot): a line break cannot split a match.
  for (const auto& ins : m.instructions)
    for (const auto& rule : forbidden)
      if (rule.ptx && re2::RE2::PartialMatch(ins, *rule.ptx))
        return Violation{rule.rule, "PTX: " + rule.why + " (found in the PTX: " + (ins.size() > 80 ? ins.substr(0, 80) + "..." : ins) + ")"};
  // Module memory the executor restores before every call: __device__ and __constant__ alike.
  const int64_t module_bytes = r.module_global_bytes + r.module_constant_bytes;
  if (module_bytes > max_module_global_bytes)
    return Violation{"max_module_global_bytes",
                     "module-scope __device__ and __constant__ memory is " + std::to_string(module_bytes) + " bytes (" +
                         std::to_string(r.module_global_bytes) + " + " + std::to_string(r.module_constant_bytes) +
                         "), the rules allow " + std::to_string(max_module_global_bytes) +
                         " (state across calls must be a declared scratch buffer)"};
  return check_local_memory(r, max_stack_bytes);
}

std::optional<Violation> Rules::check_bound(const BoundPlan& bound, const IoSpec& io) const {
  // Launches (and library calls) per call, repeats unrolled: the count the rule is about.
  if (static_cast<int64_t>(bound.forward.size()) > max_forward_steps)
    return Violation{"max_forward_steps", "forward runs " + std::to_string(bound.forward.size()) +
                                              " steps per call once its repeats are unrolled, the rules allow " +
                                              std::to_string(max_forward_steps)};
  if (static_cast<int64_t>(bound.init.size()) > max_init_steps)
    return Violation{"max_init_steps", "init runs " + std::to_string(bound.init.size()) +
                                           " steps once its repeats are unrolled, the rules allow " + std::to_string(max_init_steps)};
  const int64_t scratch = bound.scratch_bytes();
  if (scratch_cap_by_judge) return std::nullopt;
  const ScratchCap cap = scratch_cap_for(io);
  if (scratch > cap.bytes)
    return Violation{cap.rule, "scratch buffers total " + std::to_string(scratch) + " bytes, the rules allow " +
                                   std::to_string(cap.bytes) + " (" + cap.how + ")"};
  return std::nullopt;
}

namespace {

// A factor as the rules file would write it: 4, 2.5.
std::string factor_text(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// a * b + c in bytes, at most INT64_MAX (a peak of petabytes times a factor does not wrap).
int64_t scaled_bytes(double factor, int64_t bytes, int64_t slack) {
  const long double v = static_cast<long double>(factor) * static_cast<long double>(bytes) + static_cast<long double>(slack);
  return v >= static_cast<long double>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v);
}

}  // namespace

Json ScratchCap::to_json() const {
  Json j{{"bytes", bytes}, {"from", from}};
  if (peak) j["peak_bytes"] = peak->bytes;
  return j;
}

ScratchCap Rules::scratch_cap_for(const IoSpec& io) const {
  ScratchCap cap;
  cap.peak = io.reference_peak;
  const int64_t io_bytes = io.io_bytes();
  const int64_t floor = scaled_bytes(max_scratch_ratio, io_bytes, max_scratch_slack_bytes);
  const std::string slack = " + " + std::to_string(max_scratch_slack_bytes) + " slack";
  const std::string floor_how = factor_text(max_scratch_ratio) + " x the task's input and output bytes " + std::to_string(io_bytes) + slack;
  if (scratch_cap == "reference_peak" && cap.peak) {
    const int64_t by_peak = scaled_bytes(scratch_peak_factor, cap.peak->bytes, max_scratch_slack_bytes);
    const std::string peak_how =
        factor_text(scratch_peak_factor) + " x the reference's peak memory " + std::to_string(cap.peak->bytes) +
        (cap.peak->from == "worker" ? " (measured by the judge's worker when it loaded the task)"
                                    : " (as the task record states it, reference.peak_bytes: no worker measured it here)") +
        slack;
    if (by_peak > floor) {
      cap.bytes = by_peak;
      cap.from = cap.peak->from == "worker" ? "reference_peak" : "task_record";
      cap.rule = "scratch_peak_factor";
      cap.how = peak_how + "; the floor is " + floor_how;
      return cap;
    }
    cap.bytes = floor;
    cap.from = "io_ratio";
    cap.rule = "max_scratch_ratio";
    cap.how = floor_how + ", above " + peak_how;
    return cap;
  }
  cap.bytes = floor;
  cap.from = "io_ratio";
  cap.rule = "max_scratch_ratio";
  cap.how = floor_how + (scratch_cap == "io_ratio"
                             ? "; the rules' scratch_cap is io_ratio"
                             : "; the reference's peak memory is not known here: the task record states no reference.peak_bytes "
                               "(ops-synth import and filter write it; a GPU judge's worker measures it when it loads the task)");
  return cap;
}

}  // namespace ca::bundle
