// The catalog's expression language: a recursive-descent parser to a node array, and its evaluator.
#include "tools/ops-synth/expr.hpp"

#include <cctype>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace ca::ops_synth {

namespace {
struct SymbolTable {
  std::mutex mutex;
  std::unordered_map<std::string, int> ids;
  std::vector<std::string> names;
};
SymbolTable& symbols() {
  static SymbolTable table;
  return table;
}

enum BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kMod, kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr, kPow };
enum Func : uint8_t { kMin, kMax, kAbs, kCdiv, kLog2 };

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw EvalError{"division by zero"};
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }
int64_t checked(__int128 v) {
  if (v > INT64_MAX || v < INT64_MIN) throw EvalError{"integer overflow"};
  return static_cast<int64_t>(v);
}
}  // namespace

int intern_symbol(const std::string& name) {
  auto& t = symbols();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.ids.find(name);
  if (it != t.ids.end()) return it->second;
  int id = static_cast<int>(t.names.size());
  t.names.push_back(name);
  t.ids.emplace(name, id);
  return id;
}
const std::string& symbol_name(int id) {
  auto& t = symbols();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.names.at(static_cast<std::size_t>(id));
}
int symbol_count() {
  auto& t = symbols();
  std::lock_guard<std::mutex> lock(t.mutex);
  return static_cast<int>(t.names.size());
}

void Env::set(int sym, int64_t value) {
  for (auto& [s, v] : used_)
    if (s == sym) {
      v = value;
      return;
    }
  used_.emplace_back(sym, value);
}
std::optional<int64_t> Env::get(int sym) const {
  for (auto it = used_.rbegin(); it != used_.rend(); ++it)
    if (it->first == sym) return it->second;
  return std::nullopt;
}

class ExprParser {
 public:
  ExprParser(const std::string& text, Expr& out) : s_(text), e_(out) {}
  int parse_all() {
    int n = parse_or();
    skip();
    if (p_ != s_.size()) fail("unexpected '" + std::string(1, s_[p_]) + "'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw std::runtime_error("expression '" + s_ + "' at " + std::to_string(p_) + ": " + why);
  }
  void skip() {
    while (p_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[p_]))) ++p_;
  }
  bool eat(const char* tok) {
    skip();
    std::size_t n = std::char_traits<char>::length(tok);
    if (s_.compare(p_, n, tok) == 0) {
      p_ += n;
      return true;
    }
    return false;
  }
  int add(Expr::Node node) {
    e_.nodes_.push_back(std::move(node));
    return static_cast<int>(e_.nodes_.size()) - 1;
  }
  int bin(uint8_t op, int a, int b) { return add({Expr::Node::kBin, op, 0, a, b, {}}); }
  int parse_or() {
    int a = parse_and();
    while (eat("||")) a = bin(kOr, a, parse_and());
    return a;
  }
  int parse_and() {
    int a = parse_cmp();
    while (eat("&&")) a = bin(kAnd, a, parse_cmp());
    return a;
  }
  int parse_cmp() {
    int a = parse_add();
    for (;;) {
      if (eat("<=")) a = bin(kLe, a, parse_add());
      else if (eat(">=")) a = bin(kGe, a, parse_add());
      else if (eat("==")) a = bin(kEq, a, parse_add());
      else if (eat("!=")) a = bin(kNe, a, parse_add());
      else if (eat("<")) a = bin(kLt, a, parse_add());
      else if (eat(">")) a = bin(kGt, a, parse_add());
      else return a;
    }
  }
  int parse_add() {
    int a = parse_mul();
    for (;;) {
      if (eat("+")) a = bin(kAdd, a, parse_mul());
      else if (eat("-")) a = bin(kSub, a, parse_mul());
      else return a;
    }
  }
  int parse_mul() {
    int a = parse_unary();
    for (;;) {
      if (eat("**")) a = bin(kPow, a, parse_unary());
      else if (eat("*")) a = bin(kMul, a, parse_unary());
      else if (eat("//") || eat("/")) a = bin(kDiv, a, parse_unary());
      else if (eat("%")) a = bin(kMod, a, parse_unary());
      else return a;
    }
  }
  int parse_unary() {
    if (eat("-")) return add({Expr::Node::kNeg, 0, 0, parse_unary(), -1, {}});
    if (eat("!")) return add({Expr::Node::kNot, 0, 0, parse_unary(), -1, {}});
    return parse_atom();
  }
  int parse_atom() {
    skip();
    if (p_ >= s_.size()) fail("unexpected end");
    char c = s_[p_];
    if (c == '(') {
      ++p_;
      int n = parse_or();
      if (!eat(")")) fail("expected ')'");
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (p_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p_]))) v = v * 10 + (s_[p_++] - '0');
      return add({Expr::Node::kConst, 0, v, -1, -1, {}});
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t start = p_;
      while (p_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p_])) || s_[p_] == '_')) ++p_;
      std::string name = s_.substr(start, p_ - start);
      if (eat("(")) {
        static const std::unordered_map<std::string, Func> funcs = {
            {"min", kMin}, {"max", kMax}, {"abs", kAbs}, {"cdiv", kCdiv}, {"log2", kLog2}};
        auto it = funcs.find(name);
        if (it == funcs.end()) fail("unknown function '" + name + "'");
        Expr::Node node{Expr::Node::kCall, it->second, 0, -1, -1, {}};
        if (!eat(")")) {
          do node.args.push_back(parse_or());
          while (eat(","));
          if (!eat(")")) fail("expected ')' after arguments");
        }
        if (node.args.empty()) fail(name + "() needs arguments");
        return add(std::move(node));
      }
      if (name == "true") return add({Expr::Node::kConst, 0, 1, -1, -1, {}});
      if (name == "false") return add({Expr::Node::kConst, 0, 0, -1, -1, {}});
      return add({Expr::Node::kVar, 0, intern_symbol(name), -1, -1, {}});
    }
    fail("unexpected '" + std::string(1, c) + "'");
  }

  const std::string& s_;
  Expr& e_;
  std::size_t p_ = 0;
};

