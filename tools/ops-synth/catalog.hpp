// The op catalog (datasets/ops/catalog.yaml): torch operator classes with their argument sampling,
// shape rules, code templates and cost estimates, plus the standalone transformers-style modules.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/ops-synth/expr.hpp"

namespace ca::ops_synth {

// A code template: literal text and {placeholders}; "{d1:in_channels}" makes a constructor
// parameter named in_channels, "{keepdim|bool}" renders 0/1 as False/True.
struct Template {
  struct Piece {
    bool literal = true;
    std::string text;    // literal text, or the placeholder's variable name
    std::string param;   // constructor parameter name ("" = inline the value)
    std::string filter;  // "" or "bool"
  };
  std::vector<Piece> pieces;
  std::string source;
  static Template parse(const std::string& text);
};

struct ArgSpec {
  enum Kind { kChoice, kRange, kExpr, kSize, kDivisorOf } kind = kChoice;
  std::string name;
  int sym = -1;
  std::vector<int64_t> int_choices;
  std::vector<std::string> text_choices;  // a choice of literal Python text (floats, strings)
  Expr lo, hi, expr, min, max;
  std::string size_key;
  bool is_size() const { return kind == kSize; }
  bool is_text() const { return kind == kChoice && !text_choices.empty(); }
};

// How the output shape follows from the input shape.
struct OutRule {
  enum Kind { kSame, kList, kChannelsSpatial, kReduce, kSwap, kLast, kScalar } kind = kSame;
  std::vector<Expr> dims;  // kList
  Expr channels, spatial;  // kChannelsSpatial (spatial over variable s; either may be empty)
  Expr dim, keepdim;       // kReduce
  Expr a, b;               // kSwap
  Expr last;               // kLast
};

struct ExtraInput {
  std::string name;
  bool same_shape = true;
  std::vector<Expr> shape;
  std::string dtype = "F32";
  Template make;             // default torch.randn({shape})
  std::string dist = "normal";  // normal | uniform | randint | sign
  Expr dist_high;            // randint upper bound
};

struct OpSpec {
  std::string name, family, api;
  std::vector<int> ranks;
  std::vector<Expr> requires_;
  std::vector<ArgSpec> args;
  Template init;  // empty: no module attribute
  Template forward;
  OutRule out;
  std::string out_dtype = "F32";
  bool terminal = false, stochastic = false;
  Expr flops, bytes;
  uint32_t weight = 10;  // tenths
  std::vector<ExtraInput> extras;
  std::string attr;  // module attribute stem (lower-case name)
};

struct ModuleConstant {
  std::string name;
  int sym = -1;
  std::vector<int64_t> tiny, gpu;
};

struct ModuleSpec {
  std::string name, api, file, source;  // source: the file's text
  std::vector<ModuleConstant> constants;
  std::vector<Expr> requires_;
  struct Tensor {
    std::string name;
    std::vector<Expr> shape;
    std::string dtype = "F32";
  };
  std::vector<Tensor> inputs, outputs;
  std::vector<std::string> init_inputs;
  Expr flops, bytes;
};

struct SizeProfile {
  std::map<std::string, std::vector<int64_t>> lists;
  int64_t max_numel = 0, max_flops = 0;
};

struct StartLayout {
  std::vector<std::string> names;  // module-level constant names for the input dims
  std::vector<std::string> dims;   // size-list key for each dim
};

struct Catalog {
  std::string path;
  int version = 0;
  std::map<std::string, SizeProfile> sizes;
  std::map<int, StartLayout> starts;
  std::vector<OpSpec> ops;
  std::vector<ModuleSpec> modules;

  // Loads and checks the catalog; throws ca::InputError naming the entry and field.
  static Catalog load(const std::string& path);
  const OpSpec* find_op(const std::string& name) const;
  std::vector<std::string> families() const;
};

// datasets/ops/catalog.yaml under ca::data_dir().
std::string default_catalog_path();

}  // namespace ca::ops_synth
