// Recursive-descent parser and evaluator for plan expressions.
#include "libcommon/bundle/expr.hpp"

#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

namespace ca::bundle {

std::string Value::text() const {
  if (!is_float) return std::to_string(i);
  std::ostringstream s;
  s << f;
  return s.str();
}

struct ExprNode {
  enum Kind { kNumber, kRef, kUnaryMinus, kBinary, kCall } kind;
  Value number;
  std::string name;  // ref text, call name, or operator ("+")
  std::vector<std::shared_ptr<const ExprNode>> kids;
};

namespace {

using NodePtr = std::shared_ptr<const ExprNode>;

// A plan's expressions come from the policy: their size bounds the parser's and the evaluator's
// recursion (300,000 nested parentheses overflowed the stack and ended kernel-check).
constexpr std::size_t kMaxChars = 1024;
constexpr int kMaxNesting = 64;  // parentheses, signs and function calls inside one another

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  NodePtr parse_all() {
    if (s_.size() > kMaxChars) {
      throw ExprError("expression '" + s_.substr(0, 40) + "...': " + std::to_string(s_.size()) +
                      " characters, more than " + std::to_string(kMaxChars) + " (limit: expression length)");
    }
    NodePtr n = parse_sum();
    skip_space();
    if (pos_ != s_.size()) fail(std::string("unexpected '") + s_[pos_] + "'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw ExprError("expression '" + s_ + "': " + what + " at column " + std::to_string(pos_ + 1));
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  static NodePtr binary(const std::string& op, NodePtr a, NodePtr b) {
    auto n = std::make_shared<ExprNode>();
    n->kind = ExprNode::kBinary;
    n->name = op;
    n->kids = {std::move(a), std::move(b)};
    return n;
  }
  NodePtr parse_sum() {
    NodePtr left = parse_product();
    for (;;) {
      if (accept('+')) left = binary("+", left, parse_product());
      else if (accept('-')) left = binary("-", left, parse_product());
      else return left;
    }
  }
  NodePtr parse_product() {
    NodePtr left = parse_unary();
    for (;;) {
      if (accept('*')) left = binary("*", left, parse_unary());
      else if (accept('/')) left = binary("/", left, parse_unary());
      else if (accept('%')) left = binary("%", left, parse_unary());
      else return left;
    }
  }
  // One level of nesting while it lives.
  struct Nested {
    explicit Nested(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail("nested more than " + std::to_string(kMaxNesting) + " levels deep (limit: expression nesting)");
    }
    ~Nested() { --p_.depth_; }
    Parser& p_;
  };
  NodePtr parse_unary() {
    if (accept('-')) {
      Nested level(*this);
      auto n = std::make_shared<ExprNode>();
      n->kind = ExprNode::kUnaryMinus;
      n->kids = {parse_unary()};
      return n;
    }
    if (accept('+')) {
      Nested level(*this);
      return parse_unary();
    }
    return parse_primary();
  }
  NodePtr parse_primary() {
    skip_space();
    if (pos_ >= s_.size()) fail("expected a value");
    char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      Nested level(*this);
      NodePtr n = parse_sum();
      if (!accept(')')) fail("expected ')'");
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return parse_number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') return parse_name();
    fail(std::string("unexpected '") + c + "'");
  }
  NodePtr parse_number() {
    size_t start = pos_;
    bool is_float = false;
    while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                s_[pos_] == 'e' || s_[pos_] == 'E' ||
                                ((s_[pos_] == '-' || s_[pos_] == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')))) {
      if (!std::isdigit(static_cast<unsigned char>(s_[pos_]))) is_float = true;
      ++pos_;
    }
    // C-style suffix "f" on a float literal (2.0f) is accepted.
    if (pos_ < s_.size() && (s_[pos_] == 'f' || s_[pos_] == 'F') && is_float) ++pos_;
    std::string text = s_.substr(start, pos_ - start);
    if (!text.empty() && (text.back() == 'f' || text.back() == 'F')) text.pop_back();
    auto n = std::make_shared<ExprNode>();
    n->kind = ExprNode::kNumber;
    try {
      size_t used = 0;
      if (is_float) n->number = Value::real(std::stod(text, &used));
      else n->number = Value::integer(std::stoll(text, &used));
      if (used != text.size()) throw std::invalid_argument("tail");
    } catch (const std::exception&) {
      pos_ = start;
      fail("bad number '" + text + "'");
    }
    return n;
  }
  std::string identifier() {
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    return s_.substr(start, pos_ - start);
  }
  NodePtr parse_name() {
    std::string name = identifier();
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '(') {
      ++pos_;
      auto n = std::make_shared<ExprNode>();
      n->kind = ExprNode::kCall;
      n->name = name;
      std::vector<NodePtr> args;
      Nested level(*this);
      if (!accept(')')) {
        do args.push_back(parse_sum());
        while (accept(','));
        if (!accept(')')) fail("expected ')' or ','");
      }
      if (name == "cdiv" && args.size() != 2) fail("cdiv takes 2 arguments");
      else if (name == "sqrt" && args.size() != 1) fail("sqrt takes 1 argument");
      else if (name == "pick" && args.size() < 2) fail("pick takes an index and at least one value");
      else if ((name == "min" || name == "max") && args.size() < 2) fail(name + " takes 2 or more arguments");
      else if (name != "cdiv" && name != "min" && name != "max" && name != "sqrt" && name != "pick")
        fail("unknown function '" + name + "' (cdiv, min, max, sqrt, pick)");
      n->kids = std::move(args);
      return n;
    }
    // A dotted reference: segments of identifiers or digits, then an optional [index].
    std::string ref = name;
    while (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      std::string seg = identifier();
      if (seg.empty()) fail("expected a name after '.'");
      ref += "." + seg;
    }
    if (pos_ < s_.size() && s_[pos_] == '[') {
      ++pos_;
      skip_space();
      size_t start = pos_;
      if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      std::string idx = s_.substr(start, pos_ - start);
      if (idx.empty() || idx == "-") fail("expected an integer index");
      if (!accept(']')) fail("expected ']'");
      ref += "[" + idx + "]";
    }
    auto n = std::make_shared<ExprNode>();
    n->kind = ExprNode::kRef;
    n->name = ref;
    return n;
  }

  const std::string& s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

ExprError overflow(const std::string& text) {
  return ExprError("integer overflow in '" + text + "' (integers are 64-bit)");
}

// A function call's value: sqrt (a float), cdiv (integers, rounding up), pick(i, v0, v1, ...) (the
// i-th value: a per-iteration size, DenseNet's 6/12/24/16 layers per block), min and max (a float
// when any argument is one).
Value eval_call(const std::string& name, const std::vector<Value>& args, const std::string& text) {
  if (name == "pick") {
    if (args[0].is_float) throw ExprError("pick needs an integer index in '" + text + "'");
    if (args[0].i < 0 || args[0].i >= static_cast<int64_t>(args.size()) - 1)
      throw ExprError("pick index " + std::to_string(args[0].i) + " is not one of 0.." + std::to_string(args.size() - 2) +
                      " in '" + text + "'");
    return args[static_cast<size_t>(args[0].i) + 1];
  }
  bool any_float = false;
  for (const auto& a : args) any_float |= a.is_float;
  if (name == "sqrt") {  // a float, e.g. the 1 / sqrt(D) of attention as a scalar argument
    const double x = args[0].as_double();
    if (!(x >= 0)) throw ExprError("sqrt of a negative number in '" + text + "'");
    return Value::real(std::sqrt(x));
  }
  if (name == "cdiv") {
    if (any_float) throw ExprError("cdiv needs integers in '" + text + "'");
    if (args[1].i == 0) throw ExprError("cdiv by zero in '" + text + "'");
    int64_t a = args[0].i, b = args[1].i, b1 = 0, sum = 0;
    if (a >= 0 && b > 0) return Value::integer(a / b + (a % b != 0));  // (a + b - 1) / b without the sum
    if (__builtin_sub_overflow(b, 1, &b1) || __builtin_add_overflow(a, b1, &sum) ||
        (sum == std::numeric_limits<int64_t>::min() && b == -1))
      throw overflow(text);
    return Value::integer(sum / b);
  }
  Value best = args[0];
  for (size_t i = 1; i < args.size(); ++i) {
    bool less = args[i].as_double() < best.as_double();
    if ((name == "min") == less) best = args[i];
  }
  if (any_float) best = Value::real(best.as_double());
  return best;
}

Value eval_node(const ExprNode& n, const ExprContext& ctx, const std::string& text) {
  switch (n.kind) {
    case ExprNode::kNumber:
      return n.number;
    case ExprNode::kRef: {
      std::optional<Value> v = ctx.lookup ? ctx.lookup(n.name) : std::nullopt;
      if (!v) throw ExprError("unbound name '" + n.name + "' in '" + text + "'");
      return *v;
    }
    case ExprNode::kUnaryMinus: {
      Value a = eval_node(*n.kids[0], ctx, text);
      if (a.is_float) return Value::real(-a.f);
      if (a.i == std::numeric_limits<int64_t>::min()) throw overflow(text);
      return Value::integer(-a.i);
    }
    case ExprNode::kBinary: {
      Value a = eval_node(*n.kids[0], ctx, text), b = eval_node(*n.kids[1], ctx, text);
      char op = n.name[0];
      if (a.is_float || b.is_float) {
        double x = a.as_double(), y = b.as_double();
        switch (op) {
          case '+': return Value::real(x + y);
          case '-': return Value::real(x - y);
          case '*': return Value::real(x * y);
          case '/': return Value::real(x / y);
          default: return Value::real(std::fmod(x, y));
        }
      }
      if ((op == '/' || op == '%') && b.i == 0) throw ExprError("division by zero in '" + text + "'");
      // 64-bit integers, checked: a plan's arithmetic that leaves them is an error, never a wrapped
      // value (nor, for INT64_MIN / -1, a trap that would end the judge).
      int64_t r = 0;
      bool over = false;
      switch (op) {
        case '+': over = __builtin_add_overflow(a.i, b.i, &r); break;
        case '-': over = __builtin_sub_overflow(a.i, b.i, &r); break;
        case '*': over = __builtin_mul_overflow(a.i, b.i, &r); break;
        default:
          if (a.i == std::numeric_limits<int64_t>::min() && b.i == -1) {
            over = op == '/';
            r = 0;  // INT64_MIN % -1
          } else {
            r = op == '/' ? a.i / b.i : a.i % b.i;
          }
      }
      if (over) throw overflow(text);
      return Value::integer(r);
    }
    case ExprNode::kCall: {
      std::vector<Value> args;
      for (auto& k : n.kids) args.push_back(eval_node(*k, ctx, text));
      return eval_call(n.name, args, text);
    }
  }
  throw ExprError("bad expression");
}

void collect(const ExprNode& n, std::set<std::string>& out) {
  if (n.kind == ExprNode::kRef) out.insert(n.name);
  for (auto& k : n.kids) collect(*k, out);
}

bool integral(const ExprNode& n) {
  if (n.kind == ExprNode::kNumber && n.number.is_float) return false;
  for (auto& k : n.kids)
    if (!integral(*k)) return false;
  return true;
}

}  // namespace

Expr Expr::parse(const std::string& text) {
  Expr e;
  e.text_ = text;
  Parser p(e.text_);
  e.root_ = p.parse_all();
  return e;
}

Expr Expr::constant(int64_t v) { return parse(std::to_string(v)); }

Value Expr::eval(const ExprContext& ctx) const {
  if (!root_) throw ExprError("empty expression");
  return eval_node(*root_, ctx, text_);
}

int64_t Expr::eval_int(const ExprContext& ctx) const {
  Value v = eval(ctx);
  if (v.is_float) throw ExprError("'" + text_ + "' is a float (" + v.text() + "), an integer is needed");
  return v.i;
}

std::set<std::string> Expr::references() const {
  std::set<std::string> out;
  if (root_) collect(*root_, out);
  return out;
}

bool Expr::is_integral() const { return !root_ || integral(*root_); }

}  // namespace ca::bundle
