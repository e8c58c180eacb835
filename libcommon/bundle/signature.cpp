// A small Itanium demangler for kernel parameter lists: builtin types, pointers, cv-qualifiers,
// named types (__half, float4), nested names, templates with literal or type arguments, and the
// S_/T_ back-references that appear in such names.
#include "libcommon/bundle/signature.hpp"

#include <cctype>
#include <map>

#include "libcommon/byte_regex.hpp"

namespace ca::bundle {

namespace {

struct Type {
  std::string base;        // "float", "__half", "float4", "unknown"
  int pointer_depth = 0;
  bool pointee_const = false;
};

struct ScalarInfo {
  const char* text;
  ParamType::Kind kind;
  const char* dtype;
  int size;
  int lanes;
};

const std::map<std::string, ScalarInfo>& scalars() {
  static const std::map<std::string, ScalarInfo> m = {
      {"bool", {"bool", ParamType::kInteger, "BOOL", 1, 1}},
      {"char", {"char", ParamType::kInteger, "I8", 1, 1}},
      {"signed char", {"signed char", ParamType::kInteger, "I8", 1, 1}},
      {"unsigned char", {"unsigned char", ParamType::kInteger, "U8", 1, 1}},
      {"short", {"short", ParamType::kInteger, "I16", 2, 1}},
      {"unsigned short", {"unsigned short", ParamType::kInteger, "U16", 2, 1}},
      {"int", {"int", ParamType::kInteger, "I32", 4, 1}},
      {"unsigned int", {"unsigned int", ParamType::kInteger, "U32", 4, 1}},
      {"long", {"long", ParamType::kInteger, "I64", 8, 1}},
      {"unsigned long", {"unsigned long", ParamType::kInteger, "U64", 8, 1}},
      {"long long", {"long long", ParamType::kInteger, "I64", 8, 1}},
      {"unsigned long long", {"unsigned long long", ParamType::kInteger, "U64", 8, 1}},
      {"float", {"float", ParamType::kFloat, "F32", 4, 1}},
      {"double", {"double", ParamType::kFloat, "F64", 8, 1}},
      {"__half", {"__half", ParamType::kOther, "F16", 2, 1}},
      {"half", {"half", ParamType::kOther, "F16", 2, 1}},
      {"__half2", {"__half2", ParamType::kOther, "F16", 4, 2}},
      {"__nv_bfloat16", {"__nv_bfloat16", ParamType::kOther, "BF16", 2, 1}},
      {"__nv_bfloat162", {"__nv_bfloat162", ParamType::kOther, "BF16", 4, 2}},
      {"__nv_fp8_e4m3", {"__nv_fp8_e4m3", ParamType::kOther, "F8_E4M3", 1, 1}},
      {"__nv_fp8_e5m2", {"__nv_fp8_e5m2", ParamType::kOther, "F8_E5M2", 1, 1}},
      {"float2", {"float2", ParamType::kOther, "F32", 8, 2}},
      {"float4", {"float4", ParamType::kOther, "F32", 16, 4}},
      {"double2", {"double2", ParamType::kOther, "F64", 16, 2}},
      {"int2", {"int2", ParamType::kOther, "I32", 8, 2}},
      {"int4", {"int4", ParamType::kOther, "I32", 16, 4}},
      {"uint4", {"uint4", ParamType::kOther, "U32", 16, 4}},
      {"void", {"void", ParamType::kOther, "", 0, 1}},
  };
  return m;
}

class Demangler {
 public:
  explicit Demangler(const std::string& s) : s_(s) {}

