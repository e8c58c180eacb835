// What a module's PTX makes the GPU execute, read the way ptxas reads it, so that no spelling can
// change the answer: comments removed, whitespace of any kind (newlines too) between an opcode and
// its modifiers ignored, the text split into functions by its braces and into instructions at ';'.
//
//   PtxModule m = scan_ptx(r.ptx);
//   auto per_kernel = kernel_precisions(m, {"_Z7softmaxILi256EEvPKfPfi"});  // {"_Z7...": "fp32"}
//   for (auto& s : m.externs) if (is_heap_symbol(s)) ... refuse
//
// Precision is the lowest class of any instruction a kernel can execute: its own body, and every
// .func it can reach (calls, addresses taken, function pointers in module variables, .alias; a
// reachable indirect call reaches every function and kernel of the module: a computed address
// can land anywhere in its code). Instructions in a kernel that is never launched, and that no
// launched one can reach, do not count. Integer emulation of narrow formats (bf16 kept in integers, widened with a shift)
// has no opcode to find: the calibrated tolerance judges it, not this scan.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ca::bundle {

// The precision classes from the lowest: fp8 (and the narrower float types), int8 (dp4a/dp2a,
// integer MMA, float -> 8-bit integer conversion), fp16, bf16, tf32, fp32 (fp64 is fp32 here).
const std::vector<std::string>& precision_order();
// The lower of two classes ("fp16" and "tf32" -> "fp16"); an unknown name counts as fp32.
std::string lower_precision(const std::string& a, const std::string& b);
// The class of one instruction's opcode and modifiers: "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
// -> fp16, "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32" -> fp16 (f16 operands are not spelled),
// "cvt.rn.satfinite.e4m3x2.f32" -> fp8, "dp4a.s32.s32" -> int8, "fma.rn.f32" -> fp32.
std::string instruction_precision(const std::string& opcode_with_modifiers);

struct PtxFunction {
  std::string name;
  bool entry = false;          // .entry (a kernel); else .func
  bool defined = false;        // has a body
  bool external = false;       // .extern: provided by the driver (malloc, vprintf, ...)
  std::string precision = "fp32";   // of its own instructions
  std::set<std::string> refs;       // every name its body mentions (callees, variables, labels, ...)
  std::set<std::string> callees;    // direct call targets
  bool indirect_call = false;       // calls through a register
};

struct PtxModule {
  std::map<std::string, PtxFunction> functions;               // .entry and .func, by name
  std::map<std::string, std::set<std::string>> variables;     // module variable -> names in its initializer;
                                                              // an .alias -> the function it names
  std::set<std::string> externs;                              // .extern .func declarations
  std::set<std::string> call_targets;                         // every direct call target of every body
  std::vector<std::string> instructions;                      // every instruction, normalized ("call.uni (retval0), malloc, (param0)")
  std::vector<std::string> entries() const;
};

// Scans the PTX under every reading of its string literals that ptxas could use (with and without
// backslash escapes, ending at a newline or not) and merges them: a function's precision is the
// lowest any reading finds, its references the union. Never throws.
PtxModule scan_ptx(const std::string& ptx);
// Comments replaced by a space (newlines kept); string literals blanked. `escapes`: a backslash
// escapes the next character in a string; `multiline`: a string may span lines.
std::string strip_ptx_comments(const std::string& ptx, bool escapes = true, bool multiline = false);
// One instruction's text with its spelling removed: runs of whitespace (and any control or
// non-ASCII byte) become one space, none around a '.', labels, braces and the guard predicate
// dropped: "@%p1 mma\n  .sync .aligned ..." -> "mma.sync.aligned ...".
std::string normalize_instruction(const std::string& text);

// The precision of each kernel (mangled names) with everything it can reach; a name the module
// lacks gets the whole module's lowest precision (the safe answer).
std::map<std::string, std::string> kernel_precisions(const PtxModule& m, const std::vector<std::string>& kernels);
// The .func and .entry names a kernel can execute (itself included).
std::set<std::string> reachable_functions(const PtxModule& m, const std::string& kernel);

// The lowest precision of any instruction in the text (every function, launched or not).
std::string ptx_precision(const std::string& ptx);
// The lowest precision the given kernels (mangled names) can execute: what a record's precision
// rests on. No kernels: fp32.
std::string ptx_precision(const std::string& ptx, const std::vector<std::string>& kernels);

// The device heap: malloc, free, realloc, calloc, __nv_aligned_device_malloc, cudaMalloc/cudaFree,
// and operator new/delete in any form (_Znwm, _Znam, _ZdlPv, _ZdaPvm, nothrow and aligned ones).
bool is_heap_symbol(const std::string& name);
// The functions outside a bundle a kernel may call: vprintf (printf, refused by its own rule) and
// __assertfail (assert).
bool is_allowed_extern(const std::string& name);

}  // namespace ca::bundle
