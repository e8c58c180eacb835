// The PTX read as ptxas reads it: lexing, words, functions, the call graph, precision classes.
#include "libcommon/bundle/ptx_scan.hpp"

#include <algorithm>
#include <cctype>
#include <deque>

#include "libcommon/byte_regex.hpp"

namespace ca::bundle {

namespace {

// Bytes that can only separate tokens: whitespace of every kind, control bytes, and anything past
// ASCII (ptxas accepts no such byte inside a token, so treating it as a separator is the safe side).
bool ignorable(unsigned char c) { return c <= 0x20 || c >= 0x7f; }
bool ident_char(unsigned char c) { return std::isalnum(c) || c == '_' || c == '$' || c == '%'; }

// The words of a text: runs of identifier characters and dots ("mma.sync.aligned", ".reg",
// "%r1", "_Z1kPf"), "::" kept inside ("kind::f16"). Whitespace next to a dot does not end a word:
// ptxas reads "mma\n  .sync .aligned" as one opcode. A number before a dot does not join
// (".address_size 64\n.extern": two words).
std::vector<std::string> words_of(const std::string& t, size_t begin, size_t end) {
  std::vector<std::string> out;
  size_t i = begin;
  while (i < end) {
    unsigned char c = static_cast<unsigned char>(t[i]);
    if (!ident_char(c) && c != '.') {
      ++i;
      continue;
    }
    std::string w;
    for (;;) {
      while (i < end) {
        unsigned char d = static_cast<unsigned char>(t[i]);
        if (ident_char(d) || d == '.') {
          w += static_cast<char>(d);
          ++i;
        } else if (d == ':' && i + 1 < end && t[i + 1] == ':') {
          w += "::";
          i += 2;
        } else {
          break;
        }
      }
      // Whitespace, then a dot: the same word, unless it is a number. A word ending in a dot goes on
      // past whitespace to its next part.
      size_t k = i;
      while (k < end && ignorable(static_cast<unsigned char>(t[k]))) ++k;
      if (k >= end || w.empty() || std::isdigit(static_cast<unsigned char>(w[0]))) break;
      if (w.back() == '.' && k > i && ident_char(static_cast<unsigned char>(t[k]))) {
        i = k;
        continue;
      }
      if (t[k] == '.' && k > i) {
        i = k;
        continue;
      }
      break;
    }
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<std::string> split_dots(const std::string& w) {
  std::vector<std::string> parts;
  size_t b = 0;
  for (;;) {
    size_t e = w.find('.', b);
    parts.push_back(w.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return parts;
}

// An instruction word: begins with a letter ("mma.sync...", "cvt.rn.f16.f32"), never a directive
// (".reg .f16 h" declares, it does not compute), a register, a label or a number.
bool instruction_word(const std::string& w) {
  return !w.empty() && std::isalpha(static_cast<unsigned char>(w[0])) && w.find('.') != std::string::npos;
}

int rank_of(const std::string& p) {
  const auto& o = precision_order();
  auto it = std::find(o.begin(), o.end(), p);
  return it == o.end() ? static_cast<int>(o.size()) - 1 : static_cast<int>(it - o.begin());
}

bool is_fp8_type(std::string t) {
  for (const char* suffix : {"x2", "x4"})
    if (t.size() > 2 && t.compare(t.size() - 2, 2, suffix) == 0) t.resize(t.size() - 2);
  static const std::set<std::string> narrow = {"e4m3", "e5m2", "e2m1", "e3m2", "e2m3", "ue8m0", "ue4m3",
                                               "f8f6f4", "mxf8f6f4", "mxf4", "mxf4nvf4", "f6", "f4"};
  return narrow.count(t) > 0;
}

bool is_narrow_int(const std::string& t) { return t == "s8" || t == "u8" || t == "s4" || t == "u4" || t == "b1" || t == "i8"; }
bool is_float_type(const std::string& t) {
  return t == "f16" || t == "f16x2" || t == "bf16" || t == "bf16x2" || t == "tf32" || t == "f32" || t == "f64" || is_fp8_type(t);
}
bool is_type(const std::string& t) {
  if (is_float_type(t) || is_narrow_int(t)) return true;
  static const std::set<std::string> ints = {"s16", "s32", "s64", "u16", "u32", "u64", "b8", "b16", "b32", "b64", "b128", "pred"};
  return ints.count(t) > 0;
}

// The structure of one reading of the PTX (one way of lexing its strings).
struct Reading {
  PtxModule m;
  std::set<std::string> seen_instructions;
};

std::string name_after(const std::string& s, size_t pos, size_t end) {
  // Skip whitespace and a parenthesized return list, then read the name.
  auto skip = [&] {
    while (pos < end && ignorable(static_cast<unsigned char>(s[pos]))) ++pos;
  };
  skip();
  if (pos < end && s[pos] == '(') {
    int depth = 0;
    for (; pos < end; ++pos) {
      if (s[pos] == '(') ++depth;
      else if (s[pos] == ')' && --depth == 0) {
        ++pos;
        break;
      }
    }
    skip();
  }
  size_t b = pos;
  while (pos < end && ident_char(static_cast<unsigned char>(s[pos]))) ++pos;
  return s.substr(b, pos - b);
}

// Where in a head (text before a body) the directive `.entry` or `.func` stands, or npos. A
// directive is a dot, optional whitespace, the name, and no identifier character after it.
size_t directive_at(const std::string& s, size_t begin, size_t end, const std::string& name) {
  for (size_t i = begin; i < end; ++i) {
    if (s[i] != '.') continue;
    size_t k = i + 1;
    while (k < end && ignorable(static_cast<unsigned char>(s[k]))) ++k;
    if (s.compare(k, name.size(), name) != 0 || k + name.size() > end) continue;
    size_t after = k + name.size();
    if (after < end && ident_char(static_cast<unsigned char>(s[after]))) continue;
    return after;
  }
  return std::string::npos;
}

void scan_body(const std::string& s, size_t b, size_t e, PtxFunction& f, Reading& r) {
  for (const auto& w : words_of(s, b, e)) {
    if (instruction_word(w)) {
      f.precision = lower_precision(f.precision, instruction_precision(w));
      f.refs.insert(w.substr(0, w.find('.')));
    } else if (!w.empty() && w[0] == '.') {
      for (const auto& part : split_dots(w))
        if (part == "callprototype" || part == "calltargets") f.indirect_call = true;
    } else {
      f.refs.insert(w.substr(0, w.find('.')));
    }
  }
  // Instructions, for the call targets and the rules' PTX patterns. call[.uni] [(ret),] target, ...
  // The opcode ends at a space or the return list's parenthesis: a name that starts with "call"
  // (a variable calls_made, a function callback) is no call (session 34: "calls_made" read as a
  // call of "s_made", an extern the rules refuse, in an honest kernel).
  static const re2::RE2 call_re(
      R"((?:^|[^A-Za-z0-9_$%.])call(?:\.[A-Za-z0-9_]+)*(?: (?:\([^)]*\) ?, ?)?|\([^)]*\) ?, ?)([A-Za-z0-9_$%]+))",
      ca::byte_regex_options());
  size_t pos = b;
  while (pos < e) {
    size_t semi = s.find(';', pos);
    if (semi == std::string::npos || semi > e) semi = e;
    std::string ins = normalize_instruction(s.substr(pos, semi - pos));
    pos = semi + 1;
    if (ins.empty()) continue;
    re2::StringPiece in(ins);
    std::string target;
    while (re2::RE2::FindAndConsume(&in, call_re, &target)) {
      if (target[0] == '%') {
        f.indirect_call = true;  // through a register
      } else {
        f.callees.insert(target);
        r.m.call_targets.insert(target);
      }
    }
    if (r.seen_instructions.insert(ins).second) r.m.instructions.push_back(ins);
  }
}

void finish_statement(const std::string& s, size_t b, size_t brace, size_t e, Reading& r) {
  const size_t head_end = brace == std::string::npos ? e : brace;
  size_t after = directive_at(s, b, head_end, "entry");
  bool entry = after != std::string::npos;
  if (!entry) after = directive_at(s, b, head_end, "func");
  if (after != std::string::npos) {
    std::string name = name_after(s, after, head_end);
    if (name.empty()) return;
    PtxFunction& f = r.m.functions[name];
    f.name = name;
    f.entry = f.entry || entry;
    bool external = directive_at(s, b, head_end, "extern") != std::string::npos;
    f.external = f.external || external;
    if (external) r.m.externs.insert(name);
    if (brace != std::string::npos) {
      f.defined = true;
      scan_body(s, brace + 1, e, f, r);
    }
    return;
  }
  // `.alias a, b;`: a call of a runs b.
  if (size_t at = directive_at(s, b, head_end, "alias"); at != std::string::npos) {
    std::vector<std::string> names;
    for (const auto& w : words_of(s, at, head_end))
      if (!w.empty() && w[0] != '.') names.push_back(w.substr(0, w.find('.')));
    if (names.size() >= 2) r.m.variables[names[0]].insert(names[1]);
    return;
  }
  // A module variable: the names its initializer holds (function pointers, other variables).
  const size_t eq = static_cast<size_t>(std::find(s.begin() + b, s.begin() + e, '=') - s.begin());
  if (eq >= e) return;
  std::string name;
  for (const auto& w : words_of(s, b, eq))
    if (!w.empty() && (std::isalpha(static_cast<unsigned char>(w[0])) || w[0] == '_' || w[0] == '$')) name = w.substr(0, w.find('.'));
  if (name.empty()) return;
  auto& refs = r.m.variables[name];
  for (const auto& w : words_of(s, eq + 1, e))
    if (!w.empty() && w[0] != '.') refs.insert(w.substr(0, w.find('.')));
}

Reading read_module(const std::string& ptx, bool escapes, bool multiline) {
  Reading r;
  const std::string s = strip_ptx_comments(ptx, escapes, multiline);
  size_t start = 0, brace = std::string::npos;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '{') {
      if (depth == 0 && brace == std::string::npos) brace = i;
      ++depth;
    } else if (c == '}') {
      if (depth > 0) --depth;
      // A body closes its statement; an initializer's braces ("= {1, 2}") run on to the ';'.
      if (depth == 0 && brace != std::string::npos && std::find(s.begin() + start, s.begin() + brace, '=') == s.begin() + brace) {
        finish_statement(s, start, brace, i, r);
        start = i + 1;
        brace = std::string::npos;
      }
    } else if (c == ';' && depth == 0) {
      finish_statement(s, start, brace, i, r);
      start = i + 1;
      brace = std::string::npos;
    }
  }
  if (start < s.size()) finish_statement(s, start, brace, s.size(), r);
  return r;
}

}  // namespace

const std::vector<std::string>& precision_order() {
  static const std::vector<std::string> order = {"fp8", "int8", "fp16", "bf16", "tf32", "fp32"};
  return order;
}

std::string lower_precision(const std::string& a, const std::string& b) {
  return precision_order()[static_cast<size_t>(std::min(rank_of(a), rank_of(b)))];
}

std::string instruction_precision(const std::string& word) {
  std::vector<std::string> parts = split_dots(word);
  const std::string& base = parts[0];
  std::string p = "fp32";
  auto has = [&](const std::string& m) { return std::find(parts.begin() + 1, parts.end(), m) != parts.end(); };
  const bool mma_family = base == "mma" || base == "wmma" || base == "wgmma" || base == "tcgen05";
  const bool mma_op = base == "mma" || (base == "wmma" && has("mma")) || (base == "wgmma" && has("mma_async")) ||
                      (base == "tcgen05" && (has("mma") || has("mma_ws")));
  std::vector<std::string> types;
  bool narrow_int = false, f64 = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    std::string t = parts[i];
    if (size_t colons = t.rfind("::"); colons != std::string::npos) t = t.substr(colons + 2);  // kind::f16
    if (is_type(t)) types.push_back(t);
    if (is_fp8_type(t)) p = lower_precision(p, "fp8");
    else if (t == "f16" || t == "f16x2") p = lower_precision(p, "fp16");
    else if (t == "bf16" || t == "bf16x2") p = lower_precision(p, "bf16");
    else if (t == "tf32") p = lower_precision(p, "tf32");
    else if (is_narrow_int(t)) {
      narrow_int = true;
      if (mma_family) p = lower_precision(p, "int8");
    } else if (t == "f64") f64 = true;
  }
  // dp4a/dp2a, and the four-lane byte SIMD instructions (__vadd4, __vabsdiff4, ...).
  static const std::set<std::string> byte_ops = {"dp4a", "dp2a", "vadd4", "vsub4", "vavrg4", "vabsdiff4", "vmin4", "vmax4", "vset4"};
  if (byte_ops.count(base)) p = lower_precision(p, "int8");
  // cvt.dtype.atype: a float (or a packing of integers) made 8-bit is int8 quantization.
  if (base == "cvt" && narrow_int && !types.empty() && is_narrow_int(types[0]) &&
      (has("pack") || (types.size() > 1 && is_float_type(types[1]))))
    p = lower_precision(p, "int8");
  // An MMA whose operand type is not spelled is f16: wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32
  // names only D and C. No MMA takes fp32 operands (tf32 is spelled); fp64 MMA names f64.
  if (mma_op && p == "fp32" && !f64) p = "fp16";
  return p;
}

std::vector<std::string> PtxModule::entries() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : functions)
    if (f.entry) out.push_back(name);
  return out;
}

