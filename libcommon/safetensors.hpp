// safetensors read and write (the Hugging Face format: 8-byte header length, JSON header, raw data),
// used for tensors between tools and the worker, and for model checkpoints.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca {

struct Tensor {
  std::string dtype;  // safetensors names: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t numel() const;  // InputError on a negative dimension or an overflow
  static std::size_t dtype_size(const std::string& dtype);  // throws InputError for unknown dtypes
  template <class T> T* as() { return reinterpret_cast<T*>(data.data()); }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(data.data()); }
  static Tensor zeros(const std::string& dtype, std::vector<int64_t> shape);
};

// Names in file order are not kept: safetensors sorts by offset, we key by name.
using TensorMap = std::map<std::string, Tensor>;

struct SafetensorsFile {
  TensorMap tensors;
  std::map<std::string, std::string> metadata;
};

SafetensorsFile read_safetensors(const std::string& path);

// The header alone (no tensor data read): to check a checkpoint against its config before allocating.
struct TensorInfo {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, bytes = 0;  // byte range after the header
};
struct SafetensorsHeader {
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};
// Shapes, dtypes and byte ranges checked (sizes without overflow, ranges inside the file).
SafetensorsHeader read_safetensors_header(const std::string& path);

// Written whole or not at all (AtomicFile: temp file, checked writes, fsync, rename).
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// bf16/fp16 <-> float helpers (round to nearest even), for tools comparing in float.
float bf16_to_float(uint16_t v);
uint16_t float_to_bf16(float f);
float fp16_to_float(uint16_t v);
uint16_t float_to_fp16(float f);
// Any float/int tensor to doubles, for comparisons.
std::vector<double> to_doubles(const Tensor& t);
// Elements [begin, begin + count) as doubles into `out`: for tensors too large to convert whole.
void to_doubles(const Tensor& t, std::size_t begin, std::size_t count, double* out);

}  // namespace ca