  std::optional<KernelSignature> run() {
    KernelSignature sig;
    sig.mangled = s_;
    if (s_.rfind("_Z", 0) != 0) return std::nullopt;
    pos_ = 2;
    if (peek() == 'L') ++pos_;  // internal linkage
    bool templated = false;
    if (peek() == 'N') {
      ++pos_;
      std::string last;
      while (peek() != 'E') {
        if (eof()) return std::nullopt;
        if (peek() == 'I') {
          if (!template_args()) return std::nullopt;
          templated = true;
          continue;
        }
        last = source_name();
        if (last.empty()) return std::nullopt;
        templated = false;
      }
      ++pos_;
      sig.name = last;
    } else {
      sig.name = source_name();
      if (sig.name.empty()) return std::nullopt;
      if (peek() == 'I') {
        subs_.push_back(Type{sig.name});
        if (!template_args()) return std::nullopt;
        templated = true;
      }
    }
    if (templated) {  // a template function's encoding starts with its return type
      Type ret;
      if (!type(ret)) return std::nullopt;
    }
    while (!eof()) {
      Type t;
      if (!type(t)) return std::nullopt;
      if (t.base == "void" && t.pointer_depth == 0) break;  // f(void)
      sig.params.push_back(to_param(t));
    }
    sig.from_mangled = true;
    return sig;
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool eof() const { return pos_ >= s_.size(); }

  std::string source_name() {
    size_t start = pos_;
    while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    if (start == pos_) return "";
    size_t len = std::stoul(s_.substr(start, pos_ - start));
    if (pos_ + len > s_.size()) return "";
    std::string name = s_.substr(pos_, len);
    pos_ += len;
    return name;
  }

  // I <arg>+ E; literal arguments L<type><value>E; type arguments are remembered for T_.
  bool template_args() {
    ++pos_;  // I
    std::vector<Type> args;
    while (peek() != 'E') {
      if (eof()) return false;
      if (peek() == 'L') {
        ++pos_;
        while (!eof() && peek() != 'E') ++pos_;
        if (eof()) return false;
        ++pos_;
        args.push_back(Type{"literal"});
      } else if (peek() == 'X') {  // an expression argument: skip to the matching E
        int depth = 0;
        while (!eof()) {
          char c = s_[pos_++];
          if (c == 'X' || c == 'I') ++depth;
          if (c == 'E' && --depth == 0) break;
        }
        args.push_back(Type{"expression"});
      } else {
        Type t;
        if (!type(t)) return false;
        args.push_back(t);
      }
    }
    ++pos_;  // E
    template_params_ = args;
    return true;
  }

  bool builtin(char c, std::string& out) {
    static const std::map<char, const char*> b = {
        {'v', "void"},      {'b', "bool"},          {'c', "char"},   {'a', "signed char"}, {'h', "unsigned char"},
        {'s', "short"},     {'t', "unsigned short"}, {'i', "int"},    {'j', "unsigned int"}, {'l', "long"},
        {'m', "unsigned long"}, {'x', "long long"}, {'y', "unsigned long long"}, {'f', "float"}, {'d', "double"}};
    auto it = b.find(c);
    if (it == b.end()) return false;
    out = it->second;
    return true;
  }

  // long: one case per production of the Itanium grammar's <type>, dispatched on its first letter
  bool type(Type& t) {
    char c = peek();
    std::string b;
    if (builtin(c, b)) {
      ++pos_;
      t.base = b;
      return true;
    }
    if (c == 'D') {  // Dh = half-precision _Float16-like; DF16_ = _Float16
      if (s_.compare(pos_, 2, "Dh") == 0) {
        pos_ += 2;
        t.base = "__half";
        return true;
      }
      if (s_.compare(pos_, 5, "DF16_") == 0) {
        pos_ += 5;
        t.base = "__half";
        return true;
      }
      return false;
    }
    if (c == 'P') {
      ++pos_;
      Type inner;
      if (!type(inner)) return false;
      t = inner;
      if (t.pointer_depth == 0) {
        // constness of the pointee was set by K below
      }
      t.pointer_depth += 1;
      subs_.push_back(t);
      return true;
    }
    if (c == 'K' || c == 'V' || c == 'r') {
      bool is_const = false;
      while (peek() == 'K' || peek() == 'V' || peek() == 'r') {
        if (peek() == 'K') is_const = true;
        ++pos_;
      }
      Type inner;
      if (!type(inner)) return false;
      t = inner;
      if (is_const && t.pointer_depth == 0) t.pointee_const = true;
      subs_.push_back(t);
      return true;
    }
    if (c == 'S') {  // substitution S_ or S<seq-id>_
      ++pos_;
      size_t index = 0;
      if (peek() == '_') {
        ++pos_;
      } else {
        size_t start = pos_;
        while (std::isalnum(static_cast<unsigned char>(peek()))) ++pos_;
        if (peek() != '_') return false;
        std::string seq = s_.substr(start, pos_ - start);
        ++pos_;
        size_t v = 0;
        for (char ch : seq) v = v * 36 + (std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0' : ch - 'A' + 10);
        index = v + 1;
      }
      if (index >= subs_.size()) return false;
      t = subs_[index];
      return true;
    }
    if (c == 'T') {  // template parameter T_ / T<n>_
      ++pos_;
      size_t index = 0;
      if (peek() != '_') {
        size_t start = pos_;
        while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
        index = std::stoul(s_.substr(start, pos_ - start)) + 1;
      }
      if (peek() != '_') return false;
      ++pos_;
      if (index >= template_params_.size()) return false;
      t = template_params_[index];
      subs_.push_back(t);
      return true;
    }
    if (c == 'N') {  // nested named type: take the last component
      ++pos_;
      std::string last;
      while (peek() != 'E') {
        if (eof()) return false;
        if (peek() == 'I') {
          if (!template_args()) return false;
          continue;
        }
        last = source_name();
        if (last.empty()) return false;
        subs_.push_back(Type{last});
      }
      ++pos_;
      t.base = last;
      return true;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      t.base = source_name();
      if (t.base.empty()) return false;
      subs_.push_back(t);
      if (peek() == 'I') {
        if (!template_args()) return false;
        t.base = "unknown";
        subs_.push_back(t);
      }
      return true;
    }
    return false;
  }

  static ParamType to_param(const Type& t) {
    ParamType p;
    auto it = scalars().find(t.base);
    if (t.pointer_depth > 0) {
      p.kind = t.pointer_depth == 1 ? ParamType::kPointer : ParamType::kOther;
      p.is_const = t.pointee_const;
      p.size_bytes = 8;
      if (it != scalars().end()) {
        p.dtype = it->second.dtype;
        p.lanes = it->second.lanes;
      } else {
        p.dtype = "?";
      }
      p.text = std::string(t.pointee_const ? "const " : "") + t.base + std::string(t.pointer_depth, '*');
      return p;
    }
    p.text = t.base;
    if (it != scalars().end()) {
      p.kind = it->second.kind;
      p.dtype = it->second.dtype;
      p.size_bytes = it->second.size;
      p.lanes = it->second.lanes;
    }
    return p;
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::vector<Type> subs_;
  std::vector<Type> template_params_;
};

}  // namespace

std::optional<KernelSignature> demangle_kernel(const std::string& mangled) {
  try {
    return Demangler(mangled).run();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<KernelSignature> ptx_signature(const std::string& ptx, const std::string& mangled) {
  std::string needle = ".entry " + mangled + "(";
  size_t at = ptx.find(needle);
  if (at == std::string::npos) return std::nullopt;
  size_t end = ptx.find(')', at);
  if (end == std::string::npos) return std::nullopt;
  std::string list = ptx.substr(at + needle.size(), end - at - needle.size());
  KernelSignature sig;
  sig.mangled = mangled;
  sig.name = mangled;
  static const re2::RE2 param(R"(\.param\s+(?:\.align\s+\d+\s+)?\.(\w+))", ca::byte_regex_options());
  re2::StringPiece rest(list);
  std::string ty;
  while (re2::RE2::FindAndConsume(&rest, param, &ty)) {
    ParamType p;
    p.text = "." + ty;
    if (ty == "u64" || ty == "b64" || ty == "s64") {
      p.kind = ParamType::kOther;  // a pointer or a 64-bit integer: PTX does not say which
      p.size_bytes = 8;
    } else if (ty == "f32" || ty == "f64") {
      p.kind = ParamType::kFloat;
      p.size_bytes = ty == "f32" ? 4 : 8;
    } else if (ty == "u32" || ty == "s32" || ty == "b32" || ty == "u16" || ty == "s16" || ty == "b16" || ty == "u8" ||
               ty == "s8" || ty == "b8") {
      p.kind = ParamType::kInteger;
      p.size_bytes = ty.back() == '2' ? 4 : ty.back() == '6' ? 2 : 1;
    } else {
      p.kind = ParamType::kOther;
    }
    sig.params.push_back(p);
  }
  return sig;
}

}  // namespace ca::bundle
