// Plan expressions: integers and floats, dims, `inputs.N.shape[i]` / `inputs.x.shape[i]`,
// `inputs.N.numel`, scalar init inputs `init.N`, + - * / %, parentheses and cdiv(a,b), min(a,b,...),
// max(a,b,...). Integer arithmetic stays integer (C semantics for / and %); a float literal makes the
// result a float. Parsed once into a tree; evaluated against an ExprContext.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace ca::bundle {

// A malformed expression or one that cannot be evaluated (unbound dim, division by zero, ...).
struct ExprError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Value {
  bool is_float = false;
  int64_t i = 0;
  double f = 0;
  static Value integer(int64_t v) { return Value{false, v, static_cast<double>(v)}; }
  static Value real(double v) { return Value{true, static_cast<int64_t>(v), v}; }
  double as_double() const { return is_float ? f : static_cast<double>(i); }
  std::string text() const;
};

// What names resolve to during evaluation. `lookup` gets a whole dotted reference as written
// ("N", "inputs.0.shape[1]", "init.2") and returns nullopt when it is unbound.
struct ExprContext {
  std::function<std::optional<Value>(const std::string& ref)> lookup;
};

struct ExprNode;

class Expr {
 public:
  Expr() = default;
  // Throws ExprError("expression 'cdiv(N,': expected ')' at column 8").
  static Expr parse(const std::string& text);
  static Expr constant(int64_t v);
  Value eval(const ExprContext& ctx) const;
  int64_t eval_int(const ExprContext& ctx) const;  // ExprError when the value is a float
  // Every reference the expression reads ("N", "inputs.0.shape[0]"), for checks without shapes.
  std::set<std::string> references() const;
  // True when no float literal appears: the value will be an integer.
  bool is_integral() const;
  const std::string& text() const { return text_; }
  bool empty() const { return !root_; }

 private:
  std::shared_ptr<const ExprNode> root_;
  std::string text_;
};

}  // namespace ca::bundle
