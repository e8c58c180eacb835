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
// Shapes, dtypes and byte ranges checked (sizes without overflow, ranges inside the file, no two
// tensors sharing a byte).
SafetensorsHeader read_safetensors_header(const std::string& path);
// The same checks on a header already in memory (`bytes` is the whole file or at least its header;
// `file_size` the file's size): for a memory-mapped file.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, uint64_t file_size, const std::string& path);

// A file mapped read-only (for checkpoints larger than memory): pages come in as they are touched
// and release() gives a range's pages back, so a reader's resident memory stays near what it reads
// at once. Only a regular file is mapped (a FIFO or device named by a hostile index is refused).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // InputError when it cannot be opened or is not a regular file
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  void will_need(uint64_t offset, uint64_t bytes) const;  // read-ahead hint
  void release(uint64_t offset, uint64_t bytes) const;    // drop the whole pages inside the range from this process

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// The layout write_safetensors gives a set of tensors: name order, 8-byte aligned data, the JSON
// header padded with spaces. One place, so a sharded checkpoint's files are laid out exactly as a
// single file is.
struct SafetensorsPlanEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  uint64_t file_offset = 0;  // filled by plan_safetensors: where the tensor's bytes start in the file
};
struct SafetensorsPlan {
  std::string header;  // the first 8 + header bytes of the file (length prefix included)
  std::vector<SafetensorsPlanEntry> entries;  // name order, file_offset set
  uint64_t file_size = 0;
};
SafetensorsPlan plan_safetensors(std::vector<SafetensorsPlanEntry> entries, const std::map<std::string, std::string>& metadata);

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
// `count` elements of dtype F32, F64, BF16 or F16 at `src` (any alignment) converted; InputError for
// another dtype.
void convert_elements(const void* src, const std::string& dtype, std::size_t count, float* out);
void convert_elements(const void* src, const std::string& dtype, std::size_t count, double* out);
// Floats to F32, BF16 (round to nearest even) or F16 at `dst`; InputError for another dtype.
void convert_floats(const float* src, std::size_t count, const std::string& dtype, void* dst);
// Elements [begin, begin + count) as doubles into `out`: for tensors too large to convert whole.
void to_doubles(const Tensor& t, std::size_t begin, std::size_t count, double* out);

}  // namespace ca
