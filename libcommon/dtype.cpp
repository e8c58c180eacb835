// The dtype table: canonical safetensors names, their aliases, sizes and kinds.
#include "libcommon/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <map>

namespace ca {
namespace {

struct Row {
  DtypeInfo info;
  std::vector<const char*> aliases;  // lower case, without "torch."
};

const std::vector<Row>& table() {
  static const std::vector<Row> rows = {
      {{"F64", 8, true}, {"float64", "f64", "double", "fp64"}},
      {{"F32", 4, true}, {"float32", "f32", "float", "fp32"}},
      {{"F16", 2, true}, {"float16", "f16", "half", "fp16"}},
      {{"BF16", 2, true}, {"bfloat16", "bf16"}},
      {{"F8_E4M3", 1, true}, {"float8_e4m3fn", "f8_e4m3"}},
      {{"F8_E5M2", 1, true}, {"float8_e5m2", "f8_e5m2"}},
      {{"I64", 8, false}, {"int64", "i64", "long"}},
      {{"I32", 4, false}, {"int32", "i32", "int"}},
      {{"I16", 2, false}, {"int16", "i16"}},
      {{"I8", 1, false}, {"int8", "i8"}},
      {{"U64", 8, false}, {"uint64", "u64"}},
      {{"U32", 4, false}, {"uint32", "u32"}},
      {{"U16", 2, false}, {"uint16", "u16"}},
      {{"U8", 1, false}, {"uint8", "u8"}},
      {{"BOOL", 1, false}, {"bool"}},
  };
  return rows;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

const DtypeInfo* dtype_info(const std::string& canonical) {
  for (const auto& r : table())
    if (canonical == r.info.name) return &r.info;
  return nullptr;
}

const DtypeInfo* find_dtype(const std::string& name) {
  static const std::map<std::string, const DtypeInfo*> by_name = [] {
    std::map<std::string, const DtypeInfo*> m;
    for (const auto& r : table()) {
      m[lower(r.info.name)] = &r.info;
      for (const char* a : r.aliases) m[a] = &r.info;
    }
    return m;
  }();
  std::string s = name;
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  auto it = by_name.find(lower(s));
  return it == by_name.end() ? nullptr : it->second;
}

std::string normalize_dtype(const std::string& name) {
  const DtypeInfo* d = find_dtype(name);
  return d ? d->name : "";
}

std::size_t dtype_bytes(const std::string& canonical) {
  const DtypeInfo* d = dtype_info(canonical);
  if (!d) throw DtypeError(canonical);
  return d->bytes;
}

bool dtype_is_float(const std::string& canonical) {
  const DtypeInfo* d = dtype_info(canonical);
  if (!d) throw DtypeError(canonical);
  return d->is_float;
}

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  for (const auto& r : table()) names.push_back(r.info.name);
  return names;
}

}  // namespace ca
