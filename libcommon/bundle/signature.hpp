// Kernel signatures from NVRTC's lowered (Itanium-mangled) names, with the PTX .entry parameter list
// as the fallback for extern "C" kernels: what the plan's arguments are checked against.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace ca::bundle {

struct ParamType {
  enum Kind { kPointer, kInteger, kFloat, kOther } kind = kOther;
  std::string text;       // C++ spelling: "const float*", "int", "__half", "float4*"
  bool is_const = false;  // pointee is const (pointers)
  // Pointers: the safetensors dtype of the pointee ("F32"), "" for void* (any buffer);
  // vector types (float4) give their element dtype and `lanes`.
  std::string dtype;
  int lanes = 1;
  int size_bytes = 0;  // scalars: 1, 2, 4 or 8
};

struct KernelSignature {
  std::string mangled;
  std::string name;              // the unqualified function name
  std::vector<ParamType> params;
  bool from_mangled = false;     // false: only sizes and int/float from the PTX (extern "C")
};

// Parses `_Z9scale_addPKfS0_Pfif`; nullopt for names it does not understand (never throws).
std::optional<KernelSignature> demangle_kernel(const std::string& mangled);
// Parameters of `.entry <mangled>(...)` in the PTX text: .u64 -> pointer-sized, .f32 -> float, ...
std::optional<KernelSignature> ptx_signature(const std::string& ptx, const std::string& mangled);

}  // namespace ca::bundle