std::string strip_ptx_comments(const std::string& ptx, bool escapes, bool multiline) {
  std::string out = ptx;
  enum { code, line_comment, block_comment, string_lit } st = code;
  for (size_t i = 0; i < ptx.size(); ++i) {
    char c = ptx[i], n = i + 1 < ptx.size() ? ptx[i + 1] : '\0';
    switch (st) {
      case code:
        if (c == '/' && n == '/') {
          st = line_comment;
          out[i] = ' ';
        } else if (c == '/' && n == '*') {
          st = block_comment;
          out[i] = out[i + 1] = ' ';
          ++i;
        } else if (c == '"') {
          st = string_lit;
          out[i] = ' ';
        }
        break;
      case line_comment:
        if (c == '\n') st = code;
        else out[i] = ' ';
        break;
      case block_comment:
        if (c == '*' && n == '/') {
          out[i] = out[i + 1] = ' ';
          ++i;
          st = code;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
      case string_lit:
        if (c == '\n' && !multiline) {
          st = code;
        } else if (c == '\\' && escapes && i + 1 < ptx.size()) {
          out[i] = ' ';
          if (n != '\n') out[i + 1] = ' ';
          ++i;
        } else if (c == '"') {
          out[i] = ' ';
          st = code;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
    }
  }
  return out;
}

std::string normalize_instruction(const std::string& text) {
  // Runs of ignorable bytes become one space, or nothing next to a dot (as words_of joins them).
  std::string s;
  size_t i = 0;
  const size_t end = text.size();
  auto last_word_numeric = [&] {
    size_t k = s.size();
    while (k > 0 && (ident_char(static_cast<unsigned char>(s[k - 1])) || s[k - 1] == '.' || s[k - 1] == ':')) --k;
    return k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]));
  };
  while (i < end) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (!ignorable(c)) {
      s += static_cast<char>(c);
      ++i;
      continue;
    }
    while (i < end && ignorable(static_cast<unsigned char>(text[i]))) ++i;
    if (s.empty() || i >= end) continue;
    const bool join = !last_word_numeric() && (text[i] == '.' || (s.back() == '.' && ident_char(static_cast<unsigned char>(text[i]))));
    if (!join) s += ' ';
  }
  // Drop what precedes the instruction: braces, labels ("$L__BB0_1:"), the guard ("@!%p1").
  for (;;) {
    size_t b = s.find_first_not_of(' ');
    if (b == std::string::npos) return "";
    s.erase(0, b);
    if (s[0] == '{' || s[0] == '}') {
      s.erase(0, 1);
      continue;
    }
    if (s[0] == '@') {
      size_t k = 1;
      if (k < s.size() && s[k] == '!') ++k;
      while (k < s.size() && ident_char(static_cast<unsigned char>(s[k]))) ++k;
      s.erase(0, k);
      continue;
    }
    size_t k = 0;
    while (k < s.size() && ident_char(static_cast<unsigned char>(s[k]))) ++k;
    size_t colon = s.find_first_not_of(' ', k);
    if (k > 0 && colon != std::string::npos && s[colon] == ':' && (colon + 1 >= s.size() || s[colon + 1] != ':')) {
      s.erase(0, colon + 1);
      continue;
    }
    break;
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

PtxModule scan_ptx(const std::string& ptx) {
  PtxModule merged;
  std::set<std::string> seen;
  for (bool escapes : {true, false})
    for (bool multiline : {false, true}) {
      Reading r = read_module(ptx, escapes, multiline);
      for (auto& [name, f] : r.m.functions) {
        PtxFunction& g = merged.functions[name];
        g.name = name;
        g.entry = g.entry || f.entry;
        g.defined = g.defined || f.defined;
        g.external = g.external || f.external;
        g.precision = lower_precision(g.precision, f.precision);
        g.refs.insert(f.refs.begin(), f.refs.end());
        g.callees.insert(f.callees.begin(), f.callees.end());
        g.indirect_call = g.indirect_call || f.indirect_call;
      }
      for (auto& [name, refs] : r.m.variables) merged.variables[name].insert(refs.begin(), refs.end());
      merged.externs.insert(r.m.externs.begin(), r.m.externs.end());
      merged.call_targets.insert(r.m.call_targets.begin(), r.m.call_targets.end());
      for (auto& ins : r.m.instructions)
        if (seen.insert(ins).second) merged.instructions.push_back(ins);
    }
  return merged;
}

std::set<std::string> reachable_functions(const PtxModule& m, const std::string& kernel) {
  std::set<std::string> seen{kernel}, functions;
  std::deque<std::string> todo{kernel};
  bool indirect = false;
  while (!todo.empty()) {
    std::string n = todo.front();
    todo.pop_front();
    // A name can be a function and an alias at once (`.func f(...);` then `.alias f, g;`).
    if (auto f = m.functions.find(n); f != m.functions.end()) {
      functions.insert(n);
      indirect = indirect || f->second.indirect_call;
      for (const auto& r : f->second.refs)
        if (seen.insert(r).second) todo.push_back(r);
    }
    if (auto v = m.variables.find(n); v != m.variables.end())
      for (const auto& r : v->second)
        if (seen.insert(r).second) todo.push_back(r);
    // A call through a register can reach any code of the module: an address can be computed
    // (a function's plus an offset lands anywhere in the module's code, a kernel never launched
    // included), so every function and kernel counts.
    if (todo.empty() && indirect) {
      indirect = false;
      for (const auto& [name, f] : m.functions)
        if (seen.insert(name).second) todo.push_back(name);
    }
  }
  return functions;
}

std::map<std::string, std::string> kernel_precisions(const PtxModule& m, const std::vector<std::string>& kernels) {
  std::string module_lowest = "fp32";
  for (const auto& [name, f] : m.functions) module_lowest = lower_precision(module_lowest, f.precision);
  std::map<std::string, std::string> out;
  for (const auto& k : kernels) {
    auto it = m.functions.find(k);
    if (it == m.functions.end() || !it->second.entry) {
      out[k] = module_lowest;
      continue;
    }
    std::string p = "fp32";
    for (const auto& f : reachable_functions(m, k)) p = lower_precision(p, m.functions.at(f).precision);
    out[k] = p;
  }
  return out;
}

bool is_heap_symbol(const std::string& n) {
  static const std::set<std::string> names = {"malloc", "free", "realloc", "calloc", "aligned_alloc", "memalign",
                                              "posix_memalign", "__nv_aligned_device_malloc", "cudaMalloc",
                                              "cudaFree", "cudaMallocAsync", "cudaFreeAsync"};
  if (names.count(n)) return true;
  // operator new / new[] / delete / delete[], every overload (_Znwm, _ZnamRKSt9nothrow_t, _ZdlPvm, ...)
  for (const char* p : {"_Znw", "_Zna", "_Zdl", "_Zda"})
    if (n.rfind(p, 0) == 0) return true;
  // The driver's own services behind them (__cuda_syscall_aligned_malloc, ...).
  if (n.rfind("__cuda_syscall", 0) == 0) return true;
  return n.find("malloc") != std::string::npos || n.find("Malloc") != std::string::npos;
}

bool is_allowed_extern(const std::string& n) { return n == "vprintf" || n == "__assertfail"; }

std::string ptx_precision(const std::string& ptx) {
  // Every instruction word of the text, under every reading of its strings: what the module holds.
  std::string p = "fp32";
  for (bool escapes : {true, false})
    for (bool multiline : {false, true}) {
      const std::string s = strip_ptx_comments(ptx, escapes, multiline);
      for (const auto& w : words_of(s, 0, s.size()))
        if (instruction_word(w)) p = lower_precision(p, instruction_precision(w));
    }
  return p;
}

std::string ptx_precision(const std::string& ptx, const std::vector<std::string>& kernels) {
  std::string p = "fp32";
  for (const auto& [k, kp] : kernel_precisions(scan_ptx(ptx), kernels)) p = lower_precision(p, kp);
  return p;
}

}  // namespace ca::bundle