Expr Expr::parse(const std::string& text) {
  Expr e;
  e.text_ = text;
  ExprParser parser(text, e);
  e.root_ = parser.parse_all();
  return e;
}

int64_t Expr::eval(const Env& env) const {
  if (root_ < 0) throw EvalError{"empty expression"};
  return eval_node(root_, env);
}

bool Expr::try_eval(const Env& env, int64_t& out) const {
  try {
    out = eval(env);
    return true;
  } catch (const EvalError&) {
    return false;
  }
}

int64_t Expr::eval_node(int index, const Env& env) const {
  const Node& n = nodes_[static_cast<std::size_t>(index)];
  switch (n.kind) {
    case Node::kConst: return n.value;
    case Node::kVar: {
      auto v = env.get(static_cast<int>(n.value));
      if (!v) throw EvalError{"unknown variable '" + symbol_name(static_cast<int>(n.value)) + "' in '" + text_ + "'"};
      return *v;
    }
    case Node::kNeg: return checked(-static_cast<__int128>(eval_node(n.a, env)));
    case Node::kNot: return eval_node(n.a, env) == 0;
    case Node::kCall: {
      std::vector<int64_t> v;
      v.reserve(n.args.size());
      for (int a : n.args) v.push_back(eval_node(a, env));
      switch (n.op) {
        case kMin: { int64_t m = v[0]; for (auto x : v) m = std::min(m, x); return m; }
        case kMax: { int64_t m = v[0]; for (auto x : v) m = std::max(m, x); return m; }
        case kAbs: return v[0] < 0 ? -v[0] : v[0];
        case kCdiv: {
          if (v.size() != 2) throw EvalError{"cdiv needs 2 arguments"};
          return -floor_div(-v[0], v[1]);
        }
        case kLog2: {
          if (v[0] <= 0) throw EvalError{"log2 of a non-positive number"};
          int64_t r = 0;
          for (int64_t x = v[0]; x > 1; x >>= 1) ++r;
          return r;
        }
      }
      throw EvalError{"bad function"};
    }
    case Node::kBin: {
      if (n.op == kAnd) return eval_node(n.a, env) && eval_node(n.b, env);
      if (n.op == kOr) return eval_node(n.a, env) || eval_node(n.b, env);
      int64_t a = eval_node(n.a, env), b = eval_node(n.b, env);
      switch (n.op) {
        case kAdd: return checked(static_cast<__int128>(a) + b);
        case kSub: return checked(static_cast<__int128>(a) - b);
        case kMul: return checked(static_cast<__int128>(a) * b);
        case kDiv: return floor_div(a, b);
        case kMod: return floor_mod(a, b);
        case kPow: {
          if (b < 0) throw EvalError{"negative power"};
          __int128 r = 1;
          for (int64_t i = 0; i < b; ++i) r = checked(r * a);
          return static_cast<int64_t>(r);
        }
        case kLt: return a < b;
        case kLe: return a <= b;
        case kGt: return a > b;
        case kGe: return a >= b;
        case kEq: return a == b;
        case kNe: return a != b;
      }
    }
  }
  throw EvalError{"bad expression node"};
}

}  // namespace ca::ops_synth
