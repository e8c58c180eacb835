// Integer expressions of the op catalog ("(s + 2*padding - kernel_size) / stride + 1"): parsed once,
// evaluated many times over an environment of shape dims and sampled arguments. Python semantics
// for / and % (floor), comparisons give 0/1.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ca::ops_synth {

// Names are interned to small integers so an environment is a flat array.
int intern_symbol(const std::string& name);
const std::string& symbol_name(int id);
int symbol_count();

// Variables bound during one op's sampling / shape propagation.
class Env {
 public:
  void set(int sym, int64_t value);
  void set(const std::string& name, int64_t value) { set(intern_symbol(name), value); }
  std::optional<int64_t> get(int sym) const;
  void clear() { used_.clear(); }

 private:
  std::vector<std::pair<int, int64_t>> used_;
};

// Raised by evaluation (unknown variable, division by zero, overflow): the op does not fit here.
struct EvalError {
  std::string what;
};

class Expr {
 public:
  Expr() = default;
  // Throws std::runtime_error with the position on a syntax error.
  static Expr parse(const std::string& text);
  bool empty() const { return nodes_.empty(); }
  const std::string& text() const { return text_; }
  int64_t eval(const Env& env) const;  // throws EvalError
  // Like eval but false instead of throwing.
  bool try_eval(const Env& env, int64_t& out) const;

  struct Node {
    enum Kind : uint8_t { kConst, kVar, kNeg, kNot, kBin, kCall } kind;
    uint8_t op = 0;       // binary operator or function code
    int64_t value = 0;    // constant, or variable symbol
    int a = -1, b = -1;   // child node indices
    std::vector<int> args;
  };

 private:
  int64_t eval_node(int index, const Env& env) const;
  std::string text_;
  std::vector<Node> nodes_;
  int root_ = -1;
  friend class ExprParser;
};

}  // namespace ca::ops_synth
