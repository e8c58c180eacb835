// The one dtype table: safetensors names (F32, BF16, ...), the aliases tasks and plans spell
// (float32, torch.float32, fp32, bf16, ...), byte sizes and kinds. Every tool asks it.
//
//   const ca::DtypeInfo* d = ca::find_dtype("torch.bfloat16");   // -> {"BF16", 2, float}; nullptr if unknown
//   std::string n = ca::normalize_dtype("fp32");                  // "F32"; "" when unknown
//   std::size_t b = ca::dtype_bytes("F16");                       // 2; throws DtypeError when unknown
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace ca {

struct DtypeInfo {
  const char* name;  // canonical safetensors name
  std::size_t bytes;
  bool is_float;  // a floating-point type (F64 F32 F16 BF16 F8_*); else integer or BOOL
};

// An unknown dtype: callers map it to their layer's error (PlanError, InputError) naming the field.
struct DtypeError : std::runtime_error {
  explicit DtypeError(const std::string& dtype_)
      : std::runtime_error("unknown dtype '" + dtype_ + "'"), dtype(dtype_) {}
  std::string dtype;
};

// Canonical names only ("F32"; "f32" is not one). nullptr when unknown.
const DtypeInfo* dtype_info(const std::string& canonical);
// Canonical names and aliases, case-insensitive, with an optional "torch." prefix. nullptr when unknown.
const DtypeInfo* find_dtype(const std::string& name);
// "float32", "torch.float32", "f32", "F32" -> "F32"; "" when unknown.
std::string normalize_dtype(const std::string& name);
// Bytes per element of a canonical name; throws DtypeError when unknown.
std::size_t dtype_bytes(const std::string& canonical);
// Is a canonical name a floating-point type? Throws DtypeError when unknown.
bool dtype_is_float(const std::string& canonical);
// Every canonical name, in table order.
std::vector<std::string> dtype_names();

}  // namespace ca
